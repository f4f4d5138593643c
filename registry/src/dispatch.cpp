// Dispatch: op handles, the ordered candidate tables, and running a validated call.
#include <algorithm>
#include <climits>
#include <cstring>

#include "error.hpp"
#include "format.hpp"
#include "layout_cache.hpp"
#include "op_validators.hpp"
#include "registry.hpp"

namespace dlfuse {
namespace {

// 0 for the latest preference naming the plugin (for this op or every op), INT_MAX if none.
int preference_rank(const dlfuse_registry* r, const std::string& op, const std::string& plugin) {
  for (size_t i = 0; i < r->preferences.size(); ++i) {
    const auto& [pref_op, pref_plugin] = r->preferences[i];
    if (pref_plugin == plugin && (pref_op.empty() || pref_op == op)) return static_cast<int>(i);
  }
  return INT_MAX;
}

OpTable build_table(const dlfuse_registry* r, const std::string& op) {
  OpTable t;
  t.spec = find_spec_locked(r, op);
  for (const auto& p : r->plugins) {
    if (!p->available) continue;
    const int pref = preference_rank(r, op, p->name);
    // An op added after the plugin's ABI minor is not the plugin's, whatever it named so.
    if (t.spec && op_since_minor(t.spec) > p->api.abi_minor) continue;
    for (const Kernel& k : p->kernels)
      if (k.op == op) t.candidates.push_back({p.get(), &k, pref});
  }
  // Preferred plugins first, then higher priority, then load order: deterministic.
  std::stable_sort(t.candidates.begin(), t.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.pref != b.pref) return a.pref < b.pref;
    if (a.kernel->priority != b.kernel->priority) return a.kernel->priority > b.kernel->priority;
    return a.plugin->index < b.plugin->index;
  });
  return t;
}

// The first candidate serving (device type, dtype) in the order preference, then the
// kernel's priority for that dtype (ABI 1.2; its one priority before), then load order.
const Candidate* pick(const OpTable& t, int32_t device_type, DLDataType dtype) {
  const Candidate* best = nullptr;
  int32_t best_prio = 0;
  for (const Candidate& c : t.candidates) {
    int32_t prio;
    if (!c.kernel->accepts(device_type, dtype, &prio)) continue;
    if (!best || c.pref < best->pref ||
        (c.pref == best->pref && (prio > best_prio || (prio == best_prio && c.plugin->index < best->plugin->index)))) {
      best = &c;
      best_prio = prio;
    }
  }
  return best;
}

dlfuse_status_t no_kernel(const dlfuse_op* op, const OpTable& t, DLDevice dev, DLDataType dtype) {
  std::string offered;
  for (const Candidate& c : t.candidates) {
    offered += offered.empty() ? "" : "; ";
    offered += c.plugin->name + " (" + device_type_name(c.kernel->device_type) + ":";
    for (size_t i = 0; i < c.kernel->dtypes.size(); ++i) offered += (i ? "," : " ") + dtype_name(c.kernel->dtypes[i]);
    offered += ")";
  }
  return fail(DLFUSE_STATUS_UNSUPPORTED, "%s: no kernel for device %s and dtype %s; available: %s", op->name.c_str(),
              device_type_name(dev.device_type).c_str(), dtype_name(dtype).c_str(),
              offered.empty() ? "none (no available plugin offers this op)" : offered.c_str());
}

}  // namespace

const OpSpec* find_spec_locked(const dlfuse_registry* r, const std::string& name) {
  if (const OpSpec* core = find_core_op(name.c_str())) return core;
  for (const auto& d : r->declared)
    if (name == d->schema.name) return d->spec.get();
  return nullptr;
}

bool offered_locked(const dlfuse_registry* r, const std::string& name) {
  for (const auto& p : r->plugins)
    for (const Kernel& k : p->kernels)
      if (p->available && k.op == name) return true;
  return false;
}

const OpSpec* spec_of(const dlfuse_op* op) {
  return op->registry->current.load(std::memory_order_acquire)->by_op_id[op->id].spec;
}

dlfuse_op* op_handle_locked(dlfuse_registry* r, const std::string& name) {
  auto it = r->ops.find(name);
  if (it != r->ops.end()) return it->second.get();
  auto op = std::make_unique<dlfuse_op>();
  op->registry = r;
  op->id = static_cast<int32_t>(r->ops_by_id.size());
  op->name = name;
  dlfuse_op* raw = op.get();
  r->ops_by_id.push_back(raw);
  r->ops.emplace(name, std::move(op));
  publish_snapshot_locked(r);
  return raw;
}

void publish_snapshot_locked(dlfuse_registry* r) {
  auto snap = std::make_unique<Snapshot>();
  snap->by_op_id.reserve(r->ops_by_id.size());
  for (const dlfuse_op* op : r->ops_by_id) snap->by_op_id.push_back(build_table(r, op->name));
  for (const auto& p : r->plugins)
    if (p->available) snap->service_order.push_back(p.get());
  std::stable_sort(snap->service_order.begin(), snap->service_order.end(), [r](const Plugin* a, const Plugin* b) {
    return preference_rank(r, "", a->name) < preference_rank(r, "", b->name);
  });
  r->current.store(snap.get(), std::memory_order_release);
  r->snapshots.push_back(std::move(snap));
}

dlfuse_status_t call_op(dlfuse_op* op, const DLTensor* const* inputs, int32_t num_inputs, DLTensor* const* outputs,
                        int32_t num_outputs, const dlfuse_attr_t* attrs, int32_t num_attrs, void* stream) {
  const Snapshot* snap = op->registry->current.load(std::memory_order_acquire);
  const OpTable& table = snap->by_op_id[op->id];
  const OpSpec* spec = table.spec;
  // A caller of an older ABI minor passes only the inputs its minor had; the rest are absent.
  const DLTensor* widened[kMaxArgs] = {};
  if (spec && inputs && num_inputs == op_min_inputs(spec) && num_inputs < op_num_inputs(spec)) {
    for (int32_t i = 0; i < num_inputs; ++i) widened[i] = inputs[i];
    inputs = widened;
    num_inputs = op_num_inputs(spec);
  }
  CallPlan plan;
  if (auto s = validate_call(spec, op->name.c_str(), inputs, num_inputs, outputs, num_outputs, attrs, num_attrs, &plan))
    return s;
  const Candidate* c = pick(table, plan.device.device_type, plan.dtype);
  if (!c) return no_kernel(op, table, plan.device, plan.dtype);
  if (plan.device.device_id < 0 || plan.device.device_id >= c->plugin->device_count)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: tensors are on %s; expected device_id 0..%d (plugin '%s' has %d devices)", op->name.c_str(),
                device_name(plan.device).c_str(), c->plugin->device_count - 1, c->plugin->name.c_str(),
                c->plugin->device_count);
  if (plan.skip) return DLFUSE_STATUS_OK;
  if (spec && num_inputs > op_min_inputs(spec) && !(c->kernel->flags & DLFUSE_KERNEL_TAKES_V1_1_INPUTS)) {
    // The kernel reads the op's 1.0 inputs only, so the inputs appended since must be absent.
    for (int32_t i = op_min_inputs(spec); i < num_inputs; ++i)
      if (inputs[i])
        return fail(DLFUSE_STATUS_UNSUPPORTED,
                    "%s: plugin '%s' takes the op's %d ABI 1.0 inputs only (its kernel does not declare "
                    "DLFUSE_KERNEL_TAKES_V1_1_INPUTS); input '%s' (ABI 1.1) is given: pass the 1.0 inputs, or prefer "
                    "a plugin that takes it",
                    op->name.c_str(), c->plugin->name.c_str(), op_min_inputs(spec), op_input_name(spec, i));
    num_inputs = op_min_inputs(spec);
  }

  char err[1024];
  err[0] = '\0';
  dlfuse_kernel_args_t args;
  args.struct_size = sizeof args;
  args.op = op->name.c_str();
  args.inputs = inputs;
  args.num_inputs = num_inputs;
  args.outputs = outputs;
  args.num_outputs = num_outputs;
  args.attrs = plan.attrs;
  args.num_attrs = plan.num_attrs;
  args.stream = stream;
  args.err = err;
  args.err_size = sizeof err;
  int status;
  try {
    status = c->kernel->fn(c->plugin->state, c->kernel->kernel_data, &args);
  } catch (const std::exception& e) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: plugin '%s' threw a C++ exception across the C ABI: %s", op->name.c_str(),
                c->plugin->name.c_str(), e.what());
  } catch (...) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: plugin '%s' threw across the C ABI", op->name.c_str(),
                c->plugin->name.c_str());
  }
  if (status == DLFUSE_STATUS_OK) return DLFUSE_STATUS_OK;
  err[sizeof err - 1] = '\0';
  if (!is_known_status(status))
    return fail(DLFUSE_STATUS_INTERNAL, "%s: plugin '%s' returned status %d, which is not a dlfuse_status_t: %s",
                op->name.c_str(), c->plugin->name.c_str(), status, err[0] ? err : "(no message)");
  return fail(static_cast<dlfuse_status_t>(status), "%s: plugin '%s': %s", op->name.c_str(), c->plugin->name.c_str(),
              err[0] ? err : "(the plugin gave no message)");
}

dlfuse_status_t resolve_op(dlfuse_op* op, int32_t device_type, DLDataType dtype, int32_t* plugin) {
  const Snapshot* snap = op->registry->current.load(std::memory_order_acquire);
  const OpTable& table = snap->by_op_id[op->id];
  if (table.candidates.empty())
    return fail(DLFUSE_STATUS_NOT_FOUND, "dlfuse_op_resolve: no available plugin offers op '%s'", op->name.c_str());
  const Candidate* c = pick(table, device_type, dtype);
  if (!c) return no_kernel(op, table, DLDevice{static_cast<DLDeviceType>(device_type), 0}, dtype);
  *plugin = c->plugin->index;
  return DLFUSE_STATUS_OK;
}

bool serving_kernel_takes_newer_inputs(dlfuse_op* op, int32_t device_type, DLDataType dtype) {
  const Snapshot* snap = op->registry->current.load(std::memory_order_acquire);
  const Candidate* c = pick(snap->by_op_id[op->id], device_type, dtype);
  return c && (c->kernel->flags & DLFUSE_KERNEL_TAKES_V1_1_INPUTS);
}

Plugin* device_plugin(dlfuse_registry* r, int32_t device_type, const char* caller) {
  const Snapshot* snap = r->current.load(std::memory_order_acquire);
  for (Plugin* p : snap->service_order)
    if (p->api.device_type == device_type) return p;
  fail(DLFUSE_STATUS_NOT_FOUND, "%s: no available plugin serves device type %s", caller,
       device_type_name(device_type).c_str());
  return nullptr;
}

}  // namespace dlfuse

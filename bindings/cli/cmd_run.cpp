// dlfuse run OP|all: run the ops on random data through the registry, check every result
// against the float64 reference (the conformance suite's checker) and time the calls.
// `run all` runs every available plugin; with a preference (--prefer, DLFUSE_PREFER) only
// the rows dispatch would pick, so the output shows what a program would get.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli.h"
#include "dtypes.h"
#include "op_case.h"
#include "schema_checks.h"
#include "schema_draw.h"
#include "schema_grad.h"

namespace dlfuse_cli {
namespace {

using namespace dlfuse_conformance;

struct Target {
  int32_t plugin;  // -1: whatever the registry dispatches to
  DLDevice dev;
};

struct RunConfig {
  std::vector<long long> shape;  // empty: the defaults
  long long batch = 0;
  int act = DLFUSE_ACT_RELU;
  double multiplier = 1.0;
  int repeat = 5;
  uint64_t seed = 1;
};

CaseSpec make_spec(OpKind op, const RunConfig& c) {
  CaseSpec s;
  s.name = "run";
  s.op = op;
  s.act = c.act;
  s.multiplier = c.multiplier;
  const std::vector<int64_t> batch = c.batch > 0 ? std::vector<int64_t>{c.batch} : std::vector<int64_t>{};
  if (is_matmul_op(op)) {
    std::vector<long long> mkn = c.shape.empty() ? std::vector<long long>{128, 128, 128} : c.shape;
    if (mkn.size() != 3) throw UsageError("matmul ops take --shape M,K,N");
    s.M = mkn[0];
    s.K = mkn[1];
    s.N = mkn[2];
    s.a_batch = s.b_batch = batch;
    s.bias_shape = {s.N};
    s.residual_shape = {s.M, s.N};  // the residual op and its backward: broadcast over any batch
  } else {
    std::vector<long long> mn = c.shape.empty() ? std::vector<long long>{512, 512} : c.shape;
    if (mn.size() == 3) mn = {mn[0], mn[2]};  // `run all --shape M,K,N`: the M x N output
    if (mn.size() != 2) throw UsageError("add_mul ops take --shape M,N");
    s.x_shape = batch;
    s.x_shape.insert(s.x_shape.end(), {mn[0], mn[1]});
    s.y_shape = s.x_shape;
    s.bias_shape = {mn[1]};
  }
  return s;
}

std::string format_time(double us) {
  char b[32];
  if (us < 1000)
    std::snprintf(b, sizeof b, "%.1f us", us);
  else
    std::snprintf(b, sizeof b, "%.2f ms", us / 1000);
  return b;
}

void print_row(const std::string& plugin, const std::string& dev, const std::string& op, const std::string& dt,
               const std::string& shape, const std::string& time, const std::string& err, const std::string& ratio,
               const std::string& result) {
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-8s %-30s %-9s %-18s %11s %10s %9s %s", plugin.c_str(), dev.c_str(),
                op.c_str(), dt.c_str(), shape.c_str(), time.c_str(), err.c_str(), ratio.c_str(), result.c_str());
  std::cout << line << "\n";
}

// Runs one op once for warm-up, `repeat` timed times, then checks the last result.
bool run_one(dlfuse_registry_t reg, const Target& t, OpKind op, DLDataType dt, const RunConfig& cfg) {
  const CaseSpec spec = make_spec(op, cfg);
  std::string name = t.plugin >= 0 ? plugin_info(reg, t.plugin).name : "?";
  dlfuse_op_t h = nullptr;
  int32_t chosen = -1;
  if (dlfuse_op_get(reg, op_name(op), &h) == DLFUSE_STATUS_OK &&
      dlfuse_op_resolve(h, t.dev.device_type, dt, &chosen) == DLFUSE_STATUS_OK)
    name = plugin_info(reg, chosen).name;
  const std::string dev = device_name(t.dev), shape = shape_summary(spec), dname = dtype_name(dt);
  auto fail = [&](const std::string& why) {
    print_row(name, dev, op_name(op), dname, shape, "-", "-", "-", "FAIL");
    std::cout << "      " << why << "\n";
    return false;
  };
  if (t.plugin >= 0 && chosen != t.plugin) {  // the row names the plugin asked for
    const std::string other = chosen >= 0 ? name : "";
    name = plugin_info(reg, t.plugin).name;
    return fail(name + " serves no " + dname + " " + op_name(op) + " on " + device_type_name(t.dev.device_type) +
                (other.empty() ? "" : "; the registry dispatches it to " + other));
  }

  PreparedCall call(reg, t.dev, dt);
  std::string err;
  if (!call.prepare(spec, cfg.seed, &err)) return fail("setup: " + err);
  std::vector<double> times;
  for (int i = 0; i <= cfg.repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    dlfuse_status_t st = call.invoke();
    if (st == DLFUSE_STATUS_OK) st = call.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (st != DLFUSE_STATUS_OK) return fail("call failed: " + last_error(st));
    if (i > 0) times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());  // 0: warm-up
  }
  std::sort(times.begin(), times.end());
  CheckStats stats;
  if (!call.verify(&stats, &err)) return fail("readback: " + err);
  char abs_err[32], ratio[32];
  std::snprintf(abs_err, sizeof abs_err, "%.3g", stats.max_abs);
  std::snprintf(ratio, sizeof ratio, "%.3g", stats.max_ratio);
  print_row(name, dev, op_name(op), dname, shape, format_time(times[times.size() / 2]), abs_err, ratio,
            stats.bad ? "FAIL" : "PASS");
  if (stats.bad) std::cout << "      " << stats.bad << " bad elements; first: " << stats.first_bad << "\n";
  return stats.bad == 0;
}

// An op of a plugin's own (it has a schema, no float64 reference here): one call drawn from
// its schema at --seed, timed as run_one's, checked as `dlfuse conform` checks it
// (schema_checks.h): against the plugin's float64 kernel (float32 for float16/bfloat16) where
// it has one, and for a backward by central differences of its forward.
enum class Outcome { kFail, kPass, kUnchecked };

Outcome run_declared_one(dlfuse_registry_t reg, const Target& t, const std::string& op, DLDataType dt,
                         const RunConfig& cfg) {
  const std::string dev = device_name(t.dev), dname = dtype_name(dt);
  std::string name = "?";
  dlfuse_op_t h = nullptr;
  int32_t chosen = -1;
  if (dlfuse_op_get(reg, op.c_str(), &h) == DLFUSE_STATUS_OK &&
      dlfuse_op_resolve(h, t.dev.device_type, dt, &chosen) == DLFUSE_STATUS_OK)
    name = plugin_info(reg, chosen).name;
  auto fail = [&](const std::string& shape, const std::string& why) {
    print_row(name, dev, op, dname, shape, "-", "-", "-", "FAIL");
    std::cout << "      " << why << "\n";
    return Outcome::kFail;
  };
  if (t.plugin >= 0 && chosen != t.plugin)
    return fail("-", std::string(plugin_info(reg, t.plugin).name) + " serves no " + dname + " " + op + " on " +
                         device_type_name(t.dev.device_type));
  SchemaOp sop;
  std::string err;
  if (!SchemaOp::lookup(reg, op, &sop, &err)) return fail("-", err);
  std::mt19937_64 rng(cfg.seed);
  Problem p;
  if (!draw_problem(sop, dt, rng, default_attrs(sop.schema), true, &p, &err)) return fail("-", err);
  SchemaArgs args;
  std::string shape = p.out.empty() ? "-" : shape_text(p.out[0]);
  const std::string suffix = "_backward";
  SchemaOp fwd;
  const bool backward = op.size() > suffix.size() &&
                        op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                        SchemaOp::lookup(reg, op.substr(0, op.size() - suffix.size()), &fwd, &err);
  if (backward) {
    Problem fp;
    if (!draw_problem(fwd, dt, rng, default_attrs(fwd.schema), true, &fp, &err) ||
        !backward_args(reg, t.dev, dt, fwd, sop, fp, rng, &args, &err))
      return fail("-", err);
    shape = shape_text(args.in[0]->shape());  // grad_out's
  } else {
    for (const auto& s : p.in)
      args.in.push_back(s ? std::optional<HostTensor>(random_tensor(dt, *s, rng)) : std::nullopt);
    for (const auto& s : p.out) args.out.push_back(poisoned_tensor(dt, s));
    args.alias.assign(p.out.size(), -1);
    args.attrs = p.attrs;
  }
  std::vector<double> times;
  const SchemaResult r = run_schema_call(reg, t.dev, sop, args, -1, cfg.repeat, &times);
  if (!r.ran || r.status != DLFUSE_STATUS_OK) return fail(shape, "call failed: " + r.message);
  std::sort(times.begin(), times.end());
  // The value checks of conformance's first draw (the defaults at this seed).
  SchemaCheckOptions so;
  so.seed = cfg.seed;
  so.draws = 1;
  so.threads = 0;
  so.repeats = 1;
  so.bad_inputs = false;
  so.wanted = [](const std::string& c) { return c == "gradcheck:0" || c.rfind("draw:0:vs_", 0) == 0; };
  std::vector<SchemaRow> rows = check_schema_kernel(reg, op, dt, t.dev, so);
  // A forward with nothing to compare with (its float64 call, say): its backward's gradient
  // check, which runs this forward, where the op has a backward.
  SchemaOp bwd;
  if (rows.empty() && !backward && SchemaOp::lookup(reg, op + suffix, &bwd, &err))
    rows = check_schema_kernel(reg, op + suffix, dt, t.dev, so);
  double max_abs = 0, max_ratio = 0;
  bool pass = true;
  for (const SchemaRow& row : rows) {
    pass &= row.pass;
    max_abs = std::max(max_abs, row.max_abs);
    max_ratio = std::max(max_ratio, row.max_ratio);
  }
  char a[32], q[32];
  std::snprintf(a, sizeof a, "%.3g", max_abs);
  std::snprintf(q, sizeof q, "%.3g", max_ratio);
  const bool checked = !rows.empty();
  print_row(name, dev, op, dname, shape, format_time(times[times.size() / 2]), checked ? a : "-", checked ? q : "-",
            !checked ? "UNCHECKED"
            : pass   ? "PASS"
                     : "FAIL");
  if (!checked) std::cout << "      no float64 kernel to compare with and no backward to check it by\n";
  for (const SchemaRow& row : rows)
    if (!row.pass) std::cout << "      " << row.name << ": " << row.detail << "\n";
  return !checked ? Outcome::kUnchecked : pass ? Outcome::kPass : Outcome::kFail;
}

std::vector<DLDataType> declared_dtypes(dlfuse_registry_t reg, int32_t plugin, const std::string& op,
                                        int32_t device_type) {
  std::vector<DLDataType> out;
  const dlfuse_plugin_info_t info = plugin_info(reg, plugin);
  for (int32_t k = 0; k < info.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    if (dlfuse_registry_kernel_info(reg, plugin, k, &ki) != DLFUSE_STATUS_OK) continue;
    if (ki.op != op || ki.device_type != device_type) continue;
    for (int32_t d = 0; d < ki.num_dtypes; ++d)
      if (dtype_supported(ki.dtypes[d])) out.push_back(ki.dtypes[d]);
  }
  return out;
}

// Applies --prefer a,b (a first) on top of DLFUSE_PREFER. false + *err: a name no
// loaded plugin has (a typo would otherwise silently change nothing).
bool apply_prefer(dlfuse_registry_t reg, const std::string& list, std::string* err) {
  std::vector<std::string> names;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    if (comma > at) names.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  if (names.empty()) {
    *err = "--prefer: expected plugin names separated by commas, got '" + list + "'";
    return false;
  }
  int32_t count = 0;
  dlfuse_registry_plugin_count(reg, &count);
  for (const std::string& n : names) {
    bool known = false;
    for (int32_t p = 0; p < count && !known; ++p) known = plugin_info(reg, p).name == n;
    if (!known) {
      *err = "--prefer: no loaded plugin is named '" + n + "' (see `dlfuse list`)";
      return false;
    }
  }
  // The latest prefer() call wins: apply the last name first.
  for (auto it = names.rbegin(); it != names.rend(); ++it) dlfuse_registry_prefer(reg, nullptr, it->c_str());
  return true;
}

bool dispatches_to(dlfuse_registry_t reg, const std::string& op, int32_t device_type, DLDataType dt, int32_t plugin) {
  dlfuse_op_t h = nullptr;
  int32_t chosen = -1;
  return dlfuse_op_get(reg, op.c_str(), &h) == DLFUSE_STATUS_OK &&
         dlfuse_op_resolve(h, device_type, dt, &chosen) == DLFUSE_STATUS_OK && chosen == plugin;
}

std::vector<Target> plugin_targets(dlfuse_registry_t reg, int32_t plugin, long long device_id) {
  std::vector<Target> out;
  const dlfuse_plugin_info_t info = plugin_info(reg, plugin);
  for (int32_t id = 0; id < info.device_count; ++id)
    if (device_id < 0 || device_id == id) out.push_back({plugin, DLDevice{DLDeviceType(info.device_type), id}});
  return out;
}

}  // namespace

int cmd_run(const Args& args) {
  if (args.positional.size() != 1) throw UsageError("run takes one op name or 'all'");
  const std::string what = args.positional[0];
  std::vector<OpKind> ops;
  OpKind one;
  std::string declared;  // an op a plugin declared (its schema), known once the registry is up
  if (what == "all")
    ops.assign(std::begin(kAllOps), std::end(kAllOps));
  else if (parse_op(what, &one))
    ops = {one};
  else
    declared = what;

  RunConfig cfg;
  if (args.has("--shape")) cfg.shape = parse_int_list(args.get("--shape", ""), "--shape");
  cfg.batch = args.get_int("--batch", 0);
  cfg.multiplier = args.get_double("--multiplier", 1.0);
  cfg.repeat = int(args.get_int("--repeat", what == "all" ? 3 : 5));
  cfg.seed = uint64_t(args.get_int("--seed", 1));
  if (cfg.repeat < 1 || cfg.batch < 0) throw UsageError("--repeat must be >= 1 and --batch >= 0");
  if (args.has("--act") && !parse_activation(args.get("--act", ""), &cfg.act))
    throw UsageError("unknown activation '" + args.get("--act", "") + "'");
  DLDataType dtype{};
  const bool dtype_given = args.has("--dtype");
  if (dtype_given && !parse_dtype(args.get("--dtype", ""), &dtype))
    throw UsageError("unknown dtype '" + args.get("--dtype", "") + "'");
  int32_t device_type = kDLCPU;
  if (args.has("--device-type") && !parse_device_type(args.get("--device-type", ""), &device_type))
    throw UsageError("unknown device type '" + args.get("--device-type", "") + "'");
  const long long device_id = args.get_int("--device-id", -1);

  if (!declared.empty() &&
      (args.has("--shape") || args.has("--batch") || args.has("--act") || args.has("--multiplier")))
    throw UsageError(
        "a plugin's own op draws its shapes and attributes from its schema: --shape, --batch, --act and "
        "--multiplier are for the core ops (--seed draws another call)");
  if (args.has("--plugin") && args.has("--prefer"))
    throw UsageError("--plugin and --prefer exclude each other (--plugin runs that plugin alone)");

  dlfuse_registry_t reg = nullptr;
  dlfuse_status_t st = dlfuse_registry_create(nullptr, &reg);
  if (st != DLFUSE_STATUS_OK) {
    std::cerr << "dlfuse: cannot create the registry: " << last_error(st) << "\n";
    return 1;
  }
  // A preference (the registry applied DLFUSE_PREFER at creation) makes `run all` run
  // what dispatch picks instead of every plugin.
  const char* env_prefer = std::getenv("DLFUSE_PREFER");
  bool dispatch_only = env_prefer && *env_prefer;
  if (args.has("--prefer")) {
    std::string err;
    if (!apply_prefer(reg, args.get("--prefer", ""), &err)) {
      std::cerr << "dlfuse: " << err << "\n";
      dlfuse_registry_destroy(reg);
      return 1;
    }
    dispatch_only = true;
  }
  std::vector<Target> targets;
  int rc = 0;
  if (args.has("--plugin")) {
    std::string err;
    const int32_t p = find_plugin(reg, args.get("--plugin", ""), &err);
    if (p < 0 || !plugin_info(reg, p).available) {
      std::cerr << "dlfuse: " << (p < 0 ? err : std::string("plugin unavailable: ") + plugin_info(reg, p).reason)
                << "\n";
      dlfuse_registry_destroy(reg);
      return 1;
    }
    targets = plugin_targets(reg, p, device_id);
  } else if (what == "all") {
    int32_t count = 0;
    dlfuse_registry_plugin_count(reg, &count);
    for (int32_t p = 0; p < count; ++p)
      if (plugin_info(reg, p).available)
        for (const Target& t : plugin_targets(reg, p, device_id)) targets.push_back(t);
  } else {
    targets.push_back({-1, DLDevice{DLDeviceType(device_type), int32_t(device_id < 0 ? 0 : device_id)}});
  }

  // After loading: --plugin PATH may be the plugin that declares it.
  if (!declared.empty()) {
    dlfuse_op_t h = nullptr;
    dlfuse_op_schema_t schema{};
    schema.struct_size = sizeof schema;
    if (dlfuse_op_get(reg, declared.c_str(), &h) != DLFUSE_STATUS_OK ||
        dlfuse_op_schema(h, &schema) != DLFUSE_STATUS_OK) {
      dlfuse_registry_destroy(reg);
      throw UsageError("unknown op '" + declared +
                       "': neither a core op nor one a loaded plugin declares (see `dlfuse list`)");
    }
  }
  print_row("PLUGIN", "DEVICE", "OP", "DTYPE", "SHAPE", "TIME", "MAX_ABS", "MAX_RATIO", "RESULT");
  // --plugin always runs that plugin alone, forced, whatever DLFUSE_PREFER says.
  const bool follow_dispatch = dispatch_only && !args.has("--plugin");
  int passed = 0, failed = 0, unchecked = 0;
  for (const Target& t : targets) {
    const std::string pname = t.plugin >= 0 ? plugin_info(reg, t.plugin).name : "";
    // Without a preference, force kernels *and* device services to this row's plugin
    // (docs/abi.md, "Device services"); every target sets its own, so the previous one
    // needs no clearing. With one, the user's order stays and rows dispatch would not
    // send to this plugin are left out.
    if (t.plugin >= 0 && !follow_dispatch) dlfuse_registry_prefer(reg, nullptr, pname.c_str());
    std::vector<std::string> names;
    for (OpKind op : ops) names.push_back(op_name(op));
    if (!declared.empty()) names.push_back(declared);
    for (size_t k = 0; k < names.size(); ++k) {
      std::vector<DLDataType> dtypes;
      if (dtype_given)
        dtypes = {dtype};
      else if (t.plugin >= 0)
        dtypes = declared_dtypes(reg, t.plugin, names[k], t.dev.device_type);
      else
        dtypes = {DLDataType{kDLFloat, 32, 1}};
      for (DLDataType dt : dtypes) {
        if (t.plugin >= 0 && follow_dispatch && !dispatches_to(reg, names[k], t.dev.device_type, dt, t.plugin))
          continue;
        const Outcome o = k < ops.size() ? (run_one(reg, t, ops[k], dt, cfg) ? Outcome::kPass : Outcome::kFail)
                                         : run_declared_one(reg, t, declared, dt, cfg);
        (o == Outcome::kPass ? passed : o == Outcome::kFail ? failed : unchecked)++;
      }
    }
  }
  if (passed + failed + unchecked == 0) {
    std::cout << "nothing ran: no available plugin offers these ops (see `dlfuse list`)\n";
    rc = 1;
  }
  std::cout << passed << " passed, " << failed << " failed"
            << (unchecked ? ", " + std::to_string(unchecked) + " unchecked" : "") << "\n";
  dlfuse_registry_destroy(reg);
  return failed ? 1 : rc;
}

}  // namespace dlfuse_cli

#include "runner.h"

#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h>  // DLFUSE_KERNEL_TAKES_V1_1_INPUTS

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cases.h"
#include "dtypes.h"
#include "op_case.h"
#include "stages.h"
#include "mlp_cases.h"
#include "schema_checks.h"
#include "stale.h"
#include "sweep.h"

namespace dlfuse_conformance {
namespace {

class Table {
 public:
  Table(std::ostream& out, bool verbose) : out_(out), verbose_(verbose) {
    row("RESULT", "KERNEL", "DTYPE", "DEVICE", "CASE", "MAX_ABS", "MAX_RATIO");
  }
  void add(bool pass, const std::string& kernel, const std::string& dtype, const std::string& dev,
           const std::string& name, const std::string& max_abs, const std::string& ratio, const std::string& detail) {
    (pass ? summary.passed : summary.failed)++;
    row(pass ? "PASS" : "FAIL", kernel, dtype, dev, name, max_abs, ratio);
    if (!detail.empty() && (!pass || verbose_)) out_ << "      " << detail << "\n";
  }
  ConformSummary summary;

 private:
  void row(const char* r, const std::string& k, const std::string& d, const std::string& dev, const std::string& c,
           const std::string& a, const std::string& q) {
    char line[512];
    std::snprintf(line, sizeof line, "%-6s %-28s %-9s %-8s %-30s %10s %9s", r, k.c_str(), d.c_str(), dev.c_str(),
                  c.c_str(), a.c_str(), q.c_str());
    out_ << line << "\n";
  }
  std::ostream& out_;
  bool verbose_;
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

bool nondeterministic(const ConformOptions& opts, OpKind op) {
  return opts.nondeterministic.count("all") || opts.nondeterministic.count(op_name(op));
}

struct CaseOutcome {
  bool pass = false;
  std::string detail;
  CheckStats stats;
};

// One valid case, run opts.repeats times on stale memory: the first run (and every run of a
// nondeterministic op) against the reference, the others bit for bit against the first.
CaseOutcome run_case(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const CaseSpec& spec,
                     const ConformOptions& opts) {
  CaseOutcome o;
  PreparedCall call(reg, dev, dt);
  std::string err;
  if (!call.prepare(spec, opts.seed, &err)) {
    o.detail = "setup: " + err;
    return o;
  }
  StaleMemory stale(reg, dev);
  const size_t stale_bytes = stale_bytes_for(call.total_bytes());
  const bool exact = !nondeterministic(opts, spec.op);
  const int runs = std::max(1, opts.repeats);
  PreparedCall::Readback first;
  for (int run = 0; run < runs; ++run) {
    const std::string when = "run " + std::to_string(run + 1) + "/" + std::to_string(runs) +
                             (opts.stale ? std::string(", stale memory ") + stale_pattern_name(run) : "");
    if (run > 0 && !call.reset(&err)) {
      o.detail = when + ": setup: " + err;
      return o;
    }
    if (opts.stale && !stale.stir(stale_bytes, run, &err)) {
      o.detail = when + ": poisoning stale memory: " + err;
      return o;
    }
    const dlfuse_status_t st = call.invoke();
    if (st != DLFUSE_STATUS_OK) {
      o.detail = when + ": call failed: " + describe_failure(st);
      return o;
    }
    PreparedCall::Readback got;
    const bool read = call.download(&got, &err);
    stale.release();
    if (!read) {
      o.detail = when + ": readback: " + err;
      return o;
    }
    std::string diff;
    if (run > 0 && exact) {
      diff = first_difference(got, first);
      if (diff.empty()) continue;
    }
    CheckStats stats;
    call.check(got, &stats);
    if (run == 0) o.stats = stats;
    if (stats.bad) {
      o.stats = stats;
      o.detail = when + ": " + std::to_string(stats.bad) + " of " + std::to_string(stats.checked) +
                 " elements bad; first: " + stats.first_bad;
      return o;
    }
    if (!diff.empty()) {
      o.detail = when +
                 ": not bit-identical to the first run (within tolerance, but a deterministic kernel must "
                 "repeat itself; a kernel that cannot declares it with --nondeterministic): " +
                 diff;
      return o;
    }
    if (run == 0) first = std::move(got);
  }
  o.pass = true;
  o.detail = std::to_string(o.stats.checked) + " elements, " + shape_summary(spec) + ", " + std::to_string(runs) +
             (exact ? " runs bit-identical" : " runs (nondeterministic: each against the reference)");
  return o;
}

CaseOutcome run_case_noted(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const CaseSpec& spec,
                           const ConformOptions& opts) {
  CaseOutcome o = run_case(reg, dev, dt, spec, opts);
  if (!spec.note.empty()) o.detail += "\n      case: " + spec.note;
  return o;
}

// --exclude: a comma-separated list; a case whose name contains any item is left out.
bool excluded(const ConformOptions& opts, const std::string& name) {
  for (size_t at = 0; at < opts.case_exclude.size();) {
    const size_t comma = std::min(opts.case_exclude.find(',', at), opts.case_exclude.size());
    if (comma > at && name.find(opts.case_exclude.substr(at, comma - at)) != std::string::npos) return true;
    at = comma + 1;
  }
  return false;
}

bool wanted(const ConformOptions& opts, const CaseSpec& spec) {
  if ((spec.large && !opts.large) || (spec.grid && !opts.grid)) return false;
  if (excluded(opts, spec.name)) return false;
  return opts.case_filter.empty() || spec.name.find(opts.case_filter) != std::string::npos;
}

// A few cases spread over the list, for the stages that run calls more than once.
std::vector<CaseSpec> spread(const std::vector<CaseSpec>& from, size_t count) {
  std::vector<CaseSpec> out;
  const size_t step = std::max<size_t>(1, from.size() / std::max<size_t>(1, count));
  for (size_t i = 0; i < from.size() && out.size() < count; i += step)
    if (from[i].special == Special::kNone) out.push_back(from[i]);
  return out;
}

// Whether a case needs the inputs ABI 1.1 appended to an op of 1.0 (add_mul backward's out).
bool needs_v11_inputs(const CaseSpec& spec) { return spec.from_out && spec.op == OpKind::kAddMulBackward; }

void run_cases(dlfuse_registry_t reg, int32_t plugin, OpKind op, DLDataType dt, DLDevice dev,
               const ConformOptions& opts, uint32_t kernel_flags, Table& table) {
  const std::string kname = op_name(op), dname = dtype_name(dt), devname = device_name(dev);
  // The call must reach the plugin under test: nothing else is loaded, but say so if not.
  dlfuse_op_t h = nullptr;
  int32_t chosen = -1;
  dlfuse_status_t st = dlfuse_op_get(reg, op_name(op), &h);
  if (st == DLFUSE_STATUS_OK) st = dlfuse_op_resolve(h, dev.device_type, dt, &chosen);
  if (st != DLFUSE_STATUS_OK || chosen != plugin)
    table.add(false, kname, dname, devname, "dispatch", "-", "-",
              st != DLFUSE_STATUS_OK ? "op_resolve: " + describe_failure(st)
                                     : "op_resolve picked plugin " + std::to_string(chosen));

  // A kernel without DLFUSE_KERNEL_TAKES_V1_1_INPUTS is never handed the appended inputs:
  // the cases that pass them are not its (the registry refuses them, docs/ops.md).
  const bool v11_inputs = (kernel_flags & DLFUSE_KERNEL_TAKES_V1_1_INPUTS) != 0;
  std::vector<CaseSpec> fixed, swept;
  for (CaseSpec& c : cases_for(op))
    if (wanted(opts, c) && (v11_inputs || !(needs_v11_inputs(c) || c.v11_inputs))) fixed.push_back(std::move(c));
  for (CaseSpec& c : sweep_cases(op, opts.seed, std::max(0, opts.sweep), v11_inputs, dev.device_type))
    if (wanted(opts, c)) swept.push_back(std::move(c));
  for (const std::vector<CaseSpec>* list : {&fixed, &swept})
    for (const CaseSpec& spec : *list) {
      const CaseOutcome o = run_case_noted(reg, dev, dt, spec, opts);
      const bool ran = o.stats.checked > 0 || o.pass;
      table.add(o.pass, kname, dname, devname, spec.name, ran ? num(o.stats.max_abs) : "-",
                ran ? num(o.stats.max_ratio) : "-", o.detail);
    }

  std::vector<CaseSpec> small;  // the stages that rerun calls many times skip the large cases
  for (const CaseSpec& c : fixed)
    if (!c.large && !c.grid) small.push_back(c);
  std::vector<CaseSpec> staged = spread(small, 5), more = spread(swept, 2);
  staged.insert(staged.end(), more.begin(), more.end());
  if (dev.device_type == kDLCPU && !staged.empty()) {
    const StageResult r = run_cpu_stream_stage(reg, dev, dt, staged, opts.seed, !nondeterministic(opts, op));
    table.add(r.pass, kname, dname, devname, "stream:cpu_ignored", "-", "-", r.detail);
  }
  if (opts.threads >= 2 && !staged.empty() && !nondeterministic(opts, op)) {
    const StageResult r = run_threads_stage(reg, dev, dt, staged, opts.seed, opts.threads, 2);
    table.add(r.pass, kname, dname, devname, "threads:x" + std::to_string(opts.threads), "-", "-", r.detail);
  }
  if (!opts.bad_inputs) return;
  for (const BadOutcome& b : run_bad_inputs(reg, dev, dt, op, v11_inputs))
    table.add(b.pass, kname, dname, devname, b.name, "-", "-", b.detail);
}

// mlp and mlp_backward: their own cases (mlp_cases.h) on every declared dtype and device.
void check_mlp_kernel(dlfuse_registry_t reg, const dlfuse_kernel_info_t& ki, const DLDataType* only_dtype,
                      const ConformOptions& opts, Table& table) {
  int32_t count = 0;
  if (dlfuse_device_count(reg, ki.device_type, &count) != DLFUSE_STATUS_OK || count <= 0) {
    table.add(false, ki.op, "-", "-", "device_count", "-", "-", "no devices");
    return;
  }
  for (int32_t d = 0; d < ki.num_dtypes; ++d) {
    const DLDataType dt = ki.dtypes[d];
    if ((only_dtype && !same_dtype(dt, *only_dtype)) || !dtype_supported(dt)) continue;
    for (int32_t id = 0; id < count; ++id) {
      if (opts.device_id >= 0 && opts.device_id != id) continue;
      const DLDevice dev{DLDeviceType(ki.device_type), id};
      for (const MlpOutcome& o : run_mlp_cases(reg, dev, dt, ki.op, opts.seed, opts.case_filter))
        table.add(o.pass, ki.op, dtype_name(dt), device_name(dev), o.name, num(o.max_abs), num(o.max_ratio), o.detail);
    }
  }
}

// A kernel checked from its op's schema (schema_checks.h): every declared dtype and device.
void check_schema_kernel_rows(dlfuse_registry_t reg, dlfuse_registry_t reference, const dlfuse_kernel_info_t& ki,
                              const DLDataType* only_dtype, const ConformOptions& opts, Table& table,
                              std::ostream& out) {
  int32_t count = 0;
  const dlfuse_status_t st = dlfuse_device_count(reg, ki.device_type, &count);
  if (st != DLFUSE_STATUS_OK || count <= 0) {
    table.add(false, ki.op, "-", "-", "device_count", "-", "-",
              st != DLFUSE_STATUS_OK ? describe_failure(st) : "no devices");
    return;
  }
  SchemaCheckOptions so;
  so.seed = opts.seed;
  so.repeats = opts.repeats;
  so.stale = opts.stale;
  so.threads = opts.threads;
  so.exact = !(opts.nondeterministic.count("all") || opts.nondeterministic.count(ki.op));
  so.bad_inputs = opts.bad_inputs;
  so.reference = reference;
  so.wanted = [&opts](const std::string& name) {
    if (excluded(opts, name)) return false;
    return opts.case_filter.empty() || name.find(opts.case_filter) != std::string::npos;
  };
  for (int32_t d = 0; d < ki.num_dtypes; ++d) {
    const DLDataType dt = ki.dtypes[d];
    if (only_dtype && !same_dtype(dt, *only_dtype)) continue;
    if (!dtype_supported(dt)) {
      out << "# skipping " << ki.op << " " << dtype_name(dt) << ": the suite has no checks for it\n";
      continue;
    }
    for (int32_t id = 0; id < count; ++id) {
      if (opts.device_id >= 0 && opts.device_id != id) continue;
      const DLDevice dev{DLDeviceType(ki.device_type), id};
      for (const SchemaRow& r : check_schema_kernel(reg, ki.op, dt, dev, so))
        table.add(r.pass, ki.op, dtype_name(dt), device_name(dev), r.name, r.max_abs >= 0 ? num(r.max_abs) : "-",
                  r.max_ratio >= 0 ? num(r.max_ratio) : "-", r.detail);
    }
  }
}

bool has_schema(dlfuse_registry_t reg, const char* op) {
  dlfuse_op_t h = nullptr;
  dlfuse_op_schema_t s{};
  s.struct_size = sizeof s;
  return dlfuse_op_get(reg, op, &h) == DLFUSE_STATUS_OK && dlfuse_op_schema(h, &s) == DLFUSE_STATUS_OK;
}

void check_plugin(dlfuse_registry_t reg, int32_t idx, dlfuse_registry_t reference, const ConformOptions& opts,
                  Table& table, std::ostream& out) {
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  dlfuse_status_t st = dlfuse_registry_plugin_info(reg, idx, &info);
  if (st != DLFUSE_STATUS_OK) {
    table.add(false, "-", "-", "-", "plugin_info", "-", "-", describe_failure(st));
    return;
  }
  out << "# plugin " << info.name << " " << info.version << " (" << info.path << "), " << info.num_kernels
      << " kernels\n";
  out << "# seed " << opts.seed << ", " << opts.sweep << " sweep cases per kernel and dtype, " << opts.repeats
      << " runs per case" << (opts.stale ? " on stale memory" : "") << ", " << opts.threads
      << " threads (reproduce: --seed " << opts.seed << " --sweep " << opts.sweep << ")\n";
  if (!info.available) {
    table.add(false, "-", "-", "-", "available", "-", "-", std::string("unavailable: ") + info.reason);
    return;
  }
  DLDataType wanted{};
  const bool dtype_filter = !opts.dtype.empty() && parse_dtype(opts.dtype, &wanted);
  for (int32_t k = 0; k < info.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    st = dlfuse_registry_kernel_info(reg, idx, k, &ki);
    if (st != DLFUSE_STATUS_OK) {
      table.add(false, "-", "-", "-", "kernel_info", "-", "-", describe_failure(st));
      continue;
    }
    const std::string name = ki.op;
    if (is_mlp_op(name)) {
      if (opts.op.empty() || opts.op == name) check_mlp_kernel(reg, ki, dtype_filter ? &wanted : nullptr, opts, table);
      continue;
    }
    if (!opts.op.empty() && opts.op != ki.op) continue;
    OpKind op;
    const bool core = parse_op(ki.op, &op);
    if (!core || opts.schema_checks) {
      if (has_schema(reg, ki.op))
        check_schema_kernel_rows(reg, reference, ki, dtype_filter ? &wanted : nullptr, opts, table, out);
      else
        out << "# skipping kernel '" << ki.op
            << "': its op has no schema (dlfuse_kernel_t.schema), nothing to derive checks from\n";
      if (!core) continue;
    }
    int32_t count = 0;
    st = dlfuse_device_count(reg, ki.device_type, &count);
    if (st != DLFUSE_STATUS_OK || count <= 0) {
      table.add(false, ki.op, "-", "-", "device_count", "-", "-",
                st != DLFUSE_STATUS_OK ? describe_failure(st) : "no devices");
      continue;
    }
    for (int32_t d = 0; d < ki.num_dtypes; ++d) {
      const DLDataType dt = ki.dtypes[d];
      if (dtype_filter && !same_dtype(dt, wanted)) continue;
      if (!dtype_supported(dt)) {
        out << "# skipping " << ki.op << " " << dtype_name(dt) << ": the suite has no reference for it\n";
        continue;
      }
      for (int32_t id = 0; id < count; ++id)
        if (opts.device_id < 0 || opts.device_id == id)
          run_cases(reg, idx, op, dt, DLDevice{DLDeviceType(ki.device_type), id}, opts, ki.flags, table);
    }
  }
}

}  // namespace

ConformSummary run_conformance(const std::string& plugin_path, const ConformOptions& opts, std::ostream& out) {
  Table table(out, opts.verbose);
  dlfuse_registry_options_t ro{};
  ro.struct_size = sizeof ro;
  ro.discovery = DLFUSE_DISCOVER_NONE;  // only the file under test
  dlfuse_registry_t reg = nullptr;
  dlfuse_status_t st = dlfuse_registry_create(&ro, &reg);
  if (st != DLFUSE_STATUS_OK) {
    table.add(false, "-", "-", "-", "registry_create", "-", "-", describe_failure(st));
  } else {
    int32_t idx = -1;
    dlfuse_registry_t reference = nullptr;
    st = dlfuse_registry_load(reg, plugin_path.c_str(), &idx);
    if (st != DLFUSE_STATUS_OK) {
      table.add(false, "-", "-", "-", "load", "-", "-", plugin_path + ": " + describe_failure(st));
    } else if (!opts.reference.empty() &&
               (dlfuse_registry_create(&ro, &reference) != DLFUSE_STATUS_OK ||
                dlfuse_registry_load(reference, opts.reference.c_str(), nullptr) != DLFUSE_STATUS_OK)) {
      table.add(false, "-", "-", "-", "reference", "-", "-",
                opts.reference + ": " + describe_failure(DLFUSE_STATUS_INVALID_ARGUMENT));
    } else {
      if (reference) out << "# reference: the float64 CPU kernels of " << opts.reference << "\n";
      check_plugin(reg, idx, reference, opts, table, out);
    }
    if (reference) dlfuse_registry_destroy(reference);
    dlfuse_registry_destroy(reg);
  }
  if (table.summary.passed + table.summary.failed == 0)
    table.add(false, "-", "-", "-", "nothing_checked", "-", "-", "no kernel matched the filters");
  out << table.summary.passed << " passed, " << table.summary.failed << " failed\n";
  return table.summary;
}

}  // namespace dlfuse_conformance

#include "runner.h"

#include <dlfuse/dlfuse.h>

#include <cstdio>
#include <vector>

#include "cases.h"
#include "dtypes.h"
#include "op_case.h"

namespace dlfuse_conformance {
namespace {

class Table {
 public:
  Table(std::ostream& out, bool verbose) : out_(out), verbose_(verbose) {
    row("RESULT", "KERNEL", "DTYPE", "DEVICE", "CASE", "MAX_ABS", "MAX_RATIO");
  }
  void add(bool pass, const std::string& kernel, const std::string& dtype, const std::string& dev,
           const std::string& name, const std::string& max_abs, const std::string& ratio,
           const std::string& detail) {
    (pass ? summary.passed : summary.failed)++;
    row(pass ? "PASS" : "FAIL", kernel, dtype, dev, name, max_abs, ratio);
    if (!detail.empty() && (!pass || verbose_)) out_ << "      " << detail << "\n";
  }
  ConformSummary summary;

 private:
  void row(const char* r, const std::string& k, const std::string& d, const std::string& dev,
           const std::string& c, const std::string& a, const std::string& q) {
    char line[512];
    std::snprintf(line, sizeof line, "%-6s %-28s %-9s %-8s %-30s %10s %9s", r, k.c_str(), d.c_str(),
                  dev.c_str(), c.c_str(), a.c_str(), q.c_str());
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

void run_cases(dlfuse_registry_t reg, int32_t plugin, OpKind op, DLDataType dt, DLDevice dev,
               const ConformOptions& opts, Table& table) {
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

  for (const CaseSpec& spec : cases_for(op)) {
    PreparedCall call(reg, dev, dt);
    std::string err;
    CheckStats stats;
    if (!call.prepare(spec, opts.seed, &err)) {
      table.add(false, kname, dname, devname, spec.name, "-", "-", "setup: " + err);
      continue;
    }
    st = call.invoke();
    if (st != DLFUSE_STATUS_OK) {
      table.add(false, kname, dname, devname, spec.name, "-", "-", "call failed: " + describe_failure(st));
      continue;
    }
    if (!call.verify(&stats, &err)) {
      table.add(false, kname, dname, devname, spec.name, "-", "-", "readback: " + err);
      continue;
    }
    const std::string detail = stats.bad ? std::to_string(stats.bad) + " of " + std::to_string(stats.checked) +
                                               " elements bad; first: " + stats.first_bad
                                         : std::to_string(stats.checked) + " elements, " + shape_summary(spec);
    table.add(stats.bad == 0, kname, dname, devname, spec.name, num(stats.max_abs), num(stats.max_ratio), detail);
  }
  if (!opts.bad_inputs) return;
  for (const BadOutcome& b : run_bad_inputs(reg, dev, dt, op))
    table.add(b.pass, kname, dname, devname, b.name, "-", "-", b.detail);
}

void check_plugin(dlfuse_registry_t reg, int32_t idx, const ConformOptions& opts, Table& table,
                  std::ostream& out) {
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  dlfuse_status_t st = dlfuse_registry_plugin_info(reg, idx, &info);
  if (st != DLFUSE_STATUS_OK) {
    table.add(false, "-", "-", "-", "plugin_info", "-", "-", describe_failure(st));
    return;
  }
  out << "# plugin " << info.name << " " << info.version << " (" << info.path << "), "
      << info.num_kernels << " kernels\n";
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
    OpKind op;
    if (!parse_op(ki.op, &op)) {
      out << "# skipping kernel '" << ki.op << "': not an op of ABI 1, nothing to check it against\n";
      continue;
    }
    if (!opts.op.empty() && opts.op != ki.op) continue;
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
          run_cases(reg, idx, op, dt, DLDevice{DLDeviceType(ki.device_type), id}, opts, table);
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
    st = dlfuse_registry_load(reg, plugin_path.c_str(), &idx);
    if (st != DLFUSE_STATUS_OK)
      table.add(false, "-", "-", "-", "load", "-", "-", plugin_path + ": " + describe_failure(st));
    else
      check_plugin(reg, idx, opts, table, out);
    dlfuse_registry_destroy(reg);
  }
  if (table.summary.passed + table.summary.failed == 0)
    table.add(false, "-", "-", "-", "nothing_checked", "-", "-", "no kernel matched the filters");
  out << table.summary.passed << " passed, " << table.summary.failed << " failed\n";
  return table.summary;
}

}  // namespace dlfuse_conformance

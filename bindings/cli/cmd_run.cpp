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
  if (us < 1000) std::snprintf(b, sizeof b, "%.1f us", us);
  else std::snprintf(b, sizeof b, "%.2f ms", us / 1000);
  return b;
}

void print_row(const std::string& plugin, const std::string& dev, const std::string& op, const std::string& dt,
               const std::string& shape, const std::string& time, const std::string& err,
               const std::string& ratio, const std::string& result) {
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

std::vector<DLDataType> declared_dtypes(dlfuse_registry_t reg, int32_t plugin, OpKind op, int32_t device_type) {
  std::vector<DLDataType> out;
  const dlfuse_plugin_info_t info = plugin_info(reg, plugin);
  for (int32_t k = 0; k < info.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    if (dlfuse_registry_kernel_info(reg, plugin, k, &ki) != DLFUSE_STATUS_OK) continue;
    if (std::string(ki.op) != op_name(op) || ki.device_type != device_type) continue;
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

bool dispatches_to(dlfuse_registry_t reg, OpKind op, int32_t device_type, DLDataType dt, int32_t plugin) {
  dlfuse_op_t h = nullptr;
  int32_t chosen = -1;
  return dlfuse_op_get(reg, op_name(op), &h) == DLFUSE_STATUS_OK &&
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
  if (what == "all") ops.assign(std::begin(kAllOps), std::end(kAllOps));
  else if (parse_op(what, &one)) ops = {one};
  else throw UsageError("unknown op '" + what + "'");

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

  print_row("PLUGIN", "DEVICE", "OP", "DTYPE", "SHAPE", "TIME", "MAX_ABS", "MAX_RATIO", "RESULT");
  // --plugin always runs that plugin alone, forced, whatever DLFUSE_PREFER says.
  const bool follow_dispatch = dispatch_only && !args.has("--plugin");
  int passed = 0, failed = 0;
  for (const Target& t : targets) {
    const std::string pname = t.plugin >= 0 ? plugin_info(reg, t.plugin).name : "";
    // Without a preference, force kernels *and* device services to this row's plugin
    // (docs/abi.md, "Device services"); every target sets its own, so the previous one
    // needs no clearing. With one, the user's order stays and rows dispatch would not
    // send to this plugin are left out.
    if (t.plugin >= 0 && !follow_dispatch) dlfuse_registry_prefer(reg, nullptr, pname.c_str());
    for (OpKind op : ops) {
      std::vector<DLDataType> dtypes;
      if (dtype_given) dtypes = {dtype};
      else if (t.plugin >= 0) dtypes = declared_dtypes(reg, t.plugin, op, t.dev.device_type);
      else dtypes = {DLDataType{kDLFloat, 32, 1}};
      for (DLDataType dt : dtypes) {
        if (t.plugin >= 0 && follow_dispatch && !dispatches_to(reg, op, t.dev.device_type, dt, t.plugin))
          continue;
        (run_one(reg, t, op, dt, cfg) ? passed : failed)++;
      }
    }
  }
  if (passed + failed == 0) {
    std::cout << "nothing ran: no available plugin offers these ops (see `dlfuse list`)\n";
    rc = 1;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  dlfuse_registry_destroy(reg);
  return failed ? 1 : rc;
}

}  // namespace dlfuse_cli

// dlfuse list: what default discovery (plus any --plugin files) found.
#include <cstdio>
#include <iostream>
#include <string>

#include <dlfuse/plugin.h>

#include "cli.h"
#include "dtypes.h"

namespace dlfuse_cli {

namespace {

// "a, b?, bias -> out, pre?": an op's arguments, `?` marking the optional ones.
std::string signature(const dlfuse_op_schema_t& s) {
  std::string sig;
  for (int32_t i = 0; i < s.num_inputs + s.num_outputs; ++i) {
    const bool output = i >= s.num_inputs;
    const dlfuse_arg_schema_t& a = output ? s.outputs[i - s.num_inputs] : s.inputs[i];
    sig += i == s.num_inputs ? " -> " : i ? ", " : "";
    sig += a.name;
    if (a.flags & DLFUSE_ARG_OPTIONAL) sig += "?";
  }
  for (int32_t k = 0; k < s.num_attrs; ++k) sig += std::string(k ? ", " : "; ") + s.attrs[k].name;
  return sig;
}

// The ops plugins declared (ABI 1.2), with the plugin and the signature.
void list_declared_ops(dlfuse_registry_t reg) {
  int32_t n = 0;
  if (dlfuse_registry_op_count(reg, &n) != DLFUSE_STATUS_OK || n <= DLFUSE_NUM_CORE_OPS) return;
  std::cout << "ops declared by plugins:\n";
  for (int32_t i = DLFUSE_NUM_CORE_OPS; i < n; ++i) {
    dlfuse_op_schema_t s{};
    s.struct_size = sizeof s;
    if (dlfuse_registry_op_schema(reg, i, &s) != DLFUSE_STATUS_OK) continue;
    const dlfuse_plugin_info_t info = plugin_info(reg, s.plugin);
    std::cout << "    " << s.name << " (" << info.name << "): " << signature(s) << "\n";
  }
}

}  // namespace

int cmd_list(const Args& args) {
  if (!args.positional.empty()) throw UsageError("list takes no arguments");
  dlfuse_registry_t reg = nullptr;
  dlfuse_status_t st = dlfuse_registry_create(nullptr, &reg);
  if (st != DLFUSE_STATUS_OK) {
    std::cerr << "dlfuse: cannot create the registry: " << last_error(st) << "\n";
    return 1;
  }
  int rc = 0;
  auto it = args.values.find("--plugin");
  if (it != args.values.end())
    for (const std::string& path : it->second) {
      st = dlfuse_registry_load(reg, path.c_str(), nullptr);
      // A file that fails to load is still listed below, with the reason.
      if (st != DLFUSE_STATUS_OK) rc = 1;
    }
  int32_t count = 0;
  dlfuse_registry_plugin_count(reg, &count);
  if (count == 0) std::cout << "no plugins found (DLFUSE_PLUGIN_PATH, <libdir>/dlfuse/plugins)\n";
  for (int32_t i = 0; i < count; ++i) {
    const dlfuse_plugin_info_t info = plugin_info(reg, i);
    char line[1024];
    if (info.available) {
      std::snprintf(line, sizeof line, "%-14s %-8s available    %s x%d  %s", info.name, info.version,
                    device_type_name(info.device_type).c_str(), info.device_count, info.path);
    } else {
      std::snprintf(line, sizeof line, "%-14s %-8s unavailable  %s  (%s)", info.name,
                    *info.version ? info.version : "-", info.path, info.reason);
    }
    std::cout << line << "\n";
    for (int32_t k = 0; k < info.num_kernels; ++k) {
      dlfuse_kernel_info_t ki{};
      ki.struct_size = sizeof ki;
      if (dlfuse_registry_kernel_info(reg, i, k, &ki) != DLFUSE_STATUS_OK) continue;
      std::string dtypes;
      for (int32_t d = 0; d < ki.num_dtypes; ++d)
        dtypes += (d ? ", " : "") + dlfuse_conformance::dtype_name(ki.dtypes[d]);
      std::snprintf(line, sizeof line, "    %-30s [%s]  priority %d%s", ki.op, dtypes.c_str(), ki.priority,
                    ki.flags & DLFUSE_KERNEL_TAKES_V1_1_INPUTS ? "  (takes ABI 1.1 inputs)" : "");
      std::cout << line << "\n";
    }
  }
  list_declared_ops(reg);
  dlfuse_registry_destroy(reg);
  return rc;
}

}  // namespace dlfuse_cli

#include <cstdlib>
#include <climits>

#include "cli.h"

namespace dlfuse_cli {

std::string device_type_name(int32_t t) {
  switch (t) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLOpenCL: return "opencl";
    case kDLWebGPU: return "webgpu";
    case kDLROCM: return "rocm";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    default: return "device_type " + std::to_string(t);
  }
}

bool parse_device_type(const std::string& s, int32_t* t) {
  for (int32_t c : {kDLCPU, kDLCUDA, kDLOpenCL, kDLROCM, kDLVulkan, kDLMetal, kDLWebGPU})
    if (s == device_type_name(c)) {
      *t = c;
      return true;
    }
  return false;
}

std::string last_error(dlfuse_status_t st) {
  return std::string(dlfuse_status_string(st)) + ": " + dlfuse_last_error();
}

dlfuse_plugin_info_t plugin_info(dlfuse_registry_t reg, int32_t index) {
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  if (dlfuse_registry_plugin_info(reg, index, &info) != DLFUSE_STATUS_OK) {
    info = dlfuse_plugin_info_t{};
    info.name = info.version = info.path = info.reason = "";
  }
  return info;
}

namespace {
std::string canonical(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}
}  // namespace

int32_t find_plugin(dlfuse_registry_t reg, const std::string& name_or_path, std::string* err) {
  int32_t count = 0;
  dlfuse_registry_plugin_count(reg, &count);
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 3 && name_or_path.compare(name_or_path.size() - 3, 3, ".so") == 0);
  if (!is_path) {
    for (int32_t i = 0; i < count; ++i)
      if (name_or_path == plugin_info(reg, i).name) return i;
    *err = "no plugin named '" + name_or_path + "' was discovered (see `dlfuse list`)";
    return -1;
  }
  // A file that discovery already loaded is the same plugin, not a second copy.
  const std::string want = canonical(name_or_path);
  for (int32_t i = 0; i < count; ++i)
    if (canonical(plugin_info(reg, i).path) == want) return i;
  int32_t index = -1;
  const dlfuse_status_t st = dlfuse_registry_load(reg, name_or_path.c_str(), &index);
  if (st != DLFUSE_STATUS_OK) {
    *err = "cannot load " + name_or_path + ": " + last_error(st);
    return -1;
  }
  return index;
}

}  // namespace dlfuse_cli

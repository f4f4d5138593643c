// The device selector both GPU plugins read from their environment variable
// (DLFUSE_OPENCL_DEVICE, DLFUSE_WEBGPU_ADAPTER; docs/opencl.md, docs/webgpu.md).
#ifndef DLFUSE_PLUGIN_COMMON_DEVICE_SELECT_H_
#define DLFUSE_PLUGIN_COMMON_DEVICE_SELECT_H_

#include <cstddef>
#include <string>
#include <vector>

namespace dlfuse_plugin {

// One device as a selector sees it: "<platform or backend> / <name>", and whether it is a CPU.
struct Selectable {
  std::string label;
  bool is_cpu;
};

// `spec`: comma-separated selectors, each an index into `all` (the default order), "gpu",
// "cpu", or a case-insensitive substring of a label. Returns the indices of the devices it
// names, in the order named (each once); they become device_id 0, 1, ... Throws
// UNAVAILABLE naming `env`, the selector and `listing` (every device, for the message)
// when a selector matches no device or nothing is selected; `what` is the runtime's word
// for a device ("device", "adapter").
std::vector<size_t> select_devices(const std::vector<Selectable>& all, const std::string& spec, const char* env,
                                   const char* what, const std::string& listing);

// The same over a plugin's device list: `label_of(d)` gives a device's label, `d.is_cpu`
// whether it is a CPU. Returns the selected devices in the order named.
template <class Device, class LabelOf>
std::vector<Device> select(const std::vector<Device>& all, const std::string& spec, const char* env, const char* what,
                           const std::string& listing, LabelOf label_of) {
  std::vector<Selectable> labels;
  for (const Device& d : all) labels.push_back({label_of(d), d.is_cpu});
  std::vector<Device> out;
  for (size_t i : select_devices(labels, spec, env, what, listing)) out.push_back(all[i]);
  return out;
}

}  // namespace dlfuse_plugin

#endif

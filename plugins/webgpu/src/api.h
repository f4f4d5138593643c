// wgpu-native's C API, loaded at run time: the plugin links no WebGPU library, so it builds
// and loads without one and says why it cannot run (docs/webgpu.md, "Install").
#ifndef DLFUSE_WEBGPU_API_H_
#define DLFUSE_WEBGPU_API_H_

#include <webgpu.h>
#include <wgpu.h>

#include <string>

namespace dlfuse_webgpu {

// Every entry point the plugin calls, named as in webgpu.h / wgpu.h.
// clang-format off
#define DLFUSE_WGPU_FUNCTIONS(X) \
  X(wgpuCreateInstance) \
  X(wgpuInstanceEnumerateAdapters) \
  X(wgpuAdapterGetInfo) \
  X(wgpuAdapterInfoFreeMembers) \
  X(wgpuAdapterGetLimits) \
  X(wgpuAdapterHasFeature) \
  X(wgpuAdapterRequestDevice) \
  X(wgpuAdapterRelease) \
  X(wgpuDeviceGetQueue) \
  X(wgpuDeviceRelease) \
  X(wgpuQueueRelease) \
  X(wgpuDevicePoll) \
  X(wgpuDeviceCreateBuffer) \
  X(wgpuBufferRelease) \
  X(wgpuBufferAddRef) \
  X(wgpuQueueWriteBuffer) \
  X(wgpuBufferMapAsync) \
  X(wgpuBufferGetConstMappedRange) \
  X(wgpuBufferUnmap) \
  X(wgpuDeviceCreateCommandEncoder) \
  X(wgpuCommandEncoderRelease) \
  X(wgpuCommandEncoderCopyBufferToBuffer) \
  X(wgpuCommandEncoderBeginComputePass) \
  X(wgpuComputePassEncoderSetPipeline) \
  X(wgpuComputePassEncoderSetBindGroup) \
  X(wgpuComputePassEncoderDispatchWorkgroups) \
  X(wgpuComputePassEncoderEnd) \
  X(wgpuComputePassEncoderRelease) \
  X(wgpuCommandEncoderFinish) \
  X(wgpuCommandBufferRelease) \
  X(wgpuQueueSubmitForIndex) \
  X(wgpuDeviceCreateShaderModule) \
  X(wgpuDeviceCreateShaderModuleTrusted) \
  X(wgpuShaderModuleRelease) \
  X(wgpuDeviceCreateBindGroupLayout) \
  X(wgpuBindGroupLayoutRelease) \
  X(wgpuDeviceCreatePipelineLayout) \
  X(wgpuPipelineLayoutRelease) \
  X(wgpuDeviceCreateComputePipeline) \
  X(wgpuComputePipelineRelease) \
  X(wgpuDeviceCreateBindGroup) \
  X(wgpuBindGroupRelease)
// clang-format on

struct Api {
#define DLFUSE_WGPU_MEMBER(name) decltype(&::name) name = nullptr;
  DLFUSE_WGPU_FUNCTIONS(DLFUSE_WGPU_MEMBER)
#undef DLFUSE_WGPU_MEMBER
  std::string path;  // the library loaded
};

// The library, loaded once per process (it is never unloaded: wgpu-native keeps threads
// and handles that outlive any one registry). Candidates, first found wins:
// DLFUSE_WGPU_LIBRARY (a file), the wheel this plugin was built against, every
// site-packages folder of python3 on PATH, then libwgpu_native.so on the loader's path.
// Throws Error(UNAVAILABLE) naming every place tried.
const Api& api();

// A WGPUStringView as a std::string.
inline std::string str(WGPUStringView s) {
  if (!s.data) return std::string();
  return s.length == WGPU_STRLEN ? std::string(s.data) : std::string(s.data, s.length);
}
inline WGPUStringView view(const char* s) { return WGPUStringView{s, WGPU_STRLEN}; }

}  // namespace dlfuse_webgpu

#endif

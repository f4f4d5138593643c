// The plugin's WebGPU runtime: adapters in their documented order (DLFUSE_WEBGPU_ADAPTER
// filters and reorders), one WGPUDevice and its queue per adapter, compute pipelines built
// once per kernel variant, the buffers this plugin allocated (a WGPUBuffer is what
// DLTensor.data holds), and errors as dlfuse statuses with messages.
#ifndef DLFUSE_WEBGPU_RUNTIME_H_
#define DLFUSE_WEBGPU_RUNTIME_H_

#include <dlfuse/plugin_kit.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "api.h"

namespace dlfuse_webgpu {

namespace kit = dlfuse::kit;
using kit::Error;

// Every C entry runs its body through the kit's exception wall: nothing crosses the boundary.
template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return kit::guarded("webgpu", err, err_size, std::forward<F>(body));
}

enum class Prec { kF32 = 0, kF16 = 1 };

// Where a kernel reads its parameter block (binding 0): a uniform block of kUniformParams
// words (pointwise kernels), or a read-only storage buffer of any length (the GEMM's batch
// table can outgrow a uniform block).
enum class Params { kUniform, kStorage };
constexpr size_t kUniformParams = 64;  // array<vec4<i32>, 16> in kernels/pointwise*.wgsl

// A compute pipeline and the layout of its one bind group: the parameter block at binding
// 0, then `storage` - 1 read_write storage buffers at bindings 1..storage-1.
struct Pipeline {
  WGPUComputePipeline pipeline = nullptr;
  WGPUBindGroupLayout layout = nullptr;
  int storage = 0;
  Params params = Params::kStorage;
};

// GEMM tile shape (kernels/gemm.wgsl): a BM x BN block per workgroup, k-steps of BK,
// TM x TN outputs per invocation, workgroups ordered in groups of GROUP block rows.
// DLFUSE_WEBGPU_GEMM_TILE=BM,BN,BK,TM,TN[,GROUP] overrides it.
struct Tile {
  int bm = 64, bn = 128, bk = 8, tm = 4, tn = 8, group = 8;
  int threads() const { return (bm / tm) * (bn / tn); }
  std::string str() const;
};

struct Device {
  int32_t index = 0;  // the device_id
  WGPUAdapter adapter = nullptr;
  WGPUDevice device = nullptr;
  WGPUQueue queue = nullptr;  // the one queue: the default (and only) stream
  std::string name, backend, type;
  bool is_cpu = false, fp16 = false;
  WGPULimits limits{};
  Tile tile;
  WGPUBuffer dummy = nullptr;  // bound where an optional tensor is absent

  std::string label() const;  // "webgpu:0 (Vulkan / llvmpipe (LLVM 15.0.6, 256 bits), cpu)"

  // The pipeline of kernel source `src` (WGSL, the dtype prefix added here) and entry
  // `entry`, cached under `key`; built on first use, a failure is kept and thrown again.
  const Pipeline& pipeline(const std::string& key, Prec p, const std::string& src, const char* entry, int storage,
                           Params params);

  // A buffer of `nbytes` (rounded up to 16, at least 16) that kernels and copies may use.
  WGPUBuffer create_buffer(uint64_t nbytes, bool track);
  // The size of a buffer this device allocated; 0 when `b` is not one of them.
  uint64_t buffer_size(WGPUBuffer b);
  void forget_buffer(WGPUBuffer b);

  // Blocking copies through a mapped staging buffer (the host side completes on return).
  void read(WGPUBuffer src, uint64_t offset, void* dst, uint64_t nbytes);
  void write(WGPUBuffer dst, uint64_t offset, const void* src, uint64_t nbytes);
  void copy_device(WGPUBuffer src, uint64_t src_off, WGPUBuffer dst, uint64_t dst_off, uint64_t nbytes);
  // Scratch buffer `slot` of a launch, at least `nbytes`, with a reference for the caller.
  // Kept from call to call: creating a large buffer costs milliseconds (the driver maps its
  // memory and wgpu clears it before first use), against microseconds for the kernels that
  // use it. Launches on several threads may share one: the queue runs their submissions
  // one after another, and each writes what it reads of a scratch before reading it.
  WGPUBuffer cached_scratch(size_t slot, uint64_t nbytes);
  // Waits until everything submitted to the queue has finished.
  void wait_idle();
  // Submits a finished command buffer (released here).
  void submit(WGPUCommandBuffer cb);

  ~Device();

 private:
  std::mutex mu_;
  std::unordered_map<WGPUBuffer, uint64_t> buffers_;
  std::vector<std::pair<WGPUBuffer, uint64_t>> scratch_;  // per slot: buffer, size
  std::map<std::string, std::unique_ptr<Pipeline>> pipelines_;
  std::map<std::string, std::string> pipeline_errors_;
};

struct State {
  WGPUInstance instance = nullptr;  // the process's (never released)
  std::vector<std::unique_ptr<Device>> devices;
  std::unique_ptr<kit::KernelTable> kernels;
  Device& device(int32_t id);
  ~State();
};

// Loads wgpu-native, enumerates adapters (Vulkan, Metal, DX12), keeps those
// DLFUSE_WEBGPU_ADAPTER selects and opens a device on each. Throws Error(UNAVAILABLE)
// when the library or every adapter is missing.
void open_devices(State* s);

// Captures the validation errors wgpu-native reports (synchronously, on the calling thread)
// while it lives, and throws them as DEVICE_ERROR from check().
class ErrorScope {
 public:
  ErrorScope();
  ~ErrorScope();
  void check(const std::string& what);
  ErrorScope(const ErrorScope&) = delete;
  ErrorScope& operator=(const ErrorScope&) = delete;

 private:
  std::string* prev_;
  std::string msg_;
};

// One op's work: compute passes recorded into one command encoder, submitted at the end.
class Launch {
 public:
  explicit Launch(Device& d);
  ~Launch();
  // Dispatches `p` over gx x gy x gz workgroups with `bufs` at bindings 1.. (NULL: the
  // dummy) and `params` (int32 words) at binding 0.
  void dispatch(const Pipeline& p, const std::vector<WGPUBuffer>& bufs, const std::vector<int32_t>& params, uint32_t gx,
                uint32_t gy, uint32_t gz);
  // The launch's next scratch buffer (Device::cached_scratch), held until the submission
  // has been made (wgpu keeps it alive for the GPU after its release).
  WGPUBuffer scratch(uint64_t nbytes);
  void submit();
  Device& dev;

 private:
  WGPUCommandEncoder enc_ = nullptr;
  WGPUComputePassEncoder pass_ = nullptr;
  std::vector<WGPUBuffer> owned_;
  size_t scratch_slots_ = 0;
  std::vector<WGPUBindGroup> groups_;
  ErrorScope scope_;
};

}  // namespace dlfuse_webgpu

#endif

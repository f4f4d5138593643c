// A WebGPU device's own work (runtime.h): its pipelines, the buffers it allocated, copies in
// and out of them, and the command buffers a call records and submits (Launch).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "dlfuse_webgpu_kernels.h"  // generated: kCommon, the WGSL every kernel starts with
#include "runtime.h"

namespace dlfuse_webgpu {

Device::~Device() {
  const Api& a = api();
  if (device) {
    ErrorScope scope;  // whatever remains in flight is waited for, errors dropped
    a.wgpuDevicePoll(device, true, nullptr);
  }
  for (auto& kv : pipelines_) {
    if (kv.second->pipeline) a.wgpuComputePipelineRelease(kv.second->pipeline);
    if (kv.second->layout) a.wgpuBindGroupLayoutRelease(kv.second->layout);
  }
  for (auto& kv : buffers_) a.wgpuBufferRelease(kv.first);  // buffers the host never freed
  for (auto& kv : scratch_)
    if (kv.first) a.wgpuBufferRelease(kv.first);
  if (dummy) a.wgpuBufferRelease(dummy);
  if (queue) a.wgpuQueueRelease(queue);
  if (device) a.wgpuDeviceRelease(device);
  if (adapter) a.wgpuAdapterRelease(adapter);
}

const Pipeline& Device::pipeline(const std::string& key, Prec p, const std::string& src, const char* entry, int storage,
                                 Params params) {
  const std::string full_key = key + (p == Prec::kF16 ? "/f16" : "/f32");
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = pipelines_.find(full_key); it != pipelines_.end()) return *it->second;
  if (auto it = pipeline_errors_.find(full_key); it != pipeline_errors_.end())
    throw Error(DLFUSE_STATUS_DEVICE_ERROR, it->second);
  if (p == Prec::kF16 && !fp16)
    throw Error(DLFUSE_STATUS_UNSUPPORTED, label() + " lacks shader-f16: float16 is not supported there");
  const Api& a = api();
  const std::string code =
      std::string(p == Prec::kF16 ? "enable f16;\nalias T = f16;\n" : "alias T = f32;\n") + kCommon + "\n" + src;
  ErrorScope scope;
  auto pl = std::make_unique<Pipeline>();
  pl->storage = storage;
  pl->params = params;
  WGPUShaderSourceWGSL wgsl = WGPU_SHADER_SOURCE_WGSL_INIT;
  wgsl.code = WGPUStringView{code.data(), code.size()};
  WGPUShaderModuleDescriptor sdesc = WGPU_SHADER_MODULE_DESCRIPTOR_INIT;
  sdesc.nextInChain = &wgsl.chain;
  // Without WGSL's run-time bounds checks (an index clamp per array access, a counter per
  // loop): every index is in bounds by construction (prepare_call checks each view against
  // its buffer). DLFUSE_WEBGPU_BOUNDS_CHECKS=1 keeps them, for debugging.
  const char* bc = std::getenv("DLFUSE_WEBGPU_BOUNDS_CHECKS");
  WGPUShaderModule module = bc && std::string(bc) == "1"
                                ? a.wgpuDeviceCreateShaderModule(device, &sdesc)
                                : a.wgpuDeviceCreateShaderModuleTrusted(device, &sdesc, WGPUShaderRuntimeChecks_None);
  std::vector<WGPUBindGroupLayoutEntry> entries(size_t(storage),
                                                WGPUBindGroupLayoutEntry(WGPU_BIND_GROUP_LAYOUT_ENTRY_INIT));
  for (int i = 0; i < storage; ++i) {
    entries[size_t(i)].binding = uint32_t(i);
    entries[size_t(i)].visibility = WGPUShaderStage_Compute;
    entries[size_t(i)].buffer.type = i > 0                        ? WGPUBufferBindingType_Storage
                                     : params == Params::kUniform ? WGPUBufferBindingType_Uniform
                                                                  : WGPUBufferBindingType_ReadOnlyStorage;
  }
  WGPUBindGroupLayoutDescriptor ldesc = WGPU_BIND_GROUP_LAYOUT_DESCRIPTOR_INIT;
  ldesc.entryCount = entries.size();
  ldesc.entries = entries.data();
  pl->layout = a.wgpuDeviceCreateBindGroupLayout(device, &ldesc);
  WGPUPipelineLayoutDescriptor pdesc = WGPU_PIPELINE_LAYOUT_DESCRIPTOR_INIT;
  pdesc.bindGroupLayoutCount = 1;
  pdesc.bindGroupLayouts = &pl->layout;
  WGPUPipelineLayout playout = a.wgpuDeviceCreatePipelineLayout(device, &pdesc);
  WGPUComputePipelineDescriptor cdesc = WGPU_COMPUTE_PIPELINE_DESCRIPTOR_INIT;
  cdesc.layout = playout;
  cdesc.compute.module = module;
  cdesc.compute.entryPoint = view(entry);
  pl->pipeline = a.wgpuDeviceCreateComputePipeline(device, &cdesc);
  a.wgpuPipelineLayoutRelease(playout);
  a.wgpuShaderModuleRelease(module);
  try {
    scope.check("building the WGSL kernel " + std::string(entry) + " (" + full_key + ") on " + label());
  } catch (const Error& e) {
    pipeline_errors_[full_key] = e.what();
    if (pl->pipeline) a.wgpuComputePipelineRelease(pl->pipeline);
    if (pl->layout) a.wgpuBindGroupLayoutRelease(pl->layout);
    throw;
  }
  const Pipeline& ref = *pl;
  pipelines_[full_key] = std::move(pl);
  return ref;
}

WGPUBuffer Device::create_buffer(uint64_t nbytes, bool track) {
  const uint64_t size = std::max<uint64_t>(16, (nbytes + 15) / 16 * 16);
  if (size > limits.maxBufferSize)
    throw Error(DLFUSE_STATUS_OUT_OF_MEMORY, "a buffer of " + std::to_string(nbytes) + " bytes exceeds " + label() +
                                                 "'s maxBufferSize " + std::to_string(limits.maxBufferSize));
  const Api& a = api();
  ErrorScope scope;
  WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
  desc.usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst;
  desc.size = size;
  WGPUBuffer b = a.wgpuDeviceCreateBuffer(device, &desc);
  try {
    scope.check("wgpuDeviceCreateBuffer(" + std::to_string(size) + " bytes) on " + label());
  } catch (const Error& e) {
    if (b) a.wgpuBufferRelease(b);
    throw Error(DLFUSE_STATUS_OUT_OF_MEMORY, e.what());
  }
  if (!b) throw Error(DLFUSE_STATUS_OUT_OF_MEMORY, "wgpuDeviceCreateBuffer(" + std::to_string(size) + " bytes) failed");
  if (track) {
    std::lock_guard<std::mutex> lock(mu_);
    buffers_[b] = nbytes;
  }
  return b;
}

uint64_t Device::buffer_size(WGPUBuffer b) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(b);
  return it == buffers_.end() ? 0 : std::max<uint64_t>(1, it->second);
}

void Device::forget_buffer(WGPUBuffer b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!buffers_.erase(b))
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "ptr: expected a buffer allocated on " + label() + ", got another pointer");
  }
  api().wgpuBufferRelease(b);  // wgpu keeps it alive until queued work that uses it is done
}

WGPUBuffer Device::cached_scratch(size_t slot, uint64_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (scratch_.size() <= slot) scratch_.resize(slot + 1, {nullptr, 0});
  auto& [buf, size] = scratch_[slot];
  if (size < nbytes) {
    // Grown by half again at least, so a growing series of calls allocates a few times.
    const uint64_t want = std::max(nbytes, size + size / 2);
    WGPUBuffer b = create_buffer(want, false);
    if (buf) api().wgpuBufferRelease(buf);  // launches holding a reference keep it alive
    buf = b;
    size = want;
  }
  api().wgpuBufferAddRef(buf);
  return buf;
}

void Device::submit(WGPUCommandBuffer cb) {
  const Api& a = api();
  a.wgpuQueueSubmitForIndex(queue, 1, &cb);
  a.wgpuCommandBufferRelease(cb);
}

void Device::wait_idle() {
  ErrorScope scope;
  api().wgpuDevicePoll(device, true, nullptr);
  scope.check("waiting for " + label());
}

namespace {
// Copies out of a mapped staging buffer. The driver recycles that memory between buffers
// from its own (uninstrumented) threads, so ThreadSanitizer would pair these reads with an
// earlier buffer's writes at the same address: the loop is left uninstrumented (and kept a
// loop, not a memcpy call, which the sanitizer intercepts).
__attribute__((no_sanitize("thread"), optimize("no-tree-loop-distribute-patterns"))) void copy_from_driver(
    void* dst, const char* src, uint64_t n) {
  char* d = static_cast<char*>(dst);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, src + i, 8);
    __builtin_memcpy(d + i, &w, 8);
  }
  for (; i < n; ++i) d[i] = src[i];
}

// Aligned ranges: WebGPU copies and queue writes take offsets and sizes in 4-byte words.
uint64_t down4(uint64_t v) { return v / 4 * 4; }
uint64_t up4(uint64_t v) { return (v + 3) / 4 * 4; }
}  // namespace

void Device::read(WGPUBuffer src, uint64_t offset, void* dst, uint64_t nbytes) {
  if (nbytes == 0) return;
  const Api& a = api();
  ErrorScope scope;
  const uint64_t lo = down4(offset), hi = up4(offset + nbytes), size = hi - lo;
  WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
  desc.usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst;
  desc.size = size;
  WGPUBuffer staging = a.wgpuDeviceCreateBuffer(device, &desc);
  WGPUCommandEncoderDescriptor edesc = WGPU_COMMAND_ENCODER_DESCRIPTOR_INIT;
  WGPUCommandEncoder enc = a.wgpuDeviceCreateCommandEncoder(device, &edesc);
  a.wgpuCommandEncoderCopyBufferToBuffer(enc, src, lo, staging, 0, size);
  WGPUCommandBufferDescriptor cdesc = WGPU_COMMAND_BUFFER_DESCRIPTOR_INIT;
  WGPUCommandBuffer cb = a.wgpuCommandEncoderFinish(enc, &cdesc);
  a.wgpuCommandEncoderRelease(enc);
  const WGPUSubmissionIndex idx = a.wgpuQueueSubmitForIndex(queue, 1, &cb);
  a.wgpuCommandBufferRelease(cb);
  struct Map {
    std::atomic<int> status{0};  // 0 pending, 1 mapped, 2 failed
    std::string message;
  } m;
  WGPUBufferMapCallbackInfo info = WGPU_BUFFER_MAP_CALLBACK_INFO_INIT;
  info.mode = WGPUCallbackMode_AllowSpontaneous;
  info.callback = [](WGPUMapAsyncStatus status, WGPUStringView message, void* u1, void*) {
    Map* mm = static_cast<Map*>(u1);
    if (status != WGPUMapAsyncStatus_Success) mm->message = str(message);
    mm->status.store(status == WGPUMapAsyncStatus_Success ? 1 : 2);
  };
  info.userdata1 = &m;
  a.wgpuBufferMapAsync(staging, WGPUMapMode_Read, 0, size, info);
  // The map completes once the copy's submission has; poll until the callback has run (it
  // may run inside another thread's poll).
  for (int spins = 0; m.status.load() == 0; ++spins) {
    a.wgpuDevicePoll(device, true, &idx);
    if (spins > 1000000) break;
  }
  std::string failure;
  if (m.status.load() == 1) {
    const void* p = a.wgpuBufferGetConstMappedRange(staging, 0, size);
    if (p)
      copy_from_driver(dst, static_cast<const char*>(p) + (offset - lo), nbytes);
    else
      failure = "wgpuBufferGetConstMappedRange returned NULL";
    a.wgpuBufferUnmap(staging);
  } else {
    failure = "mapping the staging buffer failed: " + (m.status.load() == 2 ? m.message : std::string("no answer"));
  }
  a.wgpuBufferRelease(staging);
  scope.check("reading " + std::to_string(nbytes) + " bytes from " + label());
  if (!failure.empty()) throw Error(DLFUSE_STATUS_DEVICE_ERROR, "reading from " + label() + ": " + failure);
}

void Device::write(WGPUBuffer dst, uint64_t offset, const void* src, uint64_t nbytes) {
  if (nbytes == 0) return;
  const Api& a = api();
  const uint64_t lo = down4(offset), hi = up4(offset + nbytes);
  if (lo == offset && hi == offset + nbytes) {
    ErrorScope scope;
    a.wgpuQueueWriteBuffer(queue, dst, offset, src, nbytes);  // copies src before returning
    scope.check("writing " + std::to_string(nbytes) + " bytes to " + label());
    return;
  }
  // Unaligned ends: read the enclosing words, patch them and write them back (the queue
  // orders this after all work submitted before).
  std::vector<char> words(hi - lo);
  read(dst, lo, words.data(), hi - lo);
  std::memcpy(words.data() + (offset - lo), src, nbytes);
  ErrorScope scope;
  a.wgpuQueueWriteBuffer(queue, dst, lo, words.data(), words.size());
  scope.check("writing " + std::to_string(nbytes) + " bytes to " + label());
}

void Device::copy_device(WGPUBuffer src, uint64_t src_off, WGPUBuffer dst, uint64_t dst_off, uint64_t nbytes) {
  if (nbytes == 0) return;
  if (src_off % 4 || dst_off % 4 || nbytes % 4) {  // WebGPU copies whole words: go through the host
    std::vector<char> tmp(nbytes);
    read(src, src_off, tmp.data(), nbytes);
    write(dst, dst_off, tmp.data(), nbytes);
    return;
  }
  const Api& a = api();
  ErrorScope scope;
  WGPUCommandEncoderDescriptor edesc = WGPU_COMMAND_ENCODER_DESCRIPTOR_INIT;
  WGPUCommandEncoder enc = a.wgpuDeviceCreateCommandEncoder(device, &edesc);
  a.wgpuCommandEncoderCopyBufferToBuffer(enc, src, src_off, dst, dst_off, nbytes);
  WGPUCommandBufferDescriptor cdesc = WGPU_COMMAND_BUFFER_DESCRIPTOR_INIT;
  WGPUCommandBuffer cb = a.wgpuCommandEncoderFinish(enc, &cdesc);
  a.wgpuCommandEncoderRelease(enc);
  submit(cb);
  scope.check("copying " + std::to_string(nbytes) + " bytes on " + label());
}

Launch::Launch(Device& d) : dev(d) {
  const Api& a = api();
  WGPUCommandEncoderDescriptor edesc = WGPU_COMMAND_ENCODER_DESCRIPTOR_INIT;
  enc_ = a.wgpuDeviceCreateCommandEncoder(dev.device, &edesc);
  WGPUComputePassDescriptor pdesc = WGPU_COMPUTE_PASS_DESCRIPTOR_INIT;
  pass_ = a.wgpuCommandEncoderBeginComputePass(enc_, &pdesc);
}

Launch::~Launch() {
  const Api& a = api();
  if (pass_) {
    a.wgpuComputePassEncoderEnd(pass_);
    a.wgpuComputePassEncoderRelease(pass_);
  }
  if (enc_) a.wgpuCommandEncoderRelease(enc_);
  for (WGPUBindGroup g : groups_) a.wgpuBindGroupRelease(g);
  for (WGPUBuffer b : owned_) a.wgpuBufferRelease(b);
}

WGPUBuffer Launch::scratch(uint64_t nbytes) {
  owned_.push_back(dev.cached_scratch(scratch_slots_++, nbytes));
  return owned_.back();
}

void Launch::dispatch(const Pipeline& p, const std::vector<WGPUBuffer>& bufs, const std::vector<int32_t>& params,
                      uint32_t gx, uint32_t gy, uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  const uint32_t cap = dev.limits.maxComputeWorkgroupsPerDimension;
  if (gx > cap || gy > cap || gz > cap)
    throw Error(DLFUSE_STATUS_UNSUPPORTED, "a grid of " + std::to_string(gx) + "x" + std::to_string(gy) + "x" +
                                               std::to_string(gz) + " workgroups exceeds " + dev.label() +
                                               "'s maxComputeWorkgroupsPerDimension " + std::to_string(cap));
  if (int(bufs.size()) + 1 != p.storage)
    throw Error(DLFUSE_STATUS_INTERNAL, "kernel binding count: expected " + std::to_string(p.storage - 1) + ", got " +
                                            std::to_string(bufs.size()));
  const Api& a = api();
  // The parameter block, read by binding 0, filled by a queue write (which the queue orders
  // before the submission that reads it). A uniform block has its declared size.
  const bool uniform = p.params == Params::kUniform;
  if (uniform && params.size() > kUniformParams)
    throw Error(DLFUSE_STATUS_INTERNAL, "a kernel's parameter block: expected at most " +
                                            std::to_string(kUniformParams) + " words, got " +
                                            std::to_string(params.size()));
  const uint64_t pbytes = uniform ? kUniformParams * 4 : (std::max<size_t>(16, params.size() * 4) + 15) / 16 * 16;
  WGPUBufferDescriptor desc = WGPU_BUFFER_DESCRIPTOR_INIT;
  desc.usage = (uniform ? WGPUBufferUsage_Uniform : WGPUBufferUsage_Storage) | WGPUBufferUsage_CopyDst;
  desc.size = pbytes;
  WGPUBuffer pb = a.wgpuDeviceCreateBuffer(dev.device, &desc);
  owned_.push_back(pb);
  std::vector<int32_t> words(size_t(pbytes / 4), 0);
  std::copy(params.begin(), params.end(), words.begin());
  a.wgpuQueueWriteBuffer(dev.queue, pb, 0, words.data(), pbytes);
  scope_.check("creating a kernel's parameter buffer on " + dev.label());
  std::vector<WGPUBindGroupEntry> entries(size_t(p.storage), WGPUBindGroupEntry(WGPU_BIND_GROUP_ENTRY_INIT));
  for (int i = 0; i < p.storage; ++i) {
    WGPUBuffer b = i == 0 ? pb : bufs[size_t(i - 1)] ? bufs[size_t(i - 1)] : dev.dummy;
    entries[size_t(i)].binding = uint32_t(i);
    entries[size_t(i)].buffer = b;
    entries[size_t(i)].offset = 0;
    entries[size_t(i)].size = WGPU_WHOLE_SIZE;
  }
  WGPUBindGroupDescriptor gdesc = WGPU_BIND_GROUP_DESCRIPTOR_INIT;
  gdesc.layout = p.layout;
  gdesc.entryCount = entries.size();
  gdesc.entries = entries.data();
  WGPUBindGroup g = a.wgpuDeviceCreateBindGroup(dev.device, &gdesc);
  groups_.push_back(g);
  a.wgpuComputePassEncoderSetPipeline(pass_, p.pipeline);
  a.wgpuComputePassEncoderSetBindGroup(pass_, 0, g, 0, nullptr);
  a.wgpuComputePassEncoderDispatchWorkgroups(pass_, gx, gy, gz);
  scope_.check("recording a kernel on " + dev.label());
}

void Launch::submit() {
  const Api& a = api();
  a.wgpuComputePassEncoderEnd(pass_);
  a.wgpuComputePassEncoderRelease(pass_);
  pass_ = nullptr;
  WGPUCommandBufferDescriptor cdesc = WGPU_COMMAND_BUFFER_DESCRIPTOR_INIT;
  WGPUCommandBuffer cb = a.wgpuCommandEncoderFinish(enc_, &cdesc);
  a.wgpuCommandEncoderRelease(enc_);
  enc_ = nullptr;
  dev.submit(cb);
  scope_.check("submitting work to " + dev.label());
}

}  // namespace dlfuse_webgpu

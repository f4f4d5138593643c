// Opening the plugin's devices (runtime.h): the process's wgpu-native instance, adapters in
// the documented order (DLFUSE_WEBGPU_ADAPTER selects), one WGPUDevice and its queue per
// adapter, and the error scope that turns wgpu-native's validation errors into statuses.
#include "runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device_select.h"

namespace dlfuse_webgpu {
namespace {

// Where wgpu-native's validation errors go: the ErrorScope of the calling thread (the
// library reports them synchronously, on the thread that made the failing call).
__attribute__((tls_model("initial-exec"))) thread_local std::string* tls_error_sink = nullptr;

void on_uncaptured_error(WGPUDevice const*, WGPUErrorType type, WGPUStringView message, void*, void*) {
  std::string m = str(message);
  if (m.size() > 1500) m = m.substr(0, 1500) + " ...";
  const std::string line = "WebGPU error (type " + std::to_string(int(type)) + "): " + m;
  if (tls_error_sink && tls_error_sink->empty()) *tls_error_sink = line;
}

void on_device_lost(WGPUDevice const*, WGPUDeviceLostReason, WGPUStringView, void*, void*) {}

const char* backend_name(WGPUBackendType b) {
  switch (b) {
    case WGPUBackendType_Vulkan: return "Vulkan";
    case WGPUBackendType_Metal: return "Metal";
    case WGPUBackendType_D3D12: return "D3D12";
    case WGPUBackendType_D3D11: return "D3D11";
    case WGPUBackendType_OpenGL: return "OpenGL";
    case WGPUBackendType_OpenGLES: return "OpenGLES";
    default: return "other";
  }
}

const char* type_name(WGPUAdapterType t) {
  switch (t) {
    case WGPUAdapterType_DiscreteGPU: return "discrete gpu";
    case WGPUAdapterType_IntegratedGPU: return "integrated gpu";
    case WGPUAdapterType_CPU: return "cpu";
    default: return "unknown";
  }
}

struct Candidate {
  WGPUAdapter adapter;
  std::string name, backend, type;
  bool is_cpu;
  int rank;  // default order: discrete, integrated, unknown, cpu
};

std::string describe(const std::vector<Candidate>& c) {
  std::string s;
  for (size_t i = 0; i < c.size(); ++i)
    s += (i ? ", " : "") + std::to_string(i) + " = " + c[i].backend + " / " + c[i].name + " (" + c[i].type + ")";
  return s.empty() ? "none" : s;
}

Tile tile_from_env() {
  Tile t;
  const char* e = std::getenv("DLFUSE_WEBGPU_GEMM_TILE");
  if (!e || !*e) return t;
  int v[6] = {0, 0, 0, 0, 0, t.group};
  const int n = std::sscanf(e, "%d,%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
  if (n != 5 && n != 6)
    throw Error(DLFUSE_STATUS_UNAVAILABLE,
                std::string("DLFUSE_WEBGPU_GEMM_TILE='") + e + "'; expected BM,BN,BK,TM,TN[,GROUP]");
  t = Tile{v[0], v[1], v[2], v[3], v[4], v[5]};
  const bool ok = t.bm > 0 && t.bn > 0 && t.bk > 0 && t.tm > 0 && t.tn > 0 && t.tm % 4 == 0 && t.tn % 4 == 0 &&
                  t.bk % 4 == 0 && t.bm % t.tm == 0 && t.bn % t.tn == 0 && t.threads() <= 1024 && t.group > 0;
  if (!ok)
    throw Error(DLFUSE_STATUS_UNAVAILABLE,
                std::string("DLFUSE_WEBGPU_GEMM_TILE='") + e +
                    "'; expected TM, TN and BK multiples of 4, BM a multiple of TM, BN of TN, "
                    "(BM/TM)*(BN/TN) <= 1024, GROUP > 0");
  return t;
}

void open_device(Device& d, const Api& a) {
  a.wgpuAdapterGetLimits(d.adapter, &d.limits);
  d.limits.nextInChain = nullptr;
  d.fp16 = a.wgpuAdapterHasFeature(d.adapter, WGPUFeatureName_ShaderF16);
  if (const char* f = std::getenv("DLFUSE_WEBGPU_FP16"); f && std::string(f) == "off") d.fp16 = false;
  const WGPUFeatureName features[] = {WGPUFeatureName_ShaderF16};
  WGPUDeviceDescriptor desc = WGPU_DEVICE_DESCRIPTOR_INIT;
  desc.label = view("dlfuse");
  desc.requiredFeatureCount = d.fp16 ? 1 : 0;
  desc.requiredFeatures = features;
  desc.requiredLimits = &d.limits;  // everything the adapter offers: buffer sizes, bindings
  desc.deviceLostCallbackInfo.mode = WGPUCallbackMode_AllowSpontaneous;
  desc.deviceLostCallbackInfo.callback = on_device_lost;
  desc.uncapturedErrorCallbackInfo.callback = on_uncaptured_error;
  struct Result {
    WGPUDevice device = nullptr;
    std::string message;
    bool done = false;
  } r;
  WGPURequestDeviceCallbackInfo cb = WGPU_REQUEST_DEVICE_CALLBACK_INFO_INIT;
  cb.mode = WGPUCallbackMode_AllowSpontaneous;
  cb.callback = [](WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView message, void* u1, void*) {
    Result* res = static_cast<Result*>(u1);
    if (status == WGPURequestDeviceStatus_Success)
      res->device = device;
    else
      res->message = str(message);
    res->done = true;
  };
  cb.userdata1 = &r;
  a.wgpuAdapterRequestDevice(d.adapter, &desc, cb);  // wgpu-native answers before returning
  if (!r.done || !r.device)
    throw Error(DLFUSE_STATUS_UNAVAILABLE,
                "requesting a device of " + d.label() + " failed: " + (r.done ? r.message : std::string("no answer")));
  d.device = r.device;
  d.queue = a.wgpuDeviceGetQueue(d.device);
  d.dummy = d.create_buffer(16, false);
}

}  // namespace

std::string Tile::str() const {
  return std::to_string(bm) + "," + std::to_string(bn) + "," + std::to_string(bk) + "," + std::to_string(tm) + "," +
         std::to_string(tn) + "," + std::to_string(group);
}

ErrorScope::ErrorScope() : prev_(tls_error_sink) { tls_error_sink = &msg_; }
ErrorScope::~ErrorScope() { tls_error_sink = prev_; }
void ErrorScope::check(const std::string& what) {
  if (!msg_.empty()) {
    std::string m;
    m.swap(msg_);
    throw Error(DLFUSE_STATUS_DEVICE_ERROR, what + ": " + m);
  }
}

namespace {
// Mesa's device-select layer, an implicit Vulkan layer wherever Mesa's Vulkan drivers are
// installed, asks the Wayland compositor for its GPU on every vkEnumeratePhysicalDevices of
// an instance that enabled VK_KHR_wayland_surface, which wgpu-hal enables whenever a driver
// offers it (no instance flag turns WSI off). Without XDG_RUNTIME_DIR, libwayland-client
// then prints an error on stderr, twice per enumeration. The plugin orders and selects its
// adapters itself (DLFUSE_WEBGPU_ADAPTER), so its instance is created without that layer:
// NODEVICE_SELECT=1, the layer manifest's disable_environment, which the Vulkan loader reads
// while it creates the instance and never again for it. It is set for that call only, once
// per process, and left alone when the user set it or steers the layer (MESA_VK_DEVICE_SELECT,
// DRI_PRIME).
class WithoutDeviceSelectLayer {
 public:
  WithoutDeviceSelectLayer()
      : set_(!std::getenv("NODEVICE_SELECT") && !std::getenv("MESA_VK_DEVICE_SELECT") && !std::getenv("DRI_PRIME") &&
             setenv("NODEVICE_SELECT", "1", 0) == 0) {}
  ~WithoutDeviceSelectLayer() {
    if (set_) unsetenv("NODEVICE_SELECT");
  }
  WithoutDeviceSelectLayer(const WithoutDeviceSelectLayer&) = delete;
  WithoutDeviceSelectLayer& operator=(const WithoutDeviceSelectLayer&) = delete;

 private:
  bool set_;
};

// One instance per process, never released, like the library itself: releasing it makes
// the Vulkan loader unload its driver, and memory a driver keeps in its globals would then
// read as leaked (LeakSanitizer), though every device and buffer is released at close().
WGPUInstance process_instance(const Api& a) {
  static std::once_flag once;
  static WGPUInstance instance = nullptr;
  std::call_once(once, [&] {
    WGPUInstanceExtras extras{};
    extras.chain.sType = static_cast<WGPUSType>(WGPUSType_InstanceExtras);
    extras.backends = WGPUInstanceBackend_Primary;  // Vulkan, Metal, DX12
    WGPUInstanceDescriptor idesc = WGPU_INSTANCE_DESCRIPTOR_INIT;
    idesc.nextInChain = &extras.chain;
    const WithoutDeviceSelectLayer quiet;
    instance = a.wgpuCreateInstance(&idesc);
  });
  if (!instance) throw Error(DLFUSE_STATUS_UNAVAILABLE, "wgpuCreateInstance failed (" + a.path + ")");
  return instance;
}
}  // namespace

void open_devices(State* s) {
  const Api& a = api();
  s->instance = process_instance(a);
  WGPUInstanceEnumerateAdapterOptions opts{};
  opts.backends = WGPUInstanceBackend_Primary;
  const size_t n = a.wgpuInstanceEnumerateAdapters(s->instance, &opts, nullptr);
  std::vector<WGPUAdapter> adapters(n);
  if (n) a.wgpuInstanceEnumerateAdapters(s->instance, &opts, adapters.data());
  std::vector<Candidate> all;
  for (WGPUAdapter ad : adapters) {
    WGPUAdapterInfo info = WGPU_ADAPTER_INFO_INIT;
    a.wgpuAdapterGetInfo(ad, &info);
    Candidate c{ad,
                str(info.device),
                backend_name(info.backendType),
                type_name(info.adapterType),
                info.adapterType == WGPUAdapterType_CPU,
                2};
    if (c.name.empty()) c.name = str(info.description);
    c.rank = info.adapterType == WGPUAdapterType_DiscreteGPU     ? 0
             : info.adapterType == WGPUAdapterType_IntegratedGPU ? 1
             : c.is_cpu                                          ? 3
                                                                 : 2;
    a.wgpuAdapterInfoFreeMembers(info);
    all.push_back(c);
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& x, const Candidate& y) { return x.rank < y.rank; });
  const auto release_unused = [&](const std::vector<Candidate>& keep) {
    for (const Candidate& c : all)
      if (std::none_of(keep.begin(), keep.end(), [&](const Candidate& k) { return k.adapter == c.adapter; }))
        a.wgpuAdapterRelease(c.adapter);
  };
  if (all.empty())
    throw Error(DLFUSE_STATUS_UNAVAILABLE, "no WebGPU adapter (Vulkan, Metal or DX12) found by " + a.path +
                                               " (on Linux: a Vulkan driver, e.g. Debian's mesa-vulkan-drivers)");
  std::vector<Candidate> chosen = all;
  if (const char* env = std::getenv("DLFUSE_WEBGPU_ADAPTER"); env && *env) {
    try {
      // Picks and orders the adapters (plugins/common/src/device_select.h).
      chosen = dlfuse_plugin::select(all, env, "DLFUSE_WEBGPU_ADAPTER", "adapter", describe(all),
                                     [](const Candidate& d) { return d.backend + " / " + d.name; });
    } catch (...) {
      release_unused({});
      throw;
    }
  }
  release_unused(chosen);
  const Tile tile = tile_from_env();
  for (const Candidate& c : chosen) {
    auto d = std::make_unique<Device>();
    d->index = int32_t(s->devices.size());
    d->adapter = c.adapter;
    d->name = c.name;
    d->backend = c.backend;
    d->type = c.type;
    d->is_cpu = c.is_cpu;
    d->tile = tile;
    Device& ref = *d;
    s->devices.push_back(std::move(d));  // owned (and released) from here on
    open_device(ref, a);
  }
  // DLFUSE_WEBGPU_VERBOSE=1: say which adapter got which device_id.
  if (const char* v = std::getenv("DLFUSE_WEBGPU_VERBOSE"); v && *v && std::string(v) != "0")
    for (const auto& d : s->devices)
      std::fprintf(stderr, "dlfuse webgpu: %s%s; gemm tile %s\n", d->label().c_str(), d->fp16 ? " [shader-f16]" : "",
                   d->tile.str().c_str());
}

Device& State::device(int32_t id) {
  if (id < 0 || id >= int32_t(devices.size()))
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "device_id: expected 0.." + std::to_string(int(devices.size()) - 1) + ", got " + std::to_string(id));
  return *devices[size_t(id)];
}

State::~State() { devices.clear(); }

std::string Device::label() const {
  return "webgpu:" + std::to_string(index) + " (" + backend + " / " + name + ", " + type + ")";
}

}  // namespace dlfuse_webgpu

// Device services: routed to the first available plugin serving the device type.
#include "error.hpp"
#include "format.hpp"
#include "registry.hpp"

using namespace dlfuse;

namespace {

// Finds the serving plugin and checks device_id against its device count.
dlfuse_status_t serving(dlfuse_registry_t r, DLDevice dev, const char* fn, Plugin** out) {
  if (!r) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'registry' is NULL; expected a registry", fn);
  Plugin* p = device_plugin(r, dev.device_type, fn);
  if (!p) return DLFUSE_STATUS_NOT_FOUND;
  if (dev.device_id < 0 || dev.device_id >= p->device_count)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument 'device' is %s; expected device_id 0..%d (plugin '%s')",
                fn, device_name(dev).c_str(), p->device_count - 1, p->name.c_str());
  *out = p;
  return DLFUSE_STATUS_OK;
}

// Calls a plugin service and turns its failure into the thread's last error.
template <class F>
dlfuse_status_t service(const char* fn, Plugin* p, F&& call) {
  char err[1024];
  err[0] = '\0';
  int s;
  try {
    s = call(err, sizeof err);
  } catch (...) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: plugin '%s' threw across the C ABI", fn, p->name.c_str());
  }
  if (s == DLFUSE_STATUS_OK) return DLFUSE_STATUS_OK;
  err[sizeof err - 1] = '\0';
  return fail(is_known_status(s) ? static_cast<dlfuse_status_t>(s) : DLFUSE_STATUS_INTERNAL, "%s: plugin '%s': %s", fn,
              p->name.c_str(), err[0] ? err : "(the plugin gave no message)");
}

}  // namespace

extern "C" {

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_count(dlfuse_registry_t registry, int32_t device_type, int32_t* count) {
  return guarded("dlfuse_device_count", [&] {
    if (!registry || !count)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_device_count: argument '%s' is NULL",
                  registry ? "count" : "registry");
    *count = 0;
    // No plugin for the type simply means no such device.
    const Snapshot* snap = registry->current.load(std::memory_order_acquire);
    for (const Plugin* p : snap->service_order)
      if (p->api.device_type == device_type) {
        *count = p->device_count;
        break;
      }
    return DLFUSE_STATUS_OK;
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_alloc(dlfuse_registry_t registry, DLDevice device, size_t nbytes,
                                                  void** ptr) {
  return guarded("dlfuse_device_alloc", [&] {
    if (!ptr) return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "dlfuse_device_alloc: argument 'ptr' is NULL");
    *ptr = nullptr;
    Plugin* p;
    if (auto s = serving(registry, device, "dlfuse_device_alloc", &p)) return s;
    return service("dlfuse_device_alloc", p,
                   [&](char* e, size_t n) { return p->api.alloc(p->state, device.device_id, nbytes, ptr, e, n); });
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_free(dlfuse_registry_t registry, DLDevice device, void* ptr) {
  return guarded("dlfuse_device_free", [&] {
    if (!ptr) return DLFUSE_STATUS_OK;  // like free(NULL)
    Plugin* p;
    if (auto s = serving(registry, device, "dlfuse_device_free", &p)) return s;
    return service("dlfuse_device_free", p,
                   [&](char* e, size_t n) { return p->api.free(p->state, device.device_id, ptr, e, n); });
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_copy(dlfuse_registry_t registry, DLDevice device, dlfuse_copy_kind_t kind,
                                                 void* dst, size_t dst_offset, const void* src, size_t src_offset,
                                                 size_t nbytes, void* stream) {
  return guarded("dlfuse_device_copy", [&] {
    if (kind != DLFUSE_COPY_HOST_TO_DEVICE && kind != DLFUSE_COPY_DEVICE_TO_HOST &&
        kind != DLFUSE_COPY_DEVICE_TO_DEVICE)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_device_copy: argument 'kind' is %d; expected 1..3 (dlfuse_copy_kind_t)",
                  static_cast<int>(kind));
    Plugin* p;
    if (auto s = serving(registry, device, "dlfuse_device_copy", &p)) return s;
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src)
      return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                  "dlfuse_device_copy: argument '%s' is NULL; expected a buffer of %zu bytes", dst ? "src" : "dst",
                  nbytes);
    return service("dlfuse_device_copy", p, [&](char* e, size_t n) {
      return p->api.copy(p->state, device.device_id, kind, dst, dst_offset, src, src_offset, nbytes, stream, e, n);
    });
  });
}

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_synchronize(dlfuse_registry_t registry, DLDevice device, void* stream) {
  return guarded("dlfuse_device_synchronize", [&] {
    Plugin* p;
    if (auto s = serving(registry, device, "dlfuse_device_synchronize", &p)) return s;
    return service("dlfuse_device_synchronize", p,
                   [&](char* e, size_t n) { return p->api.synchronize(p->state, device.device_id, stream, e, n); });
  });
}

}  // extern "C"

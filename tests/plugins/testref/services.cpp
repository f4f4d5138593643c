// open/close and the device services of a host-memory device: one device, aligned
// malloc, memcpy, nothing to wait for.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "testref.h"

namespace testref {
namespace {

int g_state;  // open() needs a non-NULL token; the plugin keeps no per-registry state
constexpr size_t kAlign = 64;

dlfuse_status_t check_device(int32_t device_id, char* err, size_t err_size) {
  if (device_id == 0) return DLFUSE_STATUS_OK;
  return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
              "no cpu device " + std::to_string(device_id) + " (only device 0 exists)");
}

}  // namespace

dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!state) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL state pointer");
    if (host && DLFUSE_HAS_FIELD(host, dlfuse_host_info_t, abi_major) && host->abi_major != DLFUSE_ABI_MAJOR)
      return fail(err, err_size, DLFUSE_STATUS_ABI_MISMATCH, "host has another ABI major");
    *state = &g_state;
    return DLFUSE_STATUS_OK;
  });
}

void close_plugin(void*) noexcept {}

dlfuse_status_t device_count(void*, int32_t* count, char* err, size_t err_size) noexcept {
  if (!count) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL count");
  *count = 1;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t alloc(void*, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!ptr) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL ptr");
    const dlfuse_status_t st = check_device(device_id, err, err_size);
    if (st != DLFUSE_STATUS_OK) return st;
    if (nbytes > std::numeric_limits<size_t>::max() - kAlign)
      return fail(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "allocation size overflows");
    // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a unique pointer.
    const size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (!p)
      return fail(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "cannot allocate " + std::to_string(nbytes) + " bytes");
    *ptr = p;
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t release(void*, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
  const dlfuse_status_t st = guarded(err, err_size, [&] { return check_device(device_id, err, err_size); });
  if (st != DLFUSE_STATUS_OK) return st;
  std::free(ptr);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t copy(void*, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset, const void* src,
                     size_t src_offset, size_t nbytes, void*, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_device(device_id, err, err_size);
    if (st != DLFUSE_STATUS_OK) return st;
    if (kind != DLFUSE_COPY_HOST_TO_DEVICE && kind != DLFUSE_COPY_DEVICE_TO_HOST &&
        kind != DLFUSE_COPY_DEVICE_TO_DEVICE)
      return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "unknown copy kind");
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "NULL copy pointer");
    // memmove: a device-to-device copy within one buffer may overlap.
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t synchronize(void*, int32_t device_id, void*, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] { return check_device(device_id, err, err_size); });
}

}  // namespace testref

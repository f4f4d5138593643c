#include "error.hpp"

#include <cstdarg>
#include <cstdio>

namespace dlfuse {
namespace {
thread_local std::string t_last_error;
}

dlfuse_status_t fail(dlfuse_status_t status, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  try {
    t_last_error.assign(buf);
  } catch (...) {
    // Out of memory while reporting: keep the status, lose the message.
  }
  return status;
}

const char* last_error() { return t_last_error.c_str(); }

const char* status_name(dlfuse_status_t status) {
  switch (status) {
    case DLFUSE_STATUS_OK: return "OK";
    case DLFUSE_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case DLFUSE_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case DLFUSE_STATUS_NOT_FOUND: return "NOT_FOUND";
    case DLFUSE_STATUS_ABI_MISMATCH: return "ABI_MISMATCH";
    case DLFUSE_STATUS_LOAD_FAILED: return "LOAD_FAILED";
    case DLFUSE_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case DLFUSE_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case DLFUSE_STATUS_DEVICE_ERROR: return "DEVICE_ERROR";
    case DLFUSE_STATUS_INTERNAL: return "INTERNAL";
  }
  return "UNKNOWN_STATUS";
}

bool is_known_status(int status) { return status >= DLFUSE_STATUS_OK && status <= DLFUSE_STATUS_INTERNAL; }

}  // namespace dlfuse

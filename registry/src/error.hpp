// The calling thread's last error, and the one way to fail: set it and return a status.
#pragma once
#include <string>

#include "dlfuse/types.h"

namespace dlfuse {

// Formats like printf, stores the message as this thread's last error, returns status.
dlfuse_status_t fail(dlfuse_status_t status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

const char* last_error();
const char* status_name(dlfuse_status_t status);
bool is_known_status(int status);

}  // namespace dlfuse

#include <exception>
#include <new>

namespace dlfuse {

// Every exported function runs its body through this: nothing escapes the C boundary.
template <class F>
dlfuse_status_t guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(DLFUSE_STATUS_OUT_OF_MEMORY, "%s: out of host memory", fn);
  } catch (const std::exception& e) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: internal error: %s", fn, e.what());
  } catch (...) {
    return fail(DLFUSE_STATUS_INTERNAL, "%s: internal error (unknown exception)", fn);
  }
}

}  // namespace dlfuse

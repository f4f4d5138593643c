// Stale memory for the plugin under test. Conformance otherwise hands a kernel memory that
// is fresh from the allocator, and a kernel that reads scratch it never wrote (a partial
// sum past the last row, a tile edge) passes on fresh memory and fails in production, once
// in a while. Before a run, StaleMemory allocates buffers of many sizes through the plugin's
// own device services, fills them with a poison pattern and frees them again, so that the
// scratch a kernel allocates next comes back holding poison rather than zeros.
#ifndef DLFUSE_CONFORMANCE_STALE_H_
#define DLFUSE_CONFORMANCE_STALE_H_

#include <dlfuse/dlfuse.h>

#include <cstddef>
#include <string>
#include <vector>

#include "device.h"

namespace dlfuse_conformance {

// Byte patterns, used in turn from one run to the next: 0xFF is NaN in every float dtype;
// 0x4B is finite and large (1.3e7 as float32, 14.6 as float16). Two patterns, so a kernel
// that reads poison produces different bytes on consecutive runs even where one pattern
// would happen to cancel out.
constexpr unsigned char kStalePatterns[] = {0xFF, 0x4B};
const char* stale_pattern_name(int run);

class StaleMemory {
 public:
  StaleMemory(dlfuse_registry_t reg, DLDevice dev) : reg_(reg), dev_(dev) {}
  // Poisons and frees buffers of sizes from 64 bytes up to `max_bytes` (factor 2 apart),
  // then keeps one small buffer allocated above them until release(): on a heap allocator
  // the freed poison then cannot merge into the heap's top and be returned to the system,
  // so it is what the next allocations get. False with *err if a device service failed.
  bool stir(size_t max_bytes, int run, std::string* err);
  // Frees the pin; call after the kernel ran.
  void release() { pin_.reset(); }

 private:
  dlfuse_registry_t reg_;
  DLDevice dev_;
  DeviceBuffer pin_;
};

// How many poison bytes to stir for a case whose tensors take `case_bytes`: plugins size
// their scratch from the problem, so twice the problem, at least 64 KiB.
size_t stale_bytes_for(size_t case_bytes);

}  // namespace dlfuse_conformance

#endif

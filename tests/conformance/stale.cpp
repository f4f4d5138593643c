#include "stale.h"

#include <algorithm>

namespace dlfuse_conformance {

const char* stale_pattern_name(int run) { return run % 2 == 0 ? "0xFF bytes (NaN)" : "0x4B bytes (finite)"; }

size_t stale_bytes_for(size_t case_bytes) {
  const size_t cap = size_t(64) << 20;
  return std::min(cap, std::max(size_t(64) << 10, 2 * case_bytes));
}

bool StaleMemory::stir(size_t max_bytes, int run, std::string* err) {
  pin_.reset();
  const unsigned char pattern = kStalePatterns[run % 2];
  std::vector<DeviceBuffer> bufs;
  std::vector<unsigned char> host;
  for (size_t n = 64; n <= max_bytes; n *= 2) {
    DeviceBuffer b;
    if (!b.allocate(reg_, dev_, n, err)) return false;
    host.assign(n, pattern);
    if (!b.upload(host.data(), n, err)) return false;
    bufs.push_back(std::move(b));
  }
  // Uploads are complete (they read host memory); the pin goes above the poison.
  if (!pin_.allocate(reg_, dev_, 64, err)) return false;
  const dlfuse_status_t st = dlfuse_device_synchronize(reg_, dev_, nullptr);
  if (st != DLFUSE_STATUS_OK) {
    *err = "device_synchronize: " + describe_failure(st);
    return false;
  }
  bufs.clear();  // freed in allocation order
  return true;
}

}  // namespace dlfuse_conformance

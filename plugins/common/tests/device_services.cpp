// The device services of a plugin built on plugins/common/src/device_plugin.hpp (OpenCL,
// WebGPU), through libdlfuse as a caller reaches them: a round trip is exact, and a copy
// past a buffer's end, from a pointer that is no buffer of the device, or on a stream that is
// not one of the device's is refused with INVALID_ARGUMENT and a message naming the argument,
// what was expected and what came, leaving the buffer as it was; so is a kernel call whose
// input holds a host pointer as its device data.
//   device_services PLUGIN.so DEVICE_TYPE
#include <dlfuse/dlfuse.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL %s\n", what.c_str());
    ++failures;
  } else {
    std::printf("ok   %s\n", what.c_str());
  }
}

// A refusal: INVALID_ARGUMENT whose message holds `text`.
void expect_refused(dlfuse_status_t st, const char* text, const std::string& what) {
  const std::string msg = st == DLFUSE_STATUS_OK ? "" : dlfuse_last_error();
  expect(st == DLFUSE_STATUS_INVALID_ARGUMENT && msg.find(text) != std::string::npos,
         what + " (status " + std::to_string(int(st)) + ", message \"" + msg + "\"; expected INVALID_ARGUMENT with \"" +
             text + "\")");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: device_services PLUGIN.so DEVICE_TYPE\n");
    return 2;
  }
  dlfuse_registry_options_t ro{};
  ro.struct_size = sizeof ro;
  ro.discovery = DLFUSE_DISCOVER_NONE;
  dlfuse_registry_t reg = nullptr;
  int32_t idx = -1;
  if (dlfuse_registry_create(&ro, &reg) != DLFUSE_STATUS_OK ||
      dlfuse_registry_load(reg, argv[1], &idx) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], dlfuse_last_error());
    return 1;
  }
  const DLDevice dev{static_cast<DLDeviceType>(std::atoi(argv[2])), 0};
  constexpr size_t kBytes = 64;
  void* buf = nullptr;
  void* other = nullptr;
  if (dlfuse_device_alloc(reg, dev, kBytes, &buf) != DLFUSE_STATUS_OK ||
      dlfuse_device_alloc(reg, dev, kBytes, &other) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "dlfuse_device_alloc failed: %s\n", dlfuse_last_error());
    return 1;
  }
  std::vector<unsigned char> in(kBytes), back(kBytes, 0);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<unsigned char>(3 * i + 1);
  expect(dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, buf, 0, in.data(), 0, kBytes, nullptr) ==
             DLFUSE_STATUS_OK,
         "host to device, the whole buffer");
  expect(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_DEVICE, other, 8, buf, 0, 32, nullptr) == DLFUSE_STATUS_OK,
         "device to device, 32 bytes to offset 8");
  expect(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, back.data(), 0, other, 8, 32, nullptr) ==
                 DLFUSE_STATUS_OK &&
             dlfuse_device_synchronize(reg, dev, nullptr) == DLFUSE_STATUS_OK &&
             std::memcmp(back.data(), in.data(), 32) == 0,
         "device to host gives back what was written");

  const std::vector<unsigned char> junk(kBytes, 0xEE);
  expect_refused(dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, buf, 60, junk.data(), 0, 8, nullptr),
                 "dst: expected offset + nbytes <= the buffer's 64 bytes, got 60 + 8", "host to device past the end");
  expect_refused(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, back.data(), 0, buf, 64, 1, nullptr),
                 "src: expected offset + nbytes <= the buffer's 64 bytes, got 64 + 1", "device to host past the end");
  expect_refused(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_DEVICE, other, 0, buf, 0, kBytes + 1, nullptr),
                 "src: expected offset + nbytes <= the buffer's 64 bytes, got 0 + 65", "device to device past the end");
  // Offsets that wrap around size_t must not pass the check.
  expect_refused(
      dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, buf, SIZE_MAX - 3, junk.data(), 0, 8, nullptr),
      "dst: expected offset + nbytes <= the buffer's 64 bytes", "host to device at an offset near SIZE_MAX");
  expect_refused(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_DEVICE, other, 0, junk.data(), 0, 8, nullptr),
                 "src: expected a buffer allocated on", "device to device from a host pointer");
  // A buffer handle is no stream of the device.
  expect_refused(dlfuse_device_synchronize(reg, dev, buf), "stream: expected", "synchronize on a buffer as the stream");
  expect_refused(dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, buf, 0, junk.data(), 0, 8, buf),
                 "stream: expected", "copy on a buffer as the stream");

  // A kernel call whose input holds a host pointer as its device data: refused, nothing run.
  dlfuse_op_t op = nullptr;
  if (dlfuse_op_get(reg, "add_mul_activation", &op) == DLFUSE_STATUS_OK) {
    int64_t shape[1] = {4};
    std::vector<float> host(4, 1.0f);
    DLTensor host_x{host.data(), dev, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
    DLTensor y{buf, dev, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
    DLTensor out{other, dev, 1, {kDLFloat, 32, 1}, shape, nullptr, 0};
    const DLTensor* ins[3] = {&host_x, &y, &y};
    DLTensor* outs[1] = {&out};
    dlfuse_attr_t act{};
    act.key = DLFUSE_ATTR_ACTIVATION;
    act.type = DLFUSE_ATTR_INT64;
    act.value.i64 = DLFUSE_ACT_RELU;
    expect_refused(dlfuse_op_call(op, ins, 3, outs, 1, &act, 1, nullptr), "data",
                   "add_mul_activation with a host pointer as x's device data");
  } else {
    expect(false, std::string("dlfuse_op_get(add_mul_activation): ") + dlfuse_last_error());
  }

  std::fill(back.begin(), back.end(), 0);
  expect(dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, back.data(), 0, buf, 0, kBytes, nullptr) ==
                 DLFUSE_STATUS_OK &&
             back == in,
         "the refused copies left the buffer as it was");
  expect(dlfuse_device_free(reg, dev, nullptr) == DLFUSE_STATUS_OK, "free(NULL) is OK");
  expect(
      dlfuse_device_free(reg, dev, buf) == DLFUSE_STATUS_OK && dlfuse_device_free(reg, dev, other) == DLFUSE_STATUS_OK,
      "free");
  dlfuse_registry_destroy(reg);
  std::printf("%s: %d failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}

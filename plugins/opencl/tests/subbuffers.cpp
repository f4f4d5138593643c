// Sub-buffers: two cl_mem handles over one buffer. The registry sees different handles;
// the plugin must refuse an output overlapping an input through them, and accept (and
// compute correctly) disjoint sub-buffers of one parent.
//   opencl_subbuffers PLUGIN.so
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <dlfuse/dlfuse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

cl_mem sub(cl_mem parent, size_t origin, size_t size) {
  cl_buffer_region reg{origin, size};
  cl_int rc = CL_SUCCESS;
  cl_mem m = clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &rc);
  if (rc != CL_SUCCESS) {
    std::fprintf(stderr, "clCreateSubBuffer(%zu, %zu) failed: %d\n", origin, size, rc);
    return nullptr;
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
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
  const DLDevice dev{kDLOpenCL, 0};
  cl_uint align_bits = 0;  // sub-buffer origins must be multiples of the device's alignment
  void* parent = nullptr;
  if (dlfuse_device_alloc(reg, dev, 1 << 16, &parent) != DLFUSE_STATUS_OK) return 1;
  cl_context ctx = nullptr;
  cl_device_id did = nullptr;
  clGetMemObjectInfo(static_cast<cl_mem>(parent), CL_MEM_CONTEXT, sizeof ctx, &ctx, nullptr);
  clGetContextInfo(ctx, CL_CONTEXT_DEVICES, sizeof did, &did, nullptr);
  clGetDeviceInfo(did, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, nullptr);
  const size_t step = std::max<size_t>(align_bits / 8, 256);
  int failures = 0;

  const int64_t M = 8, N = 16;  // 512 bytes of float32 per tensor
  int64_t shape[2] = {M, N}, bshape[1] = {N};
  const DLDataType f32{kDLFloat, 32, 1};
  std::vector<float> x(static_cast<size_t>(M * N)), y(static_cast<size_t>(M * N)), bias(static_cast<size_t>(N)),
      out(static_cast<size_t>(M * N));
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(i % 9) - 4.0f;
    y[i] = float(i % 5) * 0.5f;
  }
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(i % 3) - 1.0f;

  // Disjoint sub-buffers x | y | bias | out, each at its own aligned origin: accepted.
  cl_mem sx = sub(static_cast<cl_mem>(parent), 0 * step * 4, 512),
         sy = sub(static_cast<cl_mem>(parent), 1 * step * 4, 512);
  cl_mem sb = sub(static_cast<cl_mem>(parent), 2 * step * 4, 64),
         so = sub(static_cast<cl_mem>(parent), 3 * step * 4, 512);
  // An output sub-buffer whose range overlaps x's: [0, 512) vs [0 + step, ...) only when
  // step < 512, so build it over x's second half explicitly.
  cl_mem sover = sub(static_cast<cl_mem>(parent), 0, 1024);
  if (!sx || !sy || !sb || !so || !sover) return 1;
  dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, sx, 0, x.data(), 0, 512, nullptr);
  dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, sy, 0, y.data(), 0, 512, nullptr);
  dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, sb, 0, bias.data(), 0, 64, nullptr);
  DLTensor tx{sx, dev, 2, f32, shape, nullptr, 0}, ty{sy, dev, 2, f32, shape, nullptr, 0};
  DLTensor tb{sb, dev, 1, f32, bshape, nullptr, 0}, to{so, dev, 2, f32, shape, nullptr, 0};
  dlfuse_status_t st = dlfuse_add_mul_activation(reg, &tx, &ty, &tb, 0.5, DLFUSE_ACT_IDENTITY, &to, nullptr);
  if (st != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "disjoint sub-buffers refused: %s\n", dlfuse_last_error());
    ++failures;
  } else {
    dlfuse_device_synchronize(reg, dev, nullptr);
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, out.data(), 0, so, 0, 512, nullptr);
    for (int64_t i = 0; i < M * N; ++i) {
      const float ref = x[size_t(i)] + bias[size_t(i % N)] + 0.5f * y[size_t(i)];
      if (out[size_t(i)] != ref) {
        std::fprintf(stderr, "disjoint sub-buffers: out[%ld] = %g, expected %g\n", long(i), out[size_t(i)], ref);
        ++failures;
        break;
      }
    }
  }
  // out's view inside `sover` at byte 256 covers bytes 256..768 of the parent: x's bytes
  // 256..512 (x is sub-buffer sx at origin 0). Different handles, same memory: refused.
  DLTensor tover{sover, dev, 2, f32, shape, nullptr, 256};
  st = dlfuse_add_mul_activation(reg, &tx, &ty, &tb, 0.5, DLFUSE_ACT_IDENTITY, &tover, nullptr);
  if (st != DLFUSE_STATUS_INVALID_ARGUMENT || !std::strstr(dlfuse_last_error(), "sub-buffers")) {
    std::fprintf(stderr, "overlapping sub-buffers: got %s: %s; expected INVALID_ARGUMENT naming sub-buffers\n",
                 dlfuse_status_string(st), dlfuse_last_error());
    ++failures;
  } else {
    std::printf("refused as expected: %s\n", dlfuse_last_error());
  }
  for (cl_mem m : {sx, sy, sb, so, sover}) clReleaseMemObject(m);
  dlfuse_device_free(reg, dev, parent);
  dlfuse_registry_destroy(reg);
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

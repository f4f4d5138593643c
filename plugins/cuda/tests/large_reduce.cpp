// Reductions into a scalar gradient over 2^25 elements, through the C API on cuda:0.
// A float accumulator stops growing at 2^24 equal terms; every gradient here must be
// exactly M*N. Exit 77 (ctest: skipped) without a usable CUDA device.
#include <dlfuse/dlfuse.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int64_t M = 8192, N = 4096;
constexpr int kSkip = 77;

struct Dev {
  dlfuse_registry_t reg;
  DLDevice dev{kDLCUDA, 0};
  std::vector<void*> owned;
  DLTensor put(const std::vector<float>& v, int ndim, int64_t* shape) {
    void* p = nullptr;
    if (dlfuse_device_alloc(reg, dev, v.size() * sizeof(float), &p) != DLFUSE_STATUS_OK ||
        dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, p, 0, v.data(), 0, v.size() * sizeof(float),
                           nullptr) != DLFUSE_STATUS_OK) {
      std::printf("device setup: %s\n", dlfuse_last_error());
      std::exit(1);
    }
    owned.push_back(p);
    DLTensor t{};
    t.data = p;
    t.device = dev;
    t.ndim = ndim;
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape;
    return t;
  }
  float get(const DLTensor& t) {
    float v = -1.f;
    dlfuse_device_copy(reg, dev, DLFUSE_COPY_DEVICE_TO_HOST, &v, 0, t.data, 0, sizeof v, nullptr);
    return v;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s libdlfuse_cuda.so\n", argv[0]);
    return 2;
  }
  dlfuse_registry_options_t o{sizeof o, DLFUSE_DISCOVER_NONE, argv[1]};
  Dev d{};
  if (dlfuse_registry_create(&o, &d.reg) != DLFUSE_STATUS_OK) return 1;
  int32_t count = 0;
  if (dlfuse_device_count(d.reg, kDLCUDA, &count) != DLFUSE_STATUS_OK || count < 1) {
    std::printf("skipped: no usable CUDA device\n");
    return kSkip;
  }
  int64_t so[2] = {M, N}, sa[2] = {M, 1}, sb[2] = {1, N}, s1[1] = {1};
  const std::vector<float> ones(size_t(M * N), 1.f), a(size_t(M), 1.f), b(size_t(N), 1.f), z(1, -5.f), zero(1, 0.f);
  DLTensor g = d.put(ones, 2, so), out = d.put(ones, 2, so), ta = d.put(a, 2, sa), tb = d.put(b, 2, sb);
  DLTensor gb = d.put(z, 1, s1), gb2 = d.put(z, 1, s1), bias = d.put(zero, 1, s1);
  int bad = 0;
  // matmul backward, bias [1]: grad_bias = sum of dZ = M*N.
  if (dlfuse_matmul_add_relu_backward(d.reg, &g, &ta, &tb, &out, nullptr, nullptr, &gb, 0, nullptr) !=
      DLFUSE_STATUS_OK) {
    std::printf("matmul backward: %s\n", dlfuse_last_error());
    return 1;
  }
  // add_mul backward, identity, bias [1]: grad_bias = sum of grad_out = M*N.
  if (dlfuse_add_mul_activation_backward(d.reg, &g, &out, &out, &bias, 0.5, DLFUSE_ACT_IDENTITY, nullptr, nullptr,
                                         &gb2, nullptr) != DLFUSE_STATUS_OK) {
    std::printf("add_mul backward: %s\n", dlfuse_last_error());
    return 1;
  }
  dlfuse_device_synchronize(d.reg, d.dev, nullptr);
  const double want = double(M) * double(N);
  const float got1 = d.get(gb), got2 = d.get(gb2);
  std::printf("matmul grad_bias[1] = %.1f, add_mul grad_bias[1] = %.1f (expected %.1f)\n", got1, got2, want);
  bad += got1 != want;
  bad += got2 != want;
  for (void* p : d.owned) dlfuse_device_free(d.reg, d.dev, p);
  dlfuse_registry_destroy(d.reg);
  return bad ? 1 : 0;
}

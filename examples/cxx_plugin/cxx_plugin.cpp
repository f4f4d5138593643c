// A third-party dlfuse plugin in C++17: add_mul_activation (forward) for float32 and
// float64 on the CPU, any strides and broadcasting. The C++ points of a plugin:
//   - the ABI is C: every function in the descriptor is noexcept in effect, so each one
//     runs its body inside try/catch and turns an exception into a status and message;
//   - the standard library is fine to use inside (std::vector, std::string here); the
//     SDK's dlfuse_add_plugin() (or -Wl,--version-script, docs/plugin-guide.md) keeps its
//     template instances out of the plugin's exported symbols.
#include <dlfuse/plugin.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef EXAMPLE_VERSION
#define EXAMPLE_VERSION "0"
#endif

namespace {

constexpr int kMaxRank = 16;  // docs/abi.md: the registry refuses ndim > 16

// A failure with the status the entry point returns.
struct Failure : std::runtime_error {
  dlfuse_status_t status;
  Failure(dlfuse_status_t s, const std::string& m) : std::runtime_error(m), status(s) {}
};

template <class F> dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  std::string msg;
  dlfuse_status_t st = DLFUSE_STATUS_INTERNAL;
  try {
    body();
    return DLFUSE_STATUS_OK;
  } catch (const Failure& f) {
    st = f.status;
    msg = f.what();
  } catch (const std::bad_alloc&) {
    st = DLFUSE_STATUS_OUT_OF_MEMORY;
    msg = "out of host memory";
  } catch (const std::exception& e) {
    msg = std::string("exception: ") + e.what();
  } catch (...) {
    msg = "unknown exception";
  }
  if (err && err_size) std::snprintf(err, err_size, "cxx_example: %s", msg.c_str());
  return st;
}

// Element strides of t aligned to the last t->ndim of `rank` dims; broadcast dims get 0.
std::vector<int64_t> aligned_strides(const DLTensor* t, int rank) {
  std::vector<int64_t> out(size_t(rank), 0);
  int64_t compact = 1;
  for (int j = t->ndim - 1; j >= 0; --j) {
    const int64_t s = t->strides ? t->strides[j] : compact;
    compact *= t->shape[j];
    if (t->shape[j] != 1) out[size_t(rank - t->ndim + j)] = s;
  }
  return out;
}

double activate(int act, double p) {
  const auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return std::isnan(p) ? p : (p > 0 ? p : 0.0);
    case DLFUSE_ACT_SIGMOID: return sigmoid(p);
    case DLFUSE_ACT_TANH: return std::tanh(p);
    case DLFUSE_ACT_GELU_ERF: return 0.5 * p * (1.0 + std::erf(p * 0.7071067811865476));
    case DLFUSE_ACT_GELU_TANH: return 0.5 * p * (1.0 + std::tanh(0.7978845608028654 * (p + 0.044715 * p * p * p)));
    default: return p * sigmoid(p);  // SILU
  }
}

template <class T> T* at(const DLTensor* t) {
  return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
}

// The pre-activations of all elements first (in double), then the activation: two passes
// so `out` may be `x` itself.
template <class T> void run(const dlfuse_kernel_args_t* args, int act, double mult) {
  const DLTensor *x = args->inputs[0], *y = args->inputs[1], *b = args->inputs[2];
  const DLTensor* out = args->outputs[0];
  const int rank = out->ndim;
  if (rank > kMaxRank)
    throw Failure(DLFUSE_STATUS_UNSUPPORTED, "tensor rank: expected at most 16, got " + std::to_string(rank));
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= out->shape[i];
  if (n == 0) return;
  const std::vector<int64_t> xs = aligned_strides(x, rank), ys = aligned_strides(y, rank),
                             bs = aligned_strides(b, rank), os = aligned_strides(out, rank);
  std::vector<double> pre;
  pre.reserve(size_t(n));
  std::vector<int64_t> idx(size_t(rank), 0);
  const auto off = [&](const std::vector<int64_t>& s) {
    int64_t o = 0;
    for (int i = 0; i < rank; ++i) o += idx[size_t(i)] * s[size_t(i)];
    return o;
  };
  const auto next = [&] {
    for (int i = rank - 1; i >= 0; --i) {
      if (++idx[size_t(i)] < out->shape[i]) return true;
      idx[size_t(i)] = 0;
    }
    return false;
  };
  do {
    pre.push_back(double(at<T>(x)[off(xs)]) + double(at<T>(b)[off(bs)]) + mult * double(at<T>(y)[off(ys)]));
  } while (next());
  size_t k = 0;
  do {
    at<T>(out)[off(os)] = T(activate(act, pre[k++]));
  } while (next());
}

dlfuse_status_t add_mul_activation(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&] {
    const dlfuse_attr_t* act = dlfuse_find_attr(args, DLFUSE_ATTR_ACTIVATION);
    const dlfuse_attr_t* mul = dlfuse_find_attr(args, DLFUSE_ATTR_MULTIPLIER);
    if (!act || act->type != DLFUSE_ATTR_INT64 || act->value.i64 < 0 || act->value.i64 >= DLFUSE_ACT_COUNT)
      throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "attribute ACTIVATION: expected an int64 in [0, " +
                                                        std::to_string(DLFUSE_ACT_COUNT) + ")");
    const double m = (mul && mul->type == DLFUSE_ATTR_FLOAT64) ? mul->value.f64 : 1.0;
    if (args->inputs[0]->dtype.bits == 64) run<double>(args, int(act->value.i64), m);
    else run<float>(args, int(act->value.i64), m);
  });
}

// ---- device services: the CPU is device 0 ----------------------------------------------
void check_device(int32_t id) {
  if (id != 0) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "device_id: expected 0, got " + std::to_string(id));
}

dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void** state, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    if (!state) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "open: state is NULL");
    *state = nullptr;
  });
}
void close_plugin(void*) {}
dlfuse_status_t device_count(void*, int32_t* count, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    if (!count) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = 1;
  });
}
dlfuse_status_t alloc(void*, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    check_device(device_id);
    if (!ptr) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    const size_t rounded = (nbytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
    if (rounded < nbytes) throw Failure(DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: " + std::to_string(nbytes) + " bytes");
    *ptr = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr) throw Failure(DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: " + std::to_string(nbytes) + " bytes failed");
  });
}
dlfuse_status_t release(void*, int32_t device_id, void* ptr, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    check_device(device_id);
    std::free(ptr);
  });
}
dlfuse_status_t copy(void*, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset, const void* src,
                     size_t src_offset, size_t nbytes, void*, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    check_device(device_id);
    if (kind < DLFUSE_COPY_HOST_TO_DEVICE || kind > DLFUSE_COPY_DEVICE_TO_DEVICE)
      throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "copy: kind: expected 1..3, got " + std::to_string(int(kind)));
    if (nbytes == 0) return;
    if (!dst || !src) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "copy: NULL pointer");
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  });
}
dlfuse_status_t synchronize(void*, int32_t device_id, void*, char* err, size_t err_size) {
  return guarded(err, err_size, [&] { check_device(device_id); });
}

const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}};
// Priority 10: a third-party kernel that adds to what the first-party plugins (100) serve
// and loses to them where both have it (docs/plugin-guide.md, "Priorities").
const dlfuse_kernel_t kKernels[] = {
    {sizeof(dlfuse_kernel_t), DLFUSE_OP_ADD_MUL_ACTIVATION, kDLCPU, 2, kDtypes, 10, add_mul_activation, nullptr},
};
dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    if (!kernels || !num) throw Failure(DLFUSE_STATUS_INVALID_ARGUMENT, "get_kernels: NULL");
    *kernels = kKernels;
    *num = int32_t(sizeof kKernels / sizeof kKernels[0]);
  });
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t), DLFUSE_ABI_MAJOR, DLFUSE_ABI_MINOR, "cxx_example",
                                 EXAMPLE_VERSION, kDLCPU, open_plugin, close_plugin, get_kernels, device_count,
                                 alloc, release, copy, synchronize};

}  // namespace

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin; }

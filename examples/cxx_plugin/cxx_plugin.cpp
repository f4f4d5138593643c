// A third-party dlfuse plugin in C++17 on the SDK's plugin kit (dlfuse/plugin_kit.hpp):
// add_mul_activation (forward) for float32 and float64 on the CPU, any strides and
// broadcasting; and an op of its own, cxx_example_outer (ABI 1.2), which it declares with
// a schema so that the registry validates its calls and every binding can call it by name.
// The C++ points of a plugin:
//   - the ABI is C: every function in the descriptor runs its body through kit::guarded,
//     which turns anything thrown into a status and message;
//   - the standard library is fine to use inside (std::vector, std::string here); the
//     SDK's dlfuse_add_plugin() (or -Wl,--version-script, docs/plugin-guide.md) keeps its
//     template instances out of the plugin's exported symbols.
#include <dlfuse/plugin_kit.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef EXAMPLE_VERSION
#define EXAMPLE_VERSION "0"
#endif

namespace {

namespace kit = dlfuse::kit;
constexpr const char* kName = "cxx_example";

template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return kit::guarded(kName, err, err_size, std::forward<F>(body));
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

// The pre-activations of all elements first (in double), then the activation: two passes
// so `out` may be `x` itself.
template <class T>
void run(const dlfuse_kernel_args_t* args, int act, double mult) {
  const kit::View x(args->inputs[0]), y(args->inputs[1]), b(args->inputs[2]), out(args->outputs[0]);
  const int rank = out.rank();
  if (out.numel() == 0) return;
  const kit::Dims xs = x.aligned_strides(rank), ys = y.aligned_strides(rank), bs = b.aligned_strides(rank);
  std::vector<double> pre;
  pre.reserve(size_t(out.numel()));
  kit::Dims idx(size_t(rank), 0);
  do {
    pre.push_back(double(x.base<T>()[kit::dot(idx, xs)]) + double(b.base<T>()[kit::dot(idx, bs)]) +
                  mult * double(y.base<T>()[kit::dot(idx, ys)]));
  } while (kit::next_index(idx, out.shape));
  size_t k = 0;
  do {
    out.base<T>()[kit::dot(idx, out.strides)] = T(activate(act, pre[k++]));
  } while (kit::next_index(idx, out.shape));
}

dlfuse_status_t add_mul_activation(void*, void*, const dlfuse_kernel_args_t* args) {
  return kit::guarded(kName, args, [&] {
    kit::check_call(args, DLFUSE_ARITY(add_mul_activation), true, kDLCPU);
    const int act = kit::activation(args);
    const double m = kit::multiplier(args);
    if (args->inputs[0]->dtype.bits == 64)
      run<double>(args, act, m);
    else
      run<float>(args, act, m);
  });
}

// ---- an op of the plugin's own: out[i, j] = scale * x[i] * y[j] --------------------------
// Declared with a schema (dlfuse/ops.h): two 1-D inputs, one output whose shape a callback
// gives ([len(x), len(y)]), one FLOAT64 attribute with a default. The registry checks every
// call against it before the kernel runs, and dlfuse_op_infer_outputs answers its shape.
constexpr const char* kOuter = "cxx_example_outer";
constexpr int32_t kAttrScale = 1001;  // this op's own attribute key

dlfuse_status_t outer_shape(const DLTensor* const* inputs, int32_t, const dlfuse_attr_t*, int32_t, int32_t,
                            int32_t* ndim, int64_t* shape, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    for (int k = 0; k < 2; ++k)
      if (inputs[k]->ndim != 1) kit::invalid(k ? "y" : "x", "1 dim", std::to_string(inputs[k]->ndim) + " dims");
    *ndim = 2;
    shape[0] = inputs[0]->shape[0];
    shape[1] = inputs[1]->shape[0];
  });
}

dlfuse_attr_schema_t scale_attr() {
  dlfuse_attr_schema_t a{};
  a.name = "SCALE";
  a.default_value.key = kAttrScale;
  a.default_value.type = DLFUSE_ATTR_FLOAT64;
  a.default_value.value.f64 = 1.0;
  return a;
}

const dlfuse_arg_schema_t kOuterInputs[] = {{"x", 0, 0, 0, 0, -1}, {"y", 0, 0, 0, 0, -1}};
const dlfuse_arg_schema_t kOuterOutputs[] = {{"out", 0, 0, DLFUSE_SHAPE_CALLBACK, 0x3u, -1}};
const dlfuse_attr_schema_t kOuterAttrs[] = {scale_attr()};
const dlfuse_op_schema_t kOuterSchema = {
    sizeof(dlfuse_op_schema_t), kOuter, 2, 2, kOuterInputs, 1, kOuterOutputs, 1, kOuterAttrs, outer_shape, -1};

template <class T>
void run_outer(const dlfuse_kernel_args_t* args, double scale) {
  const kit::View x(args->inputs[0]), y(args->inputs[1]), out(args->outputs[0]);
  for (int64_t i = 0; i < x.shape[0]; ++i)
    for (int64_t j = 0; j < y.shape[0]; ++j)
      out.base<T>()[i * out.strides[0] + j * out.strides[1]] =
          T(scale * double(x.base<T>()[i * x.strides[0]]) * double(y.base<T>()[j * y.strides[0]]));
}

dlfuse_status_t outer(void*, void*, const dlfuse_kernel_args_t* args) {
  return kit::guarded(kName, args, [&] {
    kit::check_call(args, kOuterSchema.num_inputs, kOuterSchema.num_outputs, true, kDLCPU);
    const double scale = kit::attr_float(args, kAttrScale, 1.0);
    if (args->inputs[0]->dtype.bits == 64)
      run_outer<double>(args, scale);
    else
      run_outer<float>(args, scale);
  });
}

// ---- device services: the CPU is device 0 ----------------------------------------------
void check_device(int32_t id) {
  if (id != 0) kit::invalid("device_id", "0", std::to_string(id));
}

dlfuse_status_t open_plugin(const dlfuse_host_info_t*, void** state, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    if (!state) throw kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, "open: state is NULL");
    *state = nullptr;
  });
}
void close_plugin(void*) {}
dlfuse_status_t device_count(void*, int32_t* count, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    if (!count) throw kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = 1;
  });
}
dlfuse_status_t alloc(void*, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) {
  return guarded(err, err_size, [&] {
    check_device(device_id);
    if (!ptr) throw kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, "alloc: ptr is NULL");
    const size_t rounded = (nbytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of 64
    if (rounded < nbytes) throw kit::Error(DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: " + std::to_string(nbytes) + " bytes");
    *ptr = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr) throw kit::Error(DLFUSE_STATUS_OUT_OF_MEMORY, "alloc: " + std::to_string(nbytes) + " bytes failed");
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
      throw kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, "copy: kind: expected 1..3, got " + std::to_string(int(kind)));
    if (nbytes == 0) return;
    if (!dst || !src) throw kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, "copy: NULL pointer");
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  });
}
dlfuse_status_t synchronize(void*, int32_t device_id, void*, char* err, size_t err_size) {
  return guarded(err, err_size, [&] { check_device(device_id); });
}

// Priority 10: a third-party kernel that adds to what the first-party plugins (100) serve
// and loses to them where both have it (docs/plugin-guide.md, "Priorities").
const kit::KernelTable kKernels(kDLCPU, {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}}, 10,
                                {{DLFUSE_OP_ADD_MUL_ACTIVATION, add_mul_activation},
                                 {kOuter, outer, nullptr, 0, &kOuterSchema}});
dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) {
  return kKernels.get(kernels, num, kName, err, err_size);
}

const dlfuse_plugin_t kPlugin = {/* .struct_size = */ sizeof(dlfuse_plugin_t),
                                 /* .abi_major = */ DLFUSE_ABI_MAJOR,
                                 /* .abi_minor = */ DLFUSE_ABI_MINOR,
                                 /* .name = */ kName,
                                 /* .version = */ EXAMPLE_VERSION,
                                 /* .device_type = */ kDLCPU,
                                 /* .open = */ open_plugin,
                                 /* .close = */ close_plugin,
                                 /* .get_kernels = */ get_kernels,
                                 /* .device_count = */ device_count,
                                 /* .alloc = */ alloc,
                                 /* .free = */ release,
                                 /* .copy = */ copy,
                                 /* .synchronize = */ synchronize};

}  // namespace

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin; }

// What both files of dlfuse's C++ PyTorch operators share (torch_ops.cpp: the hand-written
// operators; torch_derived.cpp: those derived from op schemas): libdlfuse's entry points as
// the Python package loaded them, statuses as torch errors, torch tensors as DLTensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>

#include <string>

#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h>

namespace dlfuse_torch {

using at::Tensor;

// ---- libdlfuse, as the Python package loaded it ---------------------------------------------

struct Lib {
  dlfuse_registry_t reg = nullptr;
  decltype(&dlfuse_last_error) last_error = nullptr;
  decltype(&dlfuse_matmul_add_relu) mar = nullptr;
  decltype(&dlfuse_matmul_add_relu_backward) mar_bwd = nullptr;
  decltype(&dlfuse_add_mul_activation) amc = nullptr;
  decltype(&dlfuse_add_mul_activation_backward) amc_bwd = nullptr;
  decltype(&dlfuse_add_mul_activation_backward_from_out) amc_bwd_out = nullptr;
  decltype(&dlfuse_matmul_add_activation) maa = nullptr;
  decltype(&dlfuse_matmul_add_activation_backward) maa_bwd = nullptr;
  decltype(&dlfuse_matmul_add_residual) mres = nullptr;
  decltype(&dlfuse_matmul_add_residual_backward) mres_bwd = nullptr;
  decltype(&dlfuse_op_get) op_get = nullptr;
  decltype(&dlfuse_op_resolve) op_resolve = nullptr;
  decltype(&dlfuse_registry_plugin_info) plugin_info = nullptr;
  decltype(&dlfuse_registry_kernel_info) kernel_info = nullptr;
  decltype(&dlfuse_op_call) op_call = nullptr;                  // ABI 1.2: derived operators
  decltype(&dlfuse_op_schema) op_schema = nullptr;
  decltype(&dlfuse_op_infer_outputs) op_infer_outputs = nullptr;
};
inline Lib g_lib;

inline const Lib& lib() {
  TORCH_CHECK(g_lib.reg, "dlfuse: the C++ operators are not initialized (import dlfuse.torch)");
  return g_lib;
}

template <class F> inline void bind(void* h, const char* name, F& f) { f = reinterpret_cast<F>(dlsym(h, name)); }

// The status as an exception whose message dlfuse.torch maps back to dlfuse's error class:
// "dlfuse status <n>: <libdlfuse's message>".
inline void check(dlfuse_status_t st) {
  if (st == DLFUSE_STATUS_OK) return;
  const char* m = g_lib.last_error ? g_lib.last_error() : "";
  const std::string msg = "dlfuse status " + std::to_string(int(st)) + ": " + (m ? m : "");
  if (st == DLFUSE_STATUS_INVALID_ARGUMENT) TORCH_CHECK_VALUE(false, msg);
  TORCH_CHECK(false, msg);
}

template <class F> F need(F f, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(f, "dlfuse: ", name, " needs libdlfuse of ABI >= 1.1; the loaded library is older");
  return f;
}

// ---- torch tensors as DLTensors (no allocation, no ownership) -------------------------------

inline DLDataType dl_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return {kDLFloat, 32, 1};
    case at::kDouble: return {kDLFloat, 64, 1};
    case at::kHalf: return {kDLFloat, 16, 1};
    case at::kBFloat16: return {kDLBfloat, 16, 1};
    case at::kInt: return {kDLInt, 32, 1};
    case at::kLong: return {kDLInt, 64, 1};
    case at::kShort: return {kDLInt, 16, 1};
    case at::kChar: return {kDLInt, 8, 1};
    case at::kByte: return {kDLUInt, 8, 1};
    case at::kBool: return {kDLBool, 8, 1};
    default: return {kDLOpaqueHandle, 0, 1};  // the registry refuses it, naming the dtype
  }
}

struct Dl {
  DLTensor t{};
  Dl() = default;
  explicit Dl(const Tensor& x) {
    t.data = x.data_ptr();  // storage offset included
    t.device = x.is_cuda() ? DLDevice{kDLCUDA, x.get_device()} : DLDevice{kDLCPU, 0};
    if (!x.is_cuda() && !x.is_cpu()) t.device = DLDevice{DLDeviceType(0), 0};  // refused by the registry
    t.ndim = int32_t(x.dim());
    t.dtype = dl_dtype(x.scalar_type());
    t.shape = const_cast<int64_t*>(x.sizes().data());
    t.strides = const_cast<int64_t*>(x.strides().data());
  }
  DLTensor* get() { return &t; }
};
inline DLTensor* opt(Dl& d, const Tensor& x) { return x.defined() ? (d = Dl(x), d.get()) : nullptr; }

// torch's current stream on x's device (the capturing stream under a CUDA graph).
inline void* stream_of(const Tensor& x) {
  if (!x.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(x.device()).native_handle();
}

// Whether autograd is running this backward on traced tensors (torch.compile's fake or
// functional ones) rather than real ones.
inline bool traced(const Tensor& t) {
  const auto ks = t.key_set();
  return ks.has(c10::DispatchKey::Python) || ks.has(c10::DispatchKey::Functionalize);
}

}  // namespace dlfuse_torch

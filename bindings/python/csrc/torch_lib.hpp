// What both files of dlfuse's C++ PyTorch operators share (torch_ops.cpp: the library's entry
// points; torch_derived.cpp: the operators, derived from op schemas): libdlfuse's entry
// points as the Python package loaded them, statuses as torch errors, torch tensors as
// DLTensors.
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
  decltype(&dlfuse_op_get) op_get = nullptr;
  decltype(&dlfuse_op_call) op_call = nullptr;
  decltype(&dlfuse_registry_op_count) registry_op_count = nullptr;  // ABI 1.2 from here
  decltype(&dlfuse_registry_op_schema) registry_op_schema = nullptr;
  decltype(&dlfuse_op_infer_outputs) op_infer_outputs = nullptr;
  decltype(&dlfuse_op_backward_plan) op_backward_plan = nullptr;
};
inline Lib g_lib;

inline const Lib& lib() {
  TORCH_CHECK(g_lib.reg, "dlfuse: the C++ operators are not initialized (import dlfuse.torch)");
  return g_lib;
}

template <class F>
inline void bind(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
}

// The status as an exception whose message dlfuse.torch maps back to dlfuse's error class:
// "dlfuse status <n>: <libdlfuse's message>".
inline std::string status_message(dlfuse_status_t st) {
  const char* m = g_lib.last_error ? g_lib.last_error() : "";
  return "dlfuse status " + std::to_string(int(st)) + ": " + (m ? m : "");
}
inline void check(dlfuse_status_t st) {
  if (st == DLFUSE_STATUS_OK) return;
  const std::string msg = status_message(st);
  if (st == DLFUSE_STATUS_INVALID_ARGUMENT) TORCH_CHECK_VALUE(false, msg);
  TORCH_CHECK(false, msg);
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

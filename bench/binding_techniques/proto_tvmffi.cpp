// The apache-tvm-ffi prototype: a typed function exported through the FFI's C ABI, its tensor
// arguments tvm::ffi::TensorView (tvm-ffi's own DLPack import, through a framework's DLPack
// exchange API where it has one); a failed status raises through TVM_FFI_THROW.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

#include <string>

#include "common.h"

namespace {
using tvm::ffi::TensorView;

int64_t init(int64_t reg, std::string op, int64_t get, int64_t c, int64_t le) {
  return proto_init(static_cast<uintptr_t>(reg), op.c_str(), static_cast<uintptr_t>(get), static_cast<uintptr_t>(c),
                    static_cast<uintptr_t>(le));
}

// TensorView keeps its DLTensor private; the same fields, handed on.
DLTensor view(const TensorView& v) {
  DLTensor t{};
  t.data = v.data_ptr();
  t.device = v.device();
  t.ndim = v.ndim();
  t.dtype = v.dtype();
  t.shape = const_cast<int64_t*>(v.shape().data());
  t.strides = const_cast<int64_t*>(v.strides().data());
  t.byte_offset = v.byte_offset();
  return t;
}

void call(TensorView x, TensorView y, TensorView b, TensorView out) {
  DLTensor tx = view(x), ty = view(y), tb = view(b), to = view(out);
  int st = proto_run(&tx, &ty, &tb, &to);
  if (st) TVM_FFI_THROW(RuntimeError) << "dlfuse: " << proto_last_error_fn();
}
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(init, init);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(call, call);

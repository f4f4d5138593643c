// The nanobind prototype: nb::ndarray<> arguments (nanobind's own DLPack import), the op call,
// a C++ exception for a failed status (nanobind turns it into a Python RuntimeError).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <stdexcept>
#include <string>

#include "common.h"

namespace nb = nanobind;

namespace {
DLTensor view(const nb::ndarray<>& a) {
  DLTensor t{};
  t.data = a.data();
  t.device.device_type = static_cast<DLDeviceType>(a.device_type());
  t.device.device_id = a.device_id();
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype.code = a.dtype().code;
  t.dtype.bits = a.dtype().bits;
  t.dtype.lanes = a.dtype().lanes;
  t.shape = const_cast<int64_t*>(a.shape_ptr());
  t.strides = const_cast<int64_t*>(a.stride_ptr());
  return t;
}

void call(nb::ndarray<> x, nb::ndarray<> y, nb::ndarray<> b, nb::ndarray<> out) {
  DLTensor tx = view(x), ty = view(y), tb = view(b), to = view(out);
  int st;
  {
    nb::gil_scoped_release nogil;
    st = proto_run(&tx, &ty, &tb, &to);
  }
  if (st) throw std::runtime_error(std::string("dlfuse: ") + proto_last_error_fn());
}
}  // namespace

NB_MODULE(proto_nanobind, m) {
  m.def("init", [](uintptr_t reg, const char* op, uintptr_t get, uintptr_t c, uintptr_t le) {
    return proto_init(reg, op, get, c, le);
  });
  m.def("call", &call);
}

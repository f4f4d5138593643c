// Shape checks with messages naming the op, the argument, the expected and the actual shape.
#pragma once
#include <string>

#include "dlfuse/types.h"
#include "tensor_checks.hpp"

namespace dlfuse {

std::string shape_of(const TensorView& v);
dlfuse_status_t shape_mismatch(const char* op, const char* arg, const std::string& expected, const TensorView& got,
                               const char* why);
// The shape of A @ B (A [..., M, K] named an, B [..., K, N] named bn): broadcast batch dims
// + [M, N]; fails naming the argument when they do not multiply.
dlfuse_status_t matmul_out_shape(const char* op, const DLTensor* A, const DLTensor* B, const char* an, const char* bn,
                                 int64_t* out, int32_t* nout);
inline dlfuse_status_t matmul_out_shape(const char* op, const TensorView& a, const TensorView& b, int64_t* out,
                                        int32_t* nout) {
  return matmul_out_shape(op, a.t, b.t, "a", "b", out, nout);
}
dlfuse_status_t expect_shape(const char* op, const char* arg, const TensorView& v, const int64_t* shape, int32_t n,
                             const char* why);
dlfuse_status_t expect_broadcastable(const char* op, const char* arg, const TensorView& v, const int64_t* shape,
                                     int32_t n);
bool present(const TensorView& v);
dlfuse_status_t expect_absent(const char* op, const char* arg, const TensorView& v, const char* why);
dlfuse_status_t expect_present(const char* op, const char* arg, const TensorView& v, const char* why);
// Outputs whose shape names the forward input they reduce to: broadcastable to `shape`.
dlfuse_status_t expect_reductions(const char* op, const TensorView* out, const char* const* names, int32_t n,
                                  const int64_t* shape, int32_t nshape);

}  // namespace dlfuse

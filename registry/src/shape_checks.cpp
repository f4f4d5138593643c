// Shape checks shared by the core ops' rules and the schema rules (shape_checks.hpp).
#include "shape_checks.hpp"

#include "error.hpp"
#include "format.hpp"

namespace dlfuse {

std::string shape_of(const TensorView& v) { return shape_string(v.t->shape, v.t->ndim); }

dlfuse_status_t shape_mismatch(const char* op, const char* arg, const std::string& expected, const TensorView& got,
                               const char* why) {
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': shape is %s; expected %s (%s)", op, arg,
              shape_of(got).c_str(), expected.c_str(), why);
}

dlfuse_status_t matmul_out_shape(const char* op, const DLTensor* A, const DLTensor* B, const char* an, const char* bn,
                                 int64_t* out, int32_t* nout) {
  if (A->ndim < 2)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': ndim is %d; expected >= 2 ([..., M, K])", op, an,
                A->ndim);
  if (B->ndim < 2)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s': ndim is %d; expected >= 2 ([..., K, N])", op, bn,
                B->ndim);
  const int64_t K = A->shape[A->ndim - 1];
  if (B->shape[B->ndim - 2] != K)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: argument '%s': shape[-2] (K) is %lld; expected %lld, %s's shape[-1] (%s %s, %s %s)", op, bn,
                static_cast<long long>(B->shape[B->ndim - 2]), static_cast<long long>(K), an, an,
                shape_string(A->shape, A->ndim).c_str(), bn, shape_string(B->shape, B->ndim).c_str());
  if (!broadcast_shapes(A->shape, A->ndim - 2, B->shape, B->ndim - 2, out, nout) || *nout + 2 > kMaxNdim)
    return fail(DLFUSE_STATUS_INVALID_ARGUMENT,
                "%s: arguments '%s' %s and '%s' %s: batch dims do not broadcast (NumPy rules)", op, an,
                shape_string(A->shape, A->ndim).c_str(), bn, shape_string(B->shape, B->ndim).c_str());
  out[(*nout)++] = A->shape[A->ndim - 2];
  out[(*nout)++] = B->shape[B->ndim - 1];
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t expect_shape(const char* op, const char* arg, const TensorView& v, const int64_t* shape, int32_t n,
                             const char* why) {
  if (same_shape(v.t->shape, v.t->ndim, shape, n)) return DLFUSE_STATUS_OK;
  return shape_mismatch(op, arg, shape_string(shape, n), v, why);
}

dlfuse_status_t expect_broadcastable(const char* op, const char* arg, const TensorView& v, const int64_t* shape,
                                     int32_t n) {
  if (broadcasts_to(v.t->shape, v.t->ndim, shape, n)) return DLFUSE_STATUS_OK;
  return shape_mismatch(op, arg, "a shape that broadcasts to " + shape_string(shape, n), v, "NumPy broadcasting");
}

bool present(const TensorView& v) { return v.t != nullptr; }

dlfuse_status_t expect_absent(const char* op, const char* arg, const TensorView& v, const char* why) {
  if (!present(v)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is given; expected NULL (%s)", op, arg, why);
}

dlfuse_status_t expect_present(const char* op, const char* arg, const TensorView& v, const char* why) {
  if (present(v)) return DLFUSE_STATUS_OK;
  return fail(DLFUSE_STATUS_INVALID_ARGUMENT, "%s: argument '%s' is NULL; expected a DLTensor (%s)", op, arg, why);
}

dlfuse_status_t expect_reductions(const char* op, const TensorView* out, const char* const* names, int32_t n,
                                  const int64_t* shape, int32_t nshape) {
  for (int32_t i = 0; i < n; ++i)
    if (present(out[i]))
      if (auto s = expect_broadcastable(op, names[i], out[i], shape, nshape)) return s;
  return DLFUSE_STATUS_OK;
}

}  // namespace dlfuse

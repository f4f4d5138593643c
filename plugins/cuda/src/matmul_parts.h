// The pieces every matmul op of the plugin is made of: the output as a GEMM target, the
// bias as an epilogue vector or a broadcast addend, and the backward's reductions and
// operand gradients from a compact dZ.
#ifndef DLFUSE_CUDA_MATMUL_PARTS_H_
#define DLFUSE_CUDA_MATMUL_PARTS_H_

#include <vector>

#include "gemm.h"
#include "kernels.h"
#include "ops.h"

namespace dlfuse_cuda {

// t's view over its own shape aligned to `rank` dims (1 where t has fewer).
View view_full(const DLTensor* t, int rank);
// t's view over the (broadcast) shape `shape`: stride 0 along broadcast dims.
View view_over(const DLTensor* t, const std::vector<int64_t>& shape);
// t's own view.
View own_view(const DLTensor* t);
// True when v is compact row-major over its shape (size-1 dims ignored).
bool is_compact(const View& v);

// A matmul's output as cuBLASLt's D: the tensor itself when its layout is expressible,
// else a compact temporary (`direct` false) that copy_back() moves into the tensor.
struct GemmTarget {
  GemmTarget(CallContext& cx, DLTensor* t);
  void copy_back(DType dt, cudaStream_t s) const;
  DLTensor* tensor;
  std::vector<int64_t> shape;  // the tensor's shape
  Mat D;
  View view;  // D's elements over `shape`
  bool direct = true;
  Temp tmp;
};

// A GEMM of cx's dtype from a @ b into target.D, batch dims of the output.
Gemm gemm_into(CallContext& cx, const DLTensor* a, const DLTensor* b, const GemmTarget& target, bool tf32);

// True when bias fits cuBLASLt's BIAS epilogue for D: a packed vector along D's cuBLASLt
// rows ([N] for a row-major D, [M, 1] otherwise), batch strides of its own.
bool bias_is_epilogue_vector(const DLTensor* bias, const GemmTarget& target);
// Sets g.bias for such a bias.
void use_bias_epilogue(Gemm& g, const DLTensor* bias, int rank);
// The bias part of a forward: the epilogue vector, or broadcast into D and added (beta 1).
void add_bias(CallContext& cx, Gemm& g, const DLTensor* bias, const GemmTarget& t);

// The reduction of a compact dZ (over `shape`) into a gradient of a broadcast operand
// (bias, residual): column sums for a row vector, reduce_to otherwise, a copy for the
// full shape.
void reduce_into(CallContext& cx, const void* dz, const std::vector<int64_t>& shape, DLTensor* grad);

// dZ (compact over the output's shape `shape`) as a GEMM operand.
Mat compact_mat(void* base, const std::vector<int64_t>& shape);

// grad_a = reduce(dZ @ b^T) and grad_b = reduce(a^T @ dZ), each skipped when NULL.
void operand_grads(CallContext& cx, bool tf32, const Mat& dz, const std::vector<int64_t>& shape, const DLTensor* a,
                   const DLTensor* b, DLTensor* ga, DLTensor* gb);

bool read_tf32(const dlfuse_kernel_args_t* args);

// dZ = grad_out * act'(src) compact over `shape` into dz, src the forward's pre or (from_out)
// out, and grad_bias (may be NULL) reduced from it. (epilogue.cpp)
void activation_dz(CallContext& cx, int act, bool from_out, const DLTensor* gout, const DLTensor* src,
                   const std::vector<int64_t>& shape, void* dz, DLTensor* gbias);

// The backward of act(a @ b + bias) from grad_out and src, the forward's out (from_out: for
// identity, relu, sigmoid, tanh) or pre: one pass writes dZ and, for a row-vector bias, its
// column sums; then grad_a and grad_b. Outputs may be NULL. (epilogue.cpp)
void activation_backward(CallContext& cx, bool tf32, int act, bool from_out, const DLTensor* gout, const DLTensor* src,
                         const DLTensor* a, const DLTensor* b, DLTensor* ga, DLTensor* gb, DLTensor* gbias);

}  // namespace dlfuse_cuda

#endif

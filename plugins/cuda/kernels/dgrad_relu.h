// The input-gradient GEMM of an mlp layer fused with the ReLU gradient of the layer below
// and the partial sums of its bias gradient (dgrad_relu_sm90.cu; built where CUTLASS and
// sm_90 are, DLFUSE_CUDA_CUTLASS).
#ifndef DLFUSE_CUDA_DGRAD_RELU_H_
#define DLFUSE_CUDA_DGRAD_RELU_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace dlfuse_cuda {

// dz [M, K] = (dy [M, N] @ w^T) * (h [M, K] > 0 or NaN); bfloat16, rows of every matrix
// 16-byte aligned. w [K, N] row-major (ldw its row stride) or, with w_col_major, its
// transpose's storage ([N, K] row-major, ldw that stride). With partials, also the column
// sums of dz over blocks of rows, float [dgrad_relu_partial_rows(M),
// dgrad_relu_partial_cols(K)] (the first K columns count).
struct DgradRelu {
  int64_t M = 0, N = 0, K = 0;
  const void* w = nullptr;
  int64_t ldw = 0;
  bool w_col_major = false;
  const void* dy = nullptr;
  int64_t lddy = 0;
  const void* h = nullptr;
  int64_t ldh = 0;
  void* dz = nullptr;
  int64_t lddz = 0;
  float* partials = nullptr;
};

int64_t dgrad_relu_partial_rows(int64_t M);
int64_t dgrad_relu_partial_cols(int64_t K);
// `workspace(bytes)` gives device memory for the call, where CUTLASS needs any.
// cudaErrorNotSupported when CUTLASS cannot run the problem (nothing enqueued).
cudaError_t dgrad_relu(const DgradRelu& p, const std::function<void*(size_t)>& workspace, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif

// The cuBLASLt path of gemm() (gemm_lt.cpp), for gemm.cpp alone.
#ifndef DLFUSE_CUDA_GEMM_LT_H_
#define DLFUSE_CUDA_GEMM_LT_H_

#include "gemm.h"

namespace dlfuse_cuda {

enum class GemmStatus { kOk, kNoAlgo, kEpilogueUnusable };

// kNoAlgo when cuBLASLt has no algorithm for g's layouts (nothing enqueued), kEpilogueUnusable
// when an activation epilogue was asked for and cannot be used (nothing enqueued either).
GemmStatus run_gemm(const Gemm& g, DeviceState& ds, cudaStream_t stream);

// m gathered into a compact temporary (held by tmp) over its own batch shape.
Mat gather(const Mat& m, const std::vector<int64_t>& batch_shape, DType dt, Temp& tmp, DeviceState& ds, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif

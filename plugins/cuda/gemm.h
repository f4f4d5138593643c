// Batched GEMMs on cuBLASLt over strided row-major views, with the BIAS / RELU epilogues.
//
// Row-major views map onto cuBLASLt's column-major layouts without copies: a matrix with
// unit column stride is the column-major transpose with ld = row stride, one with unit row
// stride is column-major with ld = column stride. Batch dims broadcast through batch stride 0;
// batch dims that do not collapse into one stride are looped over on the host (one cuBLASLt
// call per outer index, all on the call's stream). A view no layout can express (a stride-0
// row, say) is gathered into a compact temporary first.
#ifndef DLFUSE_CUDA_GEMM_H_
#define DLFUSE_CUDA_GEMM_H_

#include <cstdint>
#include <vector>

#include "context.h"

namespace dlfuse_cuda {

// One operand matrix (logical R x C, row-major indices) with batch strides aligned to the
// output's batch dims (0 where broadcast).
struct Mat {
  char* base = nullptr;
  int64_t R = 0, C = 0, sr = 0, sc = 0;
  std::vector<int64_t> bs;
};

// t's last two dims as a Mat, batch strides over the output's nb batch dims.
Mat mat_of(const DLTensor* t, int nb);
Mat transposed(Mat m);

// How cuBLASLt can read a matrix: ok, row-major (unit column stride) or column-major, ld.
struct Lay {
  bool ok = false;
  bool row = true;
  int64_t ld = 0;
};
Lay classify(int64_t R, int64_t C, int64_t sr, int64_t sc);

// D = X @ Y (+ bias) (relu) over the batch, D of type `out` (or float), beta * D added when
// beta != 0.
struct Gemm {
  DType in = DType::kF32;
  DType out = DType::kF32;
  bool out_f32 = false;  // D in float regardless of `in`
  bool tf32 = false;
  Mat X, Y, D;
  std::vector<int64_t> batch_shape;
  bool relu = false;
  const char* bias = nullptr;  // BIAS epilogue: a vector along D's cuBLASLt rows
  std::vector<int64_t> bias_bs;
  float beta = 0.f;
};

// Enqueues g on s; when cuBLASLt refuses the layouts, gathers X and Y into compact
// temporaries first (D must be expressible: callers give a compact temporary otherwise).
// Returns false, having enqueued no GEMM (gathers may be enqueued), when g.relu and the
// RELU epilogue cannot be used: no candidate keeps NaN, or the stream is being captured
// before the problem's algorithm was chosen. Throws Error when cuBLASLt has no algorithm.
bool gemm(Gemm g, DeviceState& ds, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif

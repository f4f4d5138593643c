// Batched GEMMs on cuBLASLt over strided row-major views, with the BIAS / RELU / GELU epilogues.
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

// The activation cuBLASLt applies in the epilogue (after the bias): relu, or GELU in its
// tanh form (docs/ops.md's GELU_TANH), optionally writing its input (the pre-activation)
// to `aux` as well.
enum class EpiAct { kNone, kRelu, kGelu };

// D = act(X @ Y (+ bias) + beta * C) over the batch, D of type `out` (or float); C is D
// itself unless given (then of D's type and orientation).
struct Gemm {
  DType in = DType::kF32;
  DType out = DType::kF32;
  bool out_f32 = false;  // D in float regardless of `in`
  bool tf32 = false;
  Mat X, Y, D;
  std::vector<int64_t> batch_shape;
  EpiAct act = EpiAct::kNone;
  const Mat* aux = nullptr;    // kGelu only: the pre-activation, D's orientation, ld % 8 == 0
  const char* bias = nullptr;  // BIAS epilogue: a vector along D's cuBLASLt rows
  std::vector<int64_t> bias_bs;
  const Mat* C = nullptr;  // with beta != 0: the addend, when it is not D
  float beta = 0.f;
};

// True when m can be the GELU epilogue's aux output next to D (same orientation; leading
// dimension and batch strides multiples of 8 elements, as cuBLASLt requires).
bool aux_compatible(const Mat& m, const Mat& D);
// True when m can be C next to D (same orientation).
bool same_orientation(const Mat& m, const Mat& D);

// Enqueues g on s; when cuBLASLt refuses the layouts, gathers X and Y into compact
// temporaries first (D must be expressible: callers give a compact temporary otherwise).
// Returns false, having enqueued no GEMM (gathers may be enqueued), when g.act is set and
// the epilogue cannot be used: cuBLASLt has no kernel with it here, no candidate keeps NaN,
// or the stream is being captured before the problem's algorithm was chosen. Throws Error
// when cuBLASLt has no algorithm at all.
bool gemm(Gemm g, DeviceState& ds, cudaStream_t s);

// Tiny problems (at most 2^18 multiply-adds over the batch, K <= 1024, at most 65535 batch
// instances and 6 batch dims of size > 1) in one own kernel launch, skipping cuBLASLt's
// host cost: the same function, epilogue included, any strides. Returns false, having
// enqueued nothing, for any other problem or when DLFUSE_CUDA_SMALL_GEMM=0. (small_gemm.cu)
bool small_gemm(const Gemm& g, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif

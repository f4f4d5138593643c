// The plugin's own CUDA kernels, as host functions that enqueue on a stream.
// Every launcher throws dlfuse_cuda::Error when the launch is refused.
#ifndef DLFUSE_CUDA_KERNELS_H_
#define DLFUSE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "common.h"

namespace dlfuse_cuda {

// A strided view over an iteration shape of `rank` dims (rank <= kMaxRank). Strides are in
// elements; 0 reads (or, for a reduction target, accumulates into) one element along a dim.
struct View {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
};

// Compact row-major strides for `shape`.
View compact_view(const int64_t* shape, int rank);

// dst[i] = op(src[i]) over dst's iteration shape (src uses the same shape, its own strides,
// 0 for broadcast). op: 0 copy, 1 relu (NaN kept). Same dtype on both sides.
void copy_view(DType dt, const void* src, const View& sv, void* dst, const View& dv, int op, cudaStream_t s);
// dst, compact [rows, C], = rows of C elements `ld` elements apart at src.
void copy_rows(DType dt, const void* src, int64_t ld, void* dst, int64_t rows, int64_t C, cudaStream_t s);
// dst, rows_p rows of ldp elements (16-byte aligned, ldp * element size a multiple of 16),
// = src's rows x cols (element strides so between rows, si within one) in its top-left
// corner and 0 elsewhere.
void pad_rows(DType dt, const void* src, int64_t so, int64_t si, int64_t rows, int64_t cols, void* dst, int64_t rows_p,
              int64_t ldp, cudaStream_t s);
// dst = 0 through dst's view.
void zero_view(DType dt, void* dst, const View& dv, cudaStream_t s);
// relu in place over n compact elements (NaN kept), 16-byte vectors where aligned.
void relu_compact(DType dt, void* p, int64_t n, cudaStream_t s);

// reduce_to: dst[j] = scale * sum of src over every index of `full` that maps to j, where
// src is compact over `full` (rank r) and dst's view is aligned to `full` with stride 0
// along the reduced dims (dst_shape[d] == 1 there). src_f32: src holds float, else dt.
void reduce_to(DType dt, const void* src, bool src_f32, const View& full, void* dst, const View& dst_aligned,
               float scale, cudaStream_t s);

// Column sums of a compact [R, C] matrix (dtype dt) into partial[nchunks, C] floats;
// returns nchunks (<= max_chunks).
int colsum_partials(DType dt, const void* m, int64_t R, int64_t C, float* partial, int max_chunks, cudaStream_t s);
// dst[c * dst_stride] = scale * sum_k partial[k, c]; with total != 0 the C columns are summed
// too into dst[0].
void finish_colsum(DType dt, const float* partial, int nchunks, int64_t C, void* dst, int64_t dst_stride, float scale,
                   bool total, cudaStream_t s);

// One destination of finish_colsums: dst[c * stride] = scale * column sum c.
struct ColsumDst {
  void* p;
  int64_t stride;
  float scale;
};
// finish_colsum into up to three destinations in one pass over the partials.
void finish_colsums(DType dt, const float* partial, int nchunks, int64_t C, const ColsumDst* dst, int n,
                    cudaStream_t s);

// Up to kMaxColsumJobs finish_colsum calls (scale 1) in one launch: a launch costs some
// 4-5 us in a CUDA graph on the H200, about what one such call's work takes.
struct ColsumJob {
  const float* partial;
  int nchunks;
  int64_t C;
  void* dst;
  int64_t stride;
};
constexpr int kMaxColsumJobs = 8;
void finish_colsum_jobs(DType dt, const ColsumJob* jobs, int n, cudaStream_t s);

// ---- mlp_backward ----------------------------------------------------------------------

// dz [M, K] (compact) = act'(h) * G, the activation's derivative taken from its output h
// [M, K] (IDENTITY, RELU, SIGMOID, TANH; h may be NULL for IDENTITY), where G is g [M, K]
// (row pitch ldg) or, with w, the input gradient of a 1-wide layer above: g [M] (stride ldg)
// times w [K] (stride w_stride). With partial, the column sums of dz per chunk of rows,
// float [act_grad_rows_chunks(), K].
struct ActGradRows {
  int64_t M = 0, K = 0;
  const void* g = nullptr;
  int64_t ldg = 0;
  const void* w = nullptr;
  int64_t w_stride = 1;
  const void* h = nullptr;
  int64_t ldh = 0;
  void* dz = nullptr;
  float* partial = nullptr;
  int act = 0;
};
// The chunks of rows whose column sums land in p.partial; p's pointers and strides set (the
// cut depends on their alignment).
int act_grad_rows_chunks(DType dt, const ActGradRows& p);
void act_grad_rows(DType dt, const ActGradRows& p, cudaStream_t s);

// ---- add_mul_activation ---------------------------------------------------------------

// How a fast-path operand is read over the output's [R, C] (compact) layout. y and b may be
// kAbsent (a pass over one operand: the matmul epilogues' activation and gradient).
enum OperandMode : int { kFull = 0, kRow = 1, kScalar = 2, kAbsent = 3 };

struct AmFast {
  int64_t R = 0, C = 0;  // out is compact [R, C]
  const void* x = nullptr;
  int xm = kFull;
  const void* y = nullptr;
  int ym = kFull;
  const void* b = nullptr;
  int bm = kFull;
  const void* g = nullptr;
  int gm = kFull;       // backward only: grad_out
  void* out = nullptr;  // forward output (compact [R, C])
  // backward outputs: mode kFull (compact [R, C], written), kRow / kScalar (reduced:
  // partial column sums, finished into dst with dst_stride), kAbsent.
  void* gx = nullptr;
  int gxm = kAbsent;
  int64_t gx_stride = 1;
  void* gy = nullptr;
  int gym = kAbsent;
  int64_t gy_stride = 1;
  void* gb = nullptr;
  int gbm = kAbsent;
  int64_t gb_stride = 1;
  int act = 0;
  float mult = 1.f;
  // Backward only: x holds the forward's out (y and b kAbsent) and the gradient is taken
  // from it; IDENTITY, RELU, SIGMOID, TANH.
  bool from_out = false;
  bool gx_cached = false;  // gx is read again right away (a matmul's dZ): normal, not streaming, stores
};

// True when a backward sums into some gradient (row or scalar mode): it needs the workspace.
__host__ __device__ inline bool am_reduces(const AmFast& p) {
  return p.gxm == kRow || p.gxm == kScalar || p.gym == kRow || p.gym == kScalar || p.gbm == kRow || p.gbm == kScalar;
}

// True if every pointer and C allow 16-byte vectors.
bool am_vectorizable(DType dt, const AmFast& p);
void am_forward_fast(DType dt, const AmFast& p, cudaStream_t s);
// Needs a float workspace of am_backward_workspace(p) bytes for the reductions.
size_t am_backward_workspace(DType dt, const AmFast& p);
// How many counters a block that is zero whenever its stream is idle holds (zeroed_counters,
// context.h): the flat form's atomics count there, and reset what they count, instead of in
// the workspace after a memset.
constexpr size_t kZeroedCounters = 16384;
// True when am_backward_fast would use such a block.
bool am_backward_counts(DType dt, const AmFast& p);
// zeroed: null, or kZeroedCounters zero counters that only this stream's calls use.
void am_backward_fast(DType dt, const AmFast& p, void* workspace, unsigned* zeroed, cudaStream_t s);

// Generic strided paths over the output's shape (views aligned to it); y and b may be NULL
// (absent).
void am_forward_generic(DType dt, const void* x, const View& xv, const void* y, const View& yv, const void* b,
                        const View& bv, void* out, const View& ov, int act, float mult, cudaStream_t s);
// d_pre, compact over the output's shape, in float (dpre_f32) or dt: grad_out times act' of
// (x + b) + mult * y, or of x read as the forward's out (from_out).
void am_dpre_generic(DType dt, const void* g, const View& gv, const void* x, const View& xv, const void* y,
                     const View& yv, const void* b, const View& bv, void* dpre, bool dpre_f32, int act, bool from_out,
                     float mult, cudaStream_t s);

}  // namespace dlfuse_cuda

#endif

// add_mul_activation's fast-path backward, and the choice between its three forms:
// the small form (one launch, sums finished in the block), the flat form for large x-only
// problems (add_mul_backward_flat.cu), and the one-wave pass with column partials finished
// by reduce.cu's kernels for everything else.
#include "add_mul.cuh"
#include "launch.cuh"

namespace dlfuse_cuda {
namespace {

// FORM: kFormXYB, the pre-activation from x, y, b; kFormPre, x alone is it; kFormOut, x
// alone is the forward's out. The one-operand forms hold no y and b registers, which lets
// more blocks be resident (their rows in flight are what a bandwidth-bound pass needs).
template <class T, int V, int ACT, int FORM>
__global__ void __launch_bounds__(kThreads)
    am_bwd_k(AmFast p, int64_t Cv_, int64_t /*rows_per_chunk*/, float* partial) {
  const int64_t cv = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (cv >= Cv_) return;
  const int64_t step = gridDim.y;  // interleaved rows, as in am_fwd_k
  constexpr bool XONLY = FORM != kFormXYB;
  Pack<T, V> hx, hy, hb, hg;
  load_hoisted(hx, p.x, p.xm, cv);
  if constexpr (!XONLY) {
    load_hoisted(hy, p.y, p.ym, cv);
    load_hoisted(hb, p.b, p.bm, cv);
  }
  load_hoisted(hg, p.g, p.gm, cv);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  const T* b = static_cast<const T*>(p.b);
  const T* g = static_cast<const T*>(p.g);
  T* gx = static_cast<T*>(p.gx);
  T* gy = static_cast<T*>(p.gy);
  T* gb = static_cast<T*>(p.gb);
  const bool reduce = am_reduces(p);
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  // The out form keeps the unroll of the other: twice the rows in flight measured slower on
  // the H100 (float32 16384x8192 relu from out: 0.777 -> 0.851 ms; bfloat16 level).
  constexpr int U = V >= 8 ? 1 : kUnroll;
  for (int64_t r = blockIdx.y; r < p.R; r += U * step) {
    Pack<T, V> xs[U], ys[U], bs[U], gs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        if (p.xm == kFull)
          xs[u].load(x + off);
        else
          xs[u] = hx;
        if constexpr (!XONLY) {
          if (p.ym == kFull)
            ys[u].load(y + off);
          else
            ys[u] = hy;
          if (p.bm == kFull)
            bs[u].load(b + off);
          else
            bs[u] = hb;
        }
        if (p.gm == kFull)
          gs[u].load(g + off);
        else
          gs[u] = hg;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        Pack<T, V> d, dy;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float v =
              XONLY ? xs[u].f[j] : pre_of(xs[u].f[j], bs[u].f[j], p.bm != kAbsent, ys[u].f[j], p.ym != kAbsent, p.mult);
          d.f[j] = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, v, gs[u].f[j]);
          dy.f[j] = p.mult * d.f[j];
          sum[j] += d.f[j];
        }
        if (p.gxm == kFull) d.store(gx + off, p.gx_cached);
        if (p.gym == kFull) dy.store(gy + off);
        if (p.gbm == kFull) d.store(gb + off);
      }
    }
  }
  if (reduce) {
#pragma unroll
    for (int j = 0; j < V; ++j) partial[blockIdx.y * p.C + cv * V + j] = sum[j];
  }
}

// The backward's small form (am_bwd_small_k, use_small): one launch, the column sums
// finished inside the block, so no partials and no finish kernel: one launch less per call,
// which counts where a training step of small layers is bound by the host (the DLRM
// example's compiled step at batch 256 on the H100: 0.997 of PyTorch's, 1.027 without it).
// A block is kSmallLanes columns x kSmallLanes row lanes; lane l takes rows l, l + 32, ...
// and the lanes' sums are added in lane order, so the sums are deterministic.
constexpr int kSmallLanes = 32;

template <class T>
__device__ __forceinline__ float operand_at(const void* ptr, int mode, int64_t off, int64_t c) {
  const T* t = static_cast<const T*>(ptr);
  return mode == kFull ? ldf(t + off) : mode == kRow ? ldf(t + c) : mode == kScalar ? ldf(t) : 0.f;
}

template <class T, int ACT, int FORM>
__global__ void __launch_bounds__(kSmallLanes* kSmallLanes) am_bwd_small_k(AmFast p) {
  __shared__ float lane[kSmallLanes][kSmallLanes + 1];
  const int64_t c = blockIdx.x * int64_t(kSmallLanes) + threadIdx.x;
  const bool active = c < p.C;
  T* gx = static_cast<T*>(p.gx);
  T* gy = static_cast<T*>(p.gy);
  T* gb = static_cast<T*>(p.gb);
  float sum = 0.f;
  for (int64_t r = threadIdx.y; active && r < p.R; r += kSmallLanes) {
    const int64_t off = r * p.C + c;
    const float x = operand_at<T>(p.x, p.xm, off, c);
    const float v = FORM == kFormXYB ? pre_of(x, operand_at<T>(p.b, p.bm, off, c), p.bm != kAbsent,
                                              operand_at<T>(p.y, p.ym, off, c), p.ym != kAbsent, p.mult)
                                     : x;
    const float d = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, v, operand_at<T>(p.g, p.gm, off, c));
    sum += d;
    if (p.gxm == kFull) gx[off] = Cv<T>::st(d);
    if (p.gym == kFull) gy[off] = Cv<T>::st(p.mult * d);
    if (p.gbm == kFull) gb[off] = Cv<T>::st(d);
  }
  lane[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  float s = 0.f;
#pragma unroll 8
  for (int j = 0; j < kSmallLanes; ++j) s += lane[j][threadIdx.x];
  store_row_sums<T>(p, c, s);
}

// The backward kernel's compile-time activation and form: from out only for the four
// activations that allow it.
template <int F>
struct FormC {
  static constexpr int value = F;
};
template <class F>
void by_bwd_kernel(const AmFast& p, F&& f) {
  if (p.from_out)
    by_act_out(p.act, [&](auto a) { f(a, FormC<kFormOut>{}); });
  else if (p.ym == kAbsent && p.bm == kAbsent)
    by_act(p.act, [&](auto a) { f(a, FormC<kFormPre>{}); });
  else
    by_act(p.act, [&](auto a) { f(a, FormC<kFormXYB>{}); });
}

template <class T, int V, int ACT, int FORM>
Geometry bwd_geometry(const AmFast& p) {
  return geometry(p.R, p.C, V, blocks_per_sm(am_bwd_k<T, V, ACT, FORM>, p.C / V));
}

// The small form: at most 2^18 elements and 64 rows a lane, sums into rows only (a scalar
// gradient sums over the block's columns too). DLFUSE_CUDA_SMALL_BACKWARD=0 turns it off, so
// that the test suite's small cases also run the one-wave pass (docs/cuda.md, Switches).
bool use_small(const AmFast& p) {
  static const bool on = env_enabled("DLFUSE_CUDA_SMALL_BACKWARD");
  return on && p.R * p.C <= (int64_t(1) << 18) && p.R <= 64 * kSmallLanes && p.gxm != kScalar && p.gym != kScalar &&
         p.gbm != kScalar;
}

void am_backward_small(DType dt, const AmFast& p, cudaStream_t s) {
  const unsigned blocks = unsigned((p.C + kSmallLanes - 1) / kSmallLanes);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      am_bwd_small_k<T, ACT, FO><<<blocks, dim3(kSmallLanes, kSmallLanes), 0, s>>>(p);
    });
  });
  DLF_LAUNCHED("add_mul_activation backward kernel (small form)");
}

// The scalar-mode gradients from `nchunks` rows of column sums.
void finish_scalars(DType dt, const AmFast& p, const float* partial, int nchunks, cudaStream_t s) {
  if (p.gxm == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gx, 0, 1.f, true, s);
  if (p.gym == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gy, 0, p.mult, true, s);
  if (p.gbm == kScalar) finish_colsum(dt, partial, nchunks, p.C, p.gb, 0, 1.f, true, s);
}

}  // namespace

size_t am_backward_workspace(DType dt, const AmFast& p) {
  if (use_small(p)) return 0;
  if (use_flat(dt, p)) return flat_workspace(dt, p);
  const bool vec = am_vectorizable(dt, p);
  size_t chunks = 1;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      chunks = vec ? bwd_geometry<T, V, ACT, FO>(p).gy : bwd_geometry<T, 1, ACT, FO>(p).gy;
    });
  });
  return chunks * size_t(p.C) * sizeof(float);
}

bool am_backward_counts(DType dt, const AmFast& p) {
  return p.R * p.C > 0 && am_reduces(p) && !use_small(p) && use_flat(dt, p);
}

void am_backward_fast(DType dt, const AmFast& p, void* workspace, unsigned* zeroed, cudaStream_t s) {
  if (p.R * p.C == 0) return;
  if (use_small(p)) return am_backward_small(dt, p, s);
  const bool reduce = am_reduces(p);
  if (use_flat(dt, p)) {
    const float* total = am_backward_flat(dt, p, reduce, workspace, zeroed, s);
    if (total) finish_scalars(dt, p, total, 1, s);
    return;
  }
  const bool vec = am_vectorizable(dt, p);
  float* partial = static_cast<float*>(workspace);
  int nchunks = 0;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_bwd_kernel(p, [&](auto a, auto fo) {
      constexpr int ACT = decltype(a)::value;
      constexpr int FO = decltype(fo)::value;
      if (vec) {
        const Geometry g = bwd_geometry<T, V, ACT, FO>(p);
        nchunks = int(g.gy);
        am_bwd_k<T, V, ACT, FO><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk, partial);
      } else {
        const Geometry g = bwd_geometry<T, 1, ACT, FO>(p);
        nchunks = int(g.gy);
        am_bwd_k<T, 1, ACT, FO><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk, partial);
      }
    });
  });
  DLF_LAUNCHED("add_mul_activation backward kernel");
  if (!reduce) return;
  // Row gradients share one pass over the partials; a scalar one sums them all.
  ColsumDst rows[3];
  int nrows = 0;
  if (p.gxm == kRow) rows[nrows++] = ColsumDst{p.gx, p.gx_stride, 1.f};
  if (p.gym == kRow) rows[nrows++] = ColsumDst{p.gy, p.gy_stride, p.mult};
  if (p.gbm == kRow) rows[nrows++] = ColsumDst{p.gb, p.gb_stride, 1.f};
  if (nrows > 0) finish_colsums(dt, partial, nchunks, p.C, rows, nrows, s);
  finish_scalars(dt, p, partial, nchunks, s);
}

}  // namespace dlfuse_cuda

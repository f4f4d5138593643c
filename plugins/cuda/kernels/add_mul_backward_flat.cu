// add_mul_activation's backward, flat form: large problems that read one array besides
// grad_out (from out, or the matmul backward's dZ pass from pre), in one launch whose
// column sums climb a tree of partial rows inside the kernel.
#include <cstdint>

#include "add_mul.cuh"
#include "launch.cuh"

namespace dlfuse_cuda {
namespace {

// The backward's flat form for large x-only problems (out or pre form, 16-byte vectors):
// a 1-D grid of short blocks, flat_rows<T>() rows x 256 column vectors each, column chunk
// fastest, so the GPU sweeps memory in address order and a finished block frees its slot at
// once. A single wave of long-lived blocks (am_bwd_k) stops at ~93% of the copy bandwidth on
// the H100, this at ~95.6%. The column sums stay deterministic and need no second kernel:
// each block stores its sums to a row of level 0; per column chunk, the last block (counted
// by an atomic) of each node of kFlatGroup rows adds the node's rows in order into a row of
// the next level, and so on up a tree, until the last block of the root writes the gradients. Level 0's consumed lines
// are dropped from L2 (never read again, so never written back). Each counter is reset by the block that counts last,
// so the counters are zero again when the kernel ends: a block of counters kept zero per stream (zeroed_counters) needs
// no memset before the next call.
constexpr int kFlatGroup = 16;
constexpr int kFlatLevels = 8;  // 16^8 block rows: more than a grid holds
template <class T>
constexpr int flat_rows() {
  return 32 / (16 / int(sizeof(T)));
}  // 8 for float, 4 for 16-bit

struct FlatWs {
  float* rows[kFlatLevels] = {};    // level l: count[l] rows of C sums; level 0 one per block row
  unsigned* cnt[kFlatLevels] = {};  // level l: one per (node of kFlatGroup rows, column chunk), zero at launch
  int64_t count[kFlatLevels] = {};
  float* total = nullptr;  // [C]: the root's column sums, for a scalar gradient's finish
  int64_t nrb = 0, chunks = 0;
  int levels = 0;  // the root is level levels - 1 (count <= kFlatGroup)
};

// The column sums `s` (V columns from cv * V) into the row-mode gradients, and into w.total
// when a gradient is a scalar.
template <class T, int V>
__device__ void flat_write_sums(const AmFast& p, const FlatWs& w, int64_t cv, const float* s) {
  for (int j = 0; j < V; ++j) {
    store_row_sums<T>(p, cv * V + j, s[j]);
    if (w.total) w.total[cv * V + j] = s[j];
  }
}

// Every thread of the block: stores its V sums `s` as row `row` of level l (read by another
// block, so through L2 and fenced), then thread 0 counts the block in the row's node: `last`
// (shared; read after a barrier) is true for the block that counts last, which zeroes the
// counter for the next call.
template <int V>
__device__ void flat_arrive(const FlatWs& w, int64_t C, int l, int64_t row, int64_t cc, int64_t cv, bool active,
                            const float* s, bool& last) {
  if (active) {
    float* dst = w.rows[l] + row * C + cv * V;
#pragma unroll
    for (int j = 0; j < V; j += 4)
      __stcg(reinterpret_cast<float4*>(dst + j), make_float4(s[j], s[j + 1], s[j + 2], s[j + 3]));
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int64_t node = row / kFlatGroup;
  unsigned* c = w.cnt[l] + node * w.chunks + cc;
  last = atomicAdd(c, 1u) == unsigned(min(int64_t(kFlatGroup), w.count[l] - node * kFlatGroup) - 1);
  if (last) atomicExch(c, 0u);
}

// Called by every thread of the block that counted last in its node of level 0 (block row
// idx): sums the node's rows in order, and climbs while it is the last of the next node.
template <class T, int V>
__device__ void flat_climb(const AmFast& p, const FlatWs& w, int64_t cc, int64_t cv, bool active, int64_t idx,
                           bool& last) {
  for (int l = 0;; ++l) {
    const int64_t node = idx / kFlatGroup, first = node * kFlatGroup;
    const int64_t members = min(int64_t(kFlatGroup), w.count[l] - first);
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.f;
    // kBatch rows' loads in flight at once, then added in row order: the climb is the
    // kernel's tail, and one load at a time made it a chain of up to 40 L2 round trips.
    // Registers (ptxas, sm_90): float's kernels take 96-113 (2 blocks of 256 per
    // multiprocessor), the 16-bit types' 64-101 (bfloat16 relu 80: 3 blocks); 4 rows for
    // 16-bit types took bfloat16 relu to 98 (2 blocks). The batch sizes were timed on
    // float32 and bfloat16 relu only.
    constexpr int kBatch = V == 4 ? 8 : 2;
    if (active)
#pragma unroll
      for (int m0 = 0; m0 < kFlatGroup; m0 += kBatch) {
        float4 v[kBatch][V / 4];
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (m0 + u < members)
#pragma unroll
            for (int j = 0; j < V; j += 4)
              v[u][j / 4] = __ldcg(reinterpret_cast<const float4*>(w.rows[l] + (first + m0 + u) * p.C + cv * V + j));
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
          if (m0 + u < members)
#pragma unroll
            for (int j = 0; j < V; j += 4) {
              acc[j] += v[u][j / 4].x;
              acc[j + 1] += v[u][j / 4].y;
              acc[j + 2] += v[u][j / 4].z;
              acc[j + 3] += v[u][j / 4].w;
            }
      }
#if __CUDA_ARCH__ >= 800  // discard.global.L2 is sm_80+; older GPUs write the lines back
    if (l == 0) {
      __syncthreads();  // every thread has read its rows
      // Whole 128-byte lines only (row bases are line-aligned when C % 32 == 0).
      constexpr int kPerLine = 32 / V;
      if (active && p.C % 32 == 0 && cv % kPerLine == 0 && (cv + kPerLine) * V <= p.C)
        for (int64_t m = 0; m < members; ++m)
          asm volatile("discard.global.L2 [%0], 128;" ::"l"(w.rows[0] + (first + m) * p.C + cv * V) : "memory");
    }
#endif
    if (l == w.levels - 1) {
      if (active) flat_write_sums<T, V>(p, w, cv, acc);
      return;
    }
    flat_arrive<V>(w, p.C, l + 1, node, cc, cv, active, acc, last);
    __syncthreads();
    if (!last) return;
    __threadfence();
    idx = node;
  }
}

template <class T, int V, int ACT, int FORM>
__global__ void __launch_bounds__(kThreads) am_bwd_flat_k(AmFast p, FlatWs w) {
  static_assert(FORM != kFormXYB, "the flat form holds x (and grad) rows only");
  constexpr int ROWS = flat_rows<T>();
  const int64_t Cv = p.C / V;
  const int64_t cc = int64_t(blockIdx.x) % w.chunks, rb = int64_t(blockIdx.x) / w.chunks;
  const int64_t cv = cc * kThreads + threadIdx.x;
  const bool active = cv < Cv;
  const int64_t r0 = rb * ROWS;
  const bool reduce = am_reduces(p);
  const T* x = static_cast<const T*>(p.x);
  const T* g = static_cast<const T*>(p.g);
  Pack<T, V> xs[ROWS], gs[ROWS];
  if (active) {  // x and grad_out full (use_flat): every load issued before any is used
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
        const int64_t off = (r0 + u) * p.C + cv * V;
        xs[u].load(x + off);
        gs[u].load(g + off);
      }
  }
  float sum[V];
#pragma unroll
  for (int j = 0; j < V; ++j) sum[j] = 0.f;
  Pack<T, V> ds[ROWS];
  if (active) {
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          ds[u].f[j] = act_grad_of<FORM == kFormOut, sizeof(T) == 2>(ACT, xs[u].f[j], gs[u].f[j]);
          sum[j] += ds[u].f[j];
        }
      }
  }
  // The block's sums and its count before the big stores: the fence then waits for this
  // store only, and the atomic's round trip overlaps the stores.
  __shared__ bool last;
  if (reduce) flat_arrive<V>(w, p.C, 0, rb, cc, cv, active, sum, last);
  if (active) {
    T* gx = static_cast<T*>(p.gx);
    T* gy = static_cast<T*>(p.gy);
    T* gb = static_cast<T*>(p.gb);
#pragma unroll
    for (int u = 0; u < ROWS; ++u)
      if (r0 + u < p.R) {
        const int64_t off = (r0 + u) * p.C + cv * V;
        Pack<T, V> dy;
#pragma unroll
        for (int j = 0; j < V; ++j) dy.f[j] = p.mult * ds[u].f[j];
        if (p.gxm == kFull) ds[u].store(gx + off, p.gx_cached);
        if (p.gym == kFull) dy.store(gy + off);
        if (p.gbm == kFull) ds[u].store(gb + off);
      }
  }
  if (!reduce) return;
  __syncthreads();
  if (!last) return;
  __threadfence();
  flat_climb<T, V>(p, w, cc, cv, active, rb, last);
}

// The flat form serves large x-only problems with 16-byte vectors (measured there; the
// three-operand form keeps am_bwd_k: its rows hold twice the registers). Its counters and
// group bookkeeping cost more than its better bandwidth gains on small problems: at 2^22
// elements (4096x1024) the one-wave kernel was 8-24% faster, at 2^27 the flat form 3.7%
// (H100, with a counter memset per call, which the flat form no longer needs); between
// them it is not measured.
constexpr int64_t kFlatMinElems = int64_t(1) << 26;

// The flat form's tree and, with `base`, its rows (then its counters, when `zeroed` is
// null) in the workspace at `base`; sizes only without.
template <class T>
FlatWs flat_layout(const AmFast& p, void* base, unsigned* zeroed, size_t* bytes, size_t* counters) {
  FlatWs w;
  w.chunks = (p.C / (16 / int64_t(sizeof(T))) + kThreads - 1) / kThreads;
  w.nrb = (p.R + flat_rows<T>() - 1) / flat_rows<T>();
  size_t nrows = 0, ncnt = 0;
  for (int64_t n = w.nrb; w.levels < kFlatLevels; n = (n + kFlatGroup - 1) / kFlatGroup) {
    w.count[w.levels++] = n;
    nrows += size_t(n);
    ncnt += size_t((n + kFlatGroup - 1) / kFlatGroup * w.chunks);
    if (n <= kFlatGroup) break;
  }
  const bool scalar = p.gxm == kScalar || p.gym == kScalar || p.gbm == kScalar;
  if (scalar) ++nrows;  // the total row
  if (counters) *counters = ncnt;
  if (bytes) *bytes = nrows * size_t(p.C) * sizeof(float) + ncnt * sizeof(unsigned);
  if (!base) return w;
  char* c = static_cast<char*>(base);
  for (int l = 0; l < w.levels; ++l) {
    w.rows[l] = reinterpret_cast<float*>(c);
    c += size_t(w.count[l]) * size_t(p.C) * sizeof(float);
  }
  if (scalar) {
    w.total = reinterpret_cast<float*>(c);
    c += size_t(p.C) * sizeof(float);
  }
  unsigned* cnt = zeroed ? zeroed : reinterpret_cast<unsigned*>(c);
  for (int l = 0; l < w.levels; ++l) {
    w.cnt[l] = cnt;
    cnt += (w.count[l] + kFlatGroup - 1) / kFlatGroup * w.chunks;
  }
  return w;
}

}  // namespace

bool use_flat(DType dt, const AmFast& p) {
  if (!am_vectorizable(dt, p) || p.R * p.C < kFlatMinElems || p.xm != kFull || p.gm != kFull) return false;
  if (!p.from_out && !(p.ym == kAbsent && p.bm == kAbsent)) return false;
  bool fits = false;  // the 1-D grid's blocks, and a tree of at most kFlatLevels
  by_dtype(dt, [&](auto t) {
    const FlatWs w = flat_layout<decltype(t)>(p, nullptr, nullptr, nullptr, nullptr);
    fits = w.chunks * w.nrb <= INT32_MAX && w.count[w.levels - 1] <= kFlatGroup;
  });
  return fits;
}

size_t flat_workspace(DType dt, const AmFast& p) {
  size_t n = 0;
  by_dtype(dt, [&](auto t) { flat_layout<decltype(t)>(p, nullptr, nullptr, &n, nullptr); });
  return n;
}

float* am_backward_flat(DType dt, const AmFast& p, bool reduce, void* workspace, unsigned* zeroed, cudaStream_t s) {
  float* total = nullptr;
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    size_t ncnt = 0;
    flat_layout<T>(p, nullptr, nullptr, nullptr, &ncnt);
    if (ncnt > kZeroedCounters) zeroed = nullptr;
    const FlatWs w = flat_layout<T>(p, reduce ? workspace : nullptr, zeroed, nullptr, nullptr);
    if (reduce && !zeroed) DLF_CUDA(cudaMemsetAsync(w.cnt[0], 0, ncnt * sizeof(unsigned), s));
    const unsigned blocks = unsigned(w.chunks * w.nrb);
    if (p.from_out)
      by_act_out(p.act, [&](auto a) {
        constexpr int ACT = decltype(a)::value;
        am_bwd_flat_k<T, V, ACT, kFormOut><<<blocks, kThreads, 0, s>>>(p, w);
      });
    else
      by_act(p.act, [&](auto a) {
        constexpr int ACT = decltype(a)::value;
        am_bwd_flat_k<T, V, ACT, kFormPre><<<blocks, kThreads, 0, s>>>(p, w);
      });
    total = w.total;
  });
  DLF_LAUNCHED("add_mul_activation backward kernel (flat form)");
  return total;
}

}  // namespace dlfuse_cuda

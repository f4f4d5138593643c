// add_mul_activation's fast-path forward: out = act((x + b) + mult * y) over a compact
// [R, C] output in one pass, each operand full, a row vector or a scalar.
#include "add_mul.cuh"
#include "launch.cuh"

namespace dlfuse_cuda {
namespace {

template <class T, int V, int ACT>
__global__ void __launch_bounds__(kThreads) am_fwd_k(AmFast p, int64_t Cv_, int64_t /*rows_per_chunk*/) {
  const int64_t cv = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (cv >= Cv_) return;
  // Rows interleave over blockIdx.y: at any moment the grid works on a band of consecutive
  // whole rows, which keeps DRAM accesses local (chunked row ranges measured 5% slower).
  const int64_t step = gridDim.y;
  Pack<T, V> hx, hy, hb;
  load_hoisted(hx, p.x, p.xm, cv);
  load_hoisted(hy, p.y, p.ym, cv);
  load_hoisted(hb, p.b, p.bm, cv);
  const T* x = static_cast<const T*>(p.x);
  const T* y = static_cast<const T*>(p.y);
  const T* b = static_cast<const T*>(p.b);
  T* out = static_cast<T*>(p.out);
  constexpr int U = V >= 8 ? 1 : kUnroll;  // 16-bit data: 8 elements a vector already
  for (int64_t r = blockIdx.y; r < p.R; r += U * step) {
    Pack<T, V> xs[U], ys[U], bs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        const int64_t off = (r + u * step) * p.C + cv * V;
        if (p.xm == kFull)
          xs[u].load(x + off);
        else
          xs[u] = hx;
        if (p.ym == kFull)
          ys[u].load(y + off);
        else
          ys[u] = hy;
        if (p.bm == kFull)
          bs[u].load(b + off);
        else
          bs[u] = hb;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (r + u * step < p.R) {
        Pack<T, V> o;
#pragma unroll
        for (int j = 0; j < V; ++j)
          o.f[j] = act_fwd<sizeof(T) == 2>(
              ACT, pre_of(xs[u].f[j], bs[u].f[j], p.bm != kAbsent, ys[u].f[j], p.ym != kAbsent, p.mult));
        o.store(out + (r + u * step) * p.C + cv * V);
      }
    }
  }
}

}  // namespace

bool am_vectorizable(DType dt, const AmFast& p) {
  const int V = 16 / dsize(dt);
  if (p.C % V != 0) return false;
  auto ok = [](const void* ptr, int mode) { return mode == kScalar || mode == kAbsent || !ptr || aligned16(ptr); };
  return ok(p.x, p.xm) && ok(p.y, p.ym) && ok(p.b, p.bm) && ok(p.g, p.gm) && ok(p.out, kFull) &&
         ok(p.gx, p.gxm == kFull ? kFull : kAbsent) && ok(p.gy, p.gym == kFull ? kFull : kAbsent) &&
         ok(p.gb, p.gbm == kFull ? kFull : kAbsent);
}

void am_forward_fast(DType dt, const AmFast& p, cudaStream_t s) {
  if (p.R * p.C == 0) return;
  const bool vec = am_vectorizable(dt, p);
  by_dtype(dt, [&](auto t) {
    using T = decltype(t);
    constexpr int V = 16 / sizeof(T);
    by_act(p.act, [&](auto a) {
      constexpr int ACT = decltype(a)::value;
      if (vec) {
        const Geometry g = geometry(p.R, p.C, V, blocks_per_sm(am_fwd_k<T, V, ACT>, p.C / V));
        am_fwd_k<T, V, ACT><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk);
      } else {
        const Geometry g = geometry(p.R, p.C, 1, blocks_per_sm(am_fwd_k<T, 1, ACT>, p.C));
        am_fwd_k<T, 1, ACT><<<dim3(g.gx, g.gy), g.bx, 0, s>>>(p, g.Cv, g.rows_per_chunk);
      }
    });
  });
  DLF_LAUNCHED("add_mul_activation forward kernel");
}

}  // namespace dlfuse_cuda

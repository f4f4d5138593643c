/* C = epilogue(sum_r A_r @ B_r): the one GEMM of the plugin.
 *
 * Operands are strided views (any row/column stride, so transposed operands are just
 * swapped strides): A(m, k) = A[offA + m*sam + k*sak], B(k, n) = B[offB + k*sbk + n*sbn],
 * C(m, n) = C[offC + m*scm + n*scn]. The epilogue adds bias(m, n) = bias[offBias + m*sbm +
 * n*sbn2] when flags & 1 and applies relu (NaN passes) when flags & 2, then rounds once.
 * flags & 4 / 8: every A / B row the kernel loads starts 16-byte aligned (see LD4G).
 *
 * Batches: group z of the grid is one C matrix. Without a table (NULL) there is one batch
 * and R = 1. With a table, row z is [offC, offBias, (offA, offB) x R] (added to the base
 * offsets): the R products are summed into one C, which is how the backward reduces a
 * broadcast operand's gradient over batch dims without atomics or a second pass.
 */
#define GEMM_ARGS                                                                       \
  __global const T *A, long offA, long sam, long sak, __global const T *B, long offB,   \
      long sbk, long sbn, __global T *C, long offC, long scm, long scn,                 \
      __global const T *bias, long offBias, long sbm, long sbn2, int flags, int M, int N, \
      int K, int R, __global const long *table

#define GEMM_BATCH_SETUP                                            \
  const long bz = get_group_id(2);                                  \
  __global const long* trow = table ? table + bz * (2 + 2 * (long)R) : 0; \
  if (trow) {                                                       \
    offC += trow[0];                                                \
    offBias += trow[1];                                             \
  }

inline float gemm_epilogue(float v, int m, int n, __global const T* bias, long offBias, long sbm,
                           long sbn2, int flags) {
  if (flags & 1) v += LD(bias, offBias + m * sbm + n * sbn2);
  if (flags & 2) v = relu_nan(v);
  return v;
}

#if !DLF_CPU
/* GPU: 128x128 tile per work-group of 16x16, each work-item an 8x8 register block
 * (rows ty*4+{0..3} and 64+ty*4+{0..3}, columns likewise), k in steps of GEMM_BK (16) through
 * double-buffered local memory: the next tile's global loads are in flight while the
 * current one is multiplied, and one barrier per step suffices. GEMM_BK (8 or 16) can be
 * set through DLFUSE_OPENCL_BUILD_OPTIONS for tuning. */
#define BM 128
#define BN 128
#ifndef GEMM_BK
#define GEMM_BK 16
#endif
#define BK GEMM_BK
#define APAD 4
#define QA (BK / 8) /* float4 groups of A (and of B) each work-item loads per step */
/* 4 floats from global memory; flags 4 (A) / 8 (B) promise 16-byte alignment so NVIDIA
 * emits one 128-bit load (vload4 only promises 4 bytes). */
#if DLF_HALF
#define LD4G(p, i, al) vload_half4(0, (p) + (i))
#else
#define LD4G(p, i, al) ((al) ? *(__global const float4*)((p) + (i)) : vload4(0, (p) + (i)))
#endif

__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void gemm(GEMM_ARGS) {
  GEMM_BATCH_SETUP
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int tid = ty * 16 + tx;
  const int n0 = get_group_id(0) * BN, m0 = get_group_id(1) * BM;
  __local float4 As[2][BK][(BM + APAD) / 4];
  __local float4 Bs[2][BK][(BN + APAD) / 4];
  float acc[8][8];
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int ktiles = (K + BK - 1) / BK;
  const int total = R * ktiles;
  const bool a_rows_in = m0 + BM <= M, b_cols_in = n0 + BN <= N;
  const bool a_al = (flags & 4) != 0, b_al = (flags & 8) != 0;
  float ra[QA][4], rb[QA][4];

  /* Group q of A: row (tid + 256 q) / (BK/4), 4 consecutive k from ((tid + 256 q) % (BK/4)) * 4.
   * Group q of B: k row (tid + 256 q) / 32, 4 consecutive n from ((tid + 256 q) % 32) * 4. */
#define GEMM_LOAD(it)                                                                     \
  {                                                                                       \
    const int r_ = (it) / ktiles, k_ = ((it) - r_ * ktiles) * BK;                         \
    const long pa = offA + (trow ? trow[2 + 2 * r_] : 0);                                 \
    const long pb = offB + (trow ? trow[3 + 2 * r_] : 0);                                 \
    for (int q = 0; q < QA; ++q) {                                                        \
      const int lin = tid + 256 * q;                                                      \
      const int gm = m0 + lin / (BK / 4), gk = k_ + (lin % (BK / 4)) * 4;                 \
      if (a_rows_in && gk + 4 <= K && sak == 1) {                                         \
        const float4 v = LD4G(A, pa + gm * sam + gk, a_al);                                      \
        ra[q][0] = v.s0; ra[q][1] = v.s1; ra[q][2] = v.s2; ra[q][3] = v.s3;               \
      } else {                                                                            \
        for (int j = 0; j < 4; ++j)                                                       \
          ra[q][j] = (gm < M && gk + j < K) ? LD(A, pa + gm * sam + (gk + j) * sak) : 0.0f; \
      }                                                                                   \
      const int gkb = k_ + lin / 32, gn = n0 + (lin % 32) * 4;                            \
      if (b_cols_in && gkb < K && sbn == 1) {                                             \
        const float4 v = LD4G(B, pb + gkb * sbk + gn, b_al);                                     \
        rb[q][0] = v.s0; rb[q][1] = v.s1; rb[q][2] = v.s2; rb[q][3] = v.s3;               \
      } else {                                                                            \
        for (int j = 0; j < 4; ++j)                                                       \
          rb[q][j] = (gkb < K && gn + j < N) ? LD(B, pb + gkb * sbk + (gn + j) * sbn) : 0.0f; \
      }                                                                                   \
    }                                                                                     \
  }
#define GEMM_STORE(buf)                                                          \
  {                                                                              \
    __local float* as = (__local float*)As[buf];                                 \
    for (int q = 0; q < QA; ++q) {                                               \
      const int lin = tid + 256 * q;                                             \
      const int row = lin / (BK / 4), kq = (lin % (BK / 4)) * 4;                 \
      for (int j = 0; j < 4; ++j) as[(kq + j) * (BM + APAD) + row] = ra[q][j];   \
      Bs[buf][lin / 32][lin % 32] = (float4)(rb[q][0], rb[q][1], rb[q][2], rb[q][3]); \
    }                                                                            \
  }

  if (total > 0) {
    GEMM_LOAD(0)
    GEMM_STORE(0)
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int it = 0; it < total; ++it) {
    const int cur = it & 1;
    if (it + 1 < total) GEMM_LOAD(it + 1)
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      const float4 a0 = As[cur][kk][ty], a1 = As[cur][kk][16 + ty];
      const float4 b0 = Bs[cur][kk][tx], b1 = Bs[cur][kk][16 + tx];
      const float a[8] = {a0.s0, a0.s1, a0.s2, a0.s3, a1.s0, a1.s1, a1.s2, a1.s3};
      const float b[8] = {b0.s0, b0.s1, b0.s2, b0.s3, b1.s0, b1.s1, b1.s2, b1.s3};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    if (it + 1 < total) GEMM_STORE(cur ^ 1)
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
      if (n < N)
        ST(C, offC + m * scm + n * scn, gemm_epilogue(acc[i][j], m, n, bias, offBias, sbm, sbn2, flags));
    }
  }
}
#undef GEMM_LOAD
#undef GEMM_STORE

#else
/* CPU: each work-item owns a 6x16 block of C in twelve float8 accumulators (the AVX2
 * register file), walking k with one broadcast of A and two 8-wide loads of B per row. */
#define MR 6
#define NR 16

__kernel void gemm(GEMM_ARGS) {
  GEMM_BATCH_SETUP
  const int n0 = get_global_id(0) * NR, m0 = get_global_id(1) * MR;
  if (n0 >= N || m0 >= M) return;
  float8 c[MR][2];
  for (int i = 0; i < MR; ++i) c[i][0] = c[i][1] = (float8)(0.0f);
  const bool full = m0 + MR <= M && n0 + NR <= N && sbn == 1;
  for (int r = 0; r < R; ++r) {
    const long pa = offA + (trow ? trow[2 + 2 * r] : 0) + m0 * sam;
    const long pb = offB + (trow ? trow[3 + 2 * r] : 0) + n0 * sbn;
    if (full) {
      __global const T* bp = B + pb;
      __global const T* a0 = A + pa;
      for (int k = 0; k < K; ++k) {
        const float8 b0 = LD8(bp, 0), b1 = LD8(bp, 8);
        bp += sbk;
        const long ka = k * sak;
#pragma unroll
        for (int i = 0; i < MR; ++i) {
          const float8 av = (float8)(LD(a0, ka + i * sam));
          c[i][0] = fma(av, b0, c[i][0]);
          c[i][1] = fma(av, b1, c[i][1]);
        }
      }
    } else {
      for (int k = 0; k < K; ++k) {
        float bv[NR];
        for (int j = 0; j < NR; ++j) bv[j] = n0 + j < N ? LD(B, pb + k * sbk + j * sbn) : 0.0f;
        const float8 b0 = vload8(0, bv), b1 = vload8(1, bv);
        for (int i = 0; i < MR; ++i) {
          const float8 av = (float8)(m0 + i < M ? LD(A, pa + i * sam + k * sak) : 0.0f);
          c[i][0] = fma(av, b0, c[i][0]);
          c[i][1] = fma(av, b1, c[i][1]);
        }
      }
    }
  }
  for (int i = 0; i < MR && m0 + i < M; ++i) {
    float v[NR];
    vstore8(c[i][0], 0, v);
    vstore8(c[i][1], 1, v);
    const int m = m0 + i;
    for (int j = 0; j < NR && n0 + j < N; ++j)
      ST(C, offC + m * scm + (n0 + j) * scn, gemm_epilogue(v[j], m, n0 + j, bias, offBias, sbm, sbn2, flags));
  }
}
#endif

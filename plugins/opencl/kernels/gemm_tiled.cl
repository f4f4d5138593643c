/* The GPU GEMM, included twice (tile128.cl / tile64.cl set TILE and KNAME before it):
 * a TILE x TILE tile of C per work-group of 16x16, each work-item a (TILE/16)^2 register
 * block (rows g*64 + ty*4 + {0..3} for g < TILE/64, columns likewise), k in steps of
 * GEMM_BK (16) through double-buffered local memory: the next tile's global loads are in
 * flight while the current one is multiplied, and one barrier per step suffices. The
 * host takes TILE 64 when 128-tiles would leave compute units idle. GEMM_BK can be set
 * through DLFUSE_OPENCL_BUILD_OPTIONS for tuning (8 works for TILE 128 only). */
#if !DLF_CPU
#ifndef GEMM_BK
#define GEMM_BK 16
#endif
#define BK GEMM_BK
#define APAD 4
#define RG (TILE / 64)             /* float4 groups per work-item along m (and n) */
#define QA (TILE * BK / 1024)      /* float4 groups of A (and of B) each work-item loads */
#if QA < 1
#error "GEMM_BK too small for this TILE"
#endif
/* 4 floats from global memory; flags 4 (A) / 8 (B) promise 16-byte alignment so NVIDIA
 * emits one 128-bit load (vload4 only promises 4 bytes). */
#if DLF_HALF
#define LD4G(p, i, al) vload_half4(0, (p) + (i))
#else
#define LD4G(p, i, al) ((al) ? *(__global const float4*)((p) + (i)) : vload4(0, (p) + (i)))
#endif

__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void KNAME(GEMM_ARGS) {
  GEMM_BATCH_SETUP
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int tid = ty * 16 + tx;
  const int n0 = get_group_id(0) * TILE, m0 = get_group_id(1) * TILE;
  __local float4 As[2][BK][(TILE + APAD) / 4];
  __local float4 Bs[2][BK][(TILE + APAD) / 4];
  float acc[4 * RG][4 * RG];
  for (int i = 0; i < 4 * RG; ++i)
    for (int j = 0; j < 4 * RG; ++j) acc[i][j] = 0.0f;

  const int ktiles = (K + BK - 1) / BK;
  const int total = R * ktiles;
  const bool a_rows_in = m0 + TILE <= M, b_cols_in = n0 + TILE <= N;
  const bool a_al = (flags & 4) != 0, b_al = (flags & 8) != 0;
  float ra[QA][4], rb[QA][4];

  /* Group q of A: row (tid + 256 q) / (BK/4), 4 consecutive k from ((tid + 256 q) % (BK/4)) * 4.
   * Group q of B: k row (tid + 256 q) / (TILE/4), 4 consecutive n from its remainder * 4. */
#define GEMM_LOAD(it)                                                                     \
  {                                                                                       \
    const int r_ = (it) / ktiles, k_ = ((it) - r_ * ktiles) * BK;                         \
    const long pa = offA + (trow ? trow[TAB_A(r_)] : 0);                                  \
    const long pb = offB + (trow ? trow[TAB_B(r_)] : 0);                                  \
    for (int q = 0; q < QA; ++q) {                                                        \
      const int lin = tid + 256 * q;                                                      \
      const int gm = m0 + lin / (BK / 4), gk = k_ + (lin % (BK / 4)) * 4;                 \
      if (a_rows_in && gk + 4 <= K && sak == 1) {                                         \
        const float4 v = LD4G(A, pa + gm * sam + gk, a_al);                               \
        ra[q][0] = v.s0; ra[q][1] = v.s1; ra[q][2] = v.s2; ra[q][3] = v.s3;               \
      } else {                                                                            \
        for (int j = 0; j < 4; ++j)                                                       \
          ra[q][j] = (gm < M && gk + j < K) ? LD(A, pa + gm * sam + (gk + j) * sak) : 0.0f; \
      }                                                                                   \
      const int gkb = k_ + lin / (TILE / 4), gn = n0 + (lin % (TILE / 4)) * 4;            \
      if (b_cols_in && gkb < K && sbn == 1) {                                             \
        const float4 v = LD4G(B, pb + gkb * sbk + gn, b_al);                              \
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
      for (int j = 0; j < 4; ++j) as[(kq + j) * (TILE + APAD) + row] = ra[q][j]; \
      Bs[buf][lin / (TILE / 4)][lin % (TILE / 4)] = (float4)(rb[q][0], rb[q][1], rb[q][2], rb[q][3]); \
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
      float a[4 * RG], b[4 * RG];
#pragma unroll
      for (int g = 0; g < RG; ++g) {
        const float4 av = As[cur][kk][g * 16 + ty], bv = Bs[cur][kk][g * 16 + tx];
        a[4 * g] = av.s0; a[4 * g + 1] = av.s1; a[4 * g + 2] = av.s2; a[4 * g + 3] = av.s3;
        b[4 * g] = bv.s0; b[4 * g + 1] = bv.s1; b[4 * g + 2] = bv.s2; b[4 * g + 3] = bv.s3;
      }
#pragma unroll
      for (int i = 0; i < 4 * RG; ++i)
#pragma unroll
        for (int j = 0; j < 4 * RG; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    if (it + 1 < total) GEMM_STORE(cur ^ 1)
    barrier(CLK_LOCAL_MEM_FENCE);
  }

#pragma unroll
  for (int i = 0; i < 4 * RG; ++i) {
    const int m = m0 + (i / 4) * 64 + ty * 4 + i % 4;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4 * RG; ++j) {
      const int n = n0 + (j / 4) * 64 + tx * 4 + j % 4;
      if (n < N) GEMM_EPILOGUE(acc[i][j], m, n)
    }
  }
}
#undef GEMM_LOAD
#undef GEMM_STORE
#undef BK
#undef APAD
#undef RG
#undef QA
#undef LD4G
#endif /* !DLF_CPU */
#undef TILE
#undef KNAME

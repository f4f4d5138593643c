/* C = epilogue(sum_r A_r @ B_r): the one GEMM of the plugin.
 *
 * Operands are strided views (any row/column stride, so transposed operands are just
 * swapped strides): A(m, k) = A[offA + m*sam + k*sak], B(k, n) = B[offB + k*sbk + n*sbn],
 * C(m, n) = C[offC + m*scm + n*scn]. The epilogue, in float: v = sum + bias(m, n) (flags
 * & 1; bias[offBias + m*sbm + n*sbn2]) + residual(m, n) (flags & 2; res[offRes + m*srm +
 * n*srn]); v is stored to P (when not NULL, P[offP + m*spm + n*spn]) and act_fwd(v, act)
 * to C, each rounded once. The residual is read before C is written by the same
 * work-item, so C may be the residual itself (in place).
 * flags & 4 / 8: every A / B row the kernel loads starts 16-byte aligned (see LD4G).
 *
 * Batches: group z of the grid is one C matrix. Without a table (NULL) there is one batch
 * and R = 1. With a table, row z is [offC, offBias, offRes, offP, (offA, offB) x R] (added
 * to the base offsets): the R products are summed into one C, which is how the backward
 * reduces a broadcast operand's gradient over batch dims without atomics or a second pass.
 */
#define GEMM_ARGS                                                                       \
  __global const T *A, long offA, long sam, long sak, __global const T *B, long offB,   \
      long sbk, long sbn, __global T *C, long offC, long scm, long scn,                 \
      __global const T *bias, long offBias, long sbm, long sbn2, __global const T *res, \
      long offRes, long srm, long srn, __global T *P, long offP, long spm, long spn,    \
      int flags, int act, int M, int N, int K, int R, __global const long *table

/* Table row header (offC, offBias, offRes, offP); then (offA, offB) of product r at
 * TAB_A(r), TAB_B(r). Must match kTableHeader in src/ops.h. */
#define TAB_HDR 4
#define TAB_A(r) (TAB_HDR + 2 * (r))
#define TAB_B(r) (TAB_HDR + 1 + 2 * (r))

#define GEMM_BATCH_SETUP                                                  \
  const long bz = get_group_id(2);                                        \
  __global const long* trow = table ? table + bz * (TAB_HDR + 2 * (long)R) : 0; \
  if (trow) {                                                             \
    offC += trow[0];                                                      \
    offBias += trow[1];                                                   \
    offRes += trow[2];                                                    \
    offP += trow[3];                                                      \
  }

/* Stores element (m, n) of the product sum v through the epilogue (see above). A macro:
 * it reads a dozen of the kernel's arguments. */
#define GEMM_EPILOGUE(v, m, n)                                             \
  {                                                                        \
    float e_ = (v);                                                        \
    if (flags & 1) e_ += LD(bias, offBias + (m) * sbm + (n) * sbn2);       \
    if (flags & 2) e_ += LD(res, offRes + (m) * srm + (n) * srn);          \
    if (P) ST(P, offP + (m) * spm + (n) * spn, e_);                        \
    ST(C, offC + (m) * scm + (n) * scn, act_fwd(e_, act));                 \
  }

#if DLF_CPU
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
  /* flags & 16: B is packed by pack_b into panels of NR columns, k-contiguous
   * (B[(n0 / NR) * K * NR + k * NR + j]), so each k reads one 64-byte line. */
  const bool packed = (flags & 16) != 0;
  const bool full = m0 + MR <= M && n0 + NR <= N && (sbn == 1 || packed);
  for (int r = 0; r < R; ++r) {
    const long pa = offA + (trow ? trow[TAB_A(r)] : 0) + m0 * sam;
    const long pb = packed ? (long)(n0 / NR) * K * NR : offB + (trow ? trow[TAB_B(r)] : 0) + n0 * sbn;
    const long bstep = packed ? NR : sbk;
    if (full) {
      __global const T* bp = B + pb;
      __global const T* a0 = A + pa;
      for (int k = 0; k < K; ++k) {
        const float8 b0 = LD8(bp, 0), b1 = LD8(bp, 8);
        bp += bstep;
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
        for (int j = 0; j < NR; ++j)
          bv[j] = n0 + j < N ? LD(B, packed ? pb + k * NR + j : pb + k * sbk + j * sbn) : 0.0f;
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
    for (int j = 0; j < NR && n0 + j < N; ++j) GEMM_EPILOGUE(v[j], m, n0 + j)
  }
}

/* Packs B (K x N, any strides) into NR-column panels, k-contiguous, zero-padded past N:
 * P[(n / NR) * K * NR + k * NR + n % NR]. Work-item n (grid ceil(N / NR) * NR) walks k. */
__kernel void pack_b(__global const T* B, long offB, long sbk, long sbn, __global T* P, int N, int K) {
  const int n = get_global_id(0);
  if (n >= (N + NR - 1) / NR * NR) return;
  const long dst = (long)(n / NR) * K * NR + n % NR;
  for (int k = 0; k < K; ++k) ST(P, dst + (long)k * NR, n < N ? LD(B, offB + k * sbk + n * sbn) : 0.0f);
}
#endif

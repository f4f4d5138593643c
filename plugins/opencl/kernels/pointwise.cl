/* add_mul_activation forward/backward, the matmul backwards' dz, and reductions.
 * Every pointwise kernel runs on a 3-D grid over the (collapsed) output shape
 * [n0, n1, n2]: global id 0 walks n2 (innermost), id 1 n1, id 2 n0. The host rounds the
 * grid up to the work-group size, hence the bounds test. */

#define PW_INDEX                                                      \
  const long i2 = get_global_id(0), i1 = get_global_id(1), i0 = get_global_id(2); \
  if (i2 >= n2 || i1 >= n1 || i0 >= n0) return;
#define AT(v) ((v).off + i0 * (v).s0 + i1 * (v).s1 + i2 * (v).s2)

/* out = act(x + bias + multiplier * y), one pass; out may be x itself. */
__kernel void amx_fwd(__global const T* x, view_t vx, __global const T* y, view_t vy,
                      __global const T* b, view_t vb, __global T* o, view_t vo, long n0, long n1,
                      long n2, float mult, int act) {
  PW_INDEX
  const float p = LD(x, AT(vx)) + LD(b, AT(vb)) + mult * LD(y, AT(vy));
  ST(o, AT(vo), act_fwd(p, act));
}

/* d_pre of add_mul's backward at one element (AT picks the indexing): from
 * x + bias + multiplier * y, or, with from_out, from the forward's out, which the host
 * passes in x's place (y and bias are NULL then and never read). */
#define AMX_D(AT)                                                                       \
  (from_out ? d_out(LD(g, AT(vg)), LD(x, AT(vx)), act)                                  \
            : d_pre(LD(g, AT(vg)), LD(x, AT(vx)) + LD(b, AT(vb)) + mult * LD(y, AT(vy)), act))

/* d_pre (AMX_D) at every element, one pass over the inputs. Each
 * gradient is written here when it has the output's shape (flag bit set in `direct`:
 * 1 grad_x, 2 grad_y, 4 grad_bias); a gradient that needs a reduction reads d_pre from
 * `tmp` (float, written when `tmp` is not NULL) in reduce_f. */
__kernel void amx_bwd(__global const T* g, view_t vg, __global const T* x, view_t vx,
                      __global const T* y, view_t vy, __global const T* b, view_t vb,
                      __global T* gx, view_t vgx, __global T* gy, view_t vgy, __global T* gb,
                      view_t vgb, __global float* tmp, view_t vt, int direct, long n0, long n1,
                      long n2, float mult, int act, int from_out) {
  PW_INDEX
  const float d = AMX_D(AT);
  if (direct & 1) ST(gx, AT(vgx), d);
  if (direct & 2) ST(gy, AT(vgy), mult * d);
  if (direct & 4) ST(gb, AT(vgb), d);
  if (tmp) tmp[AT(vt)] = d;
}

/* The matmul backwards' dz = grad_out * act'(pre), from pre or (from_out) from out: `s`
 * is whichever the caller gave. relu is a select either way. */
__kernel void act_dz(__global const T* g, view_t vg, __global const T* s, view_t vs, __global T* dz,
                     view_t vdz, long n0, long n1, long n2, int act, int from_out) {
  PW_INDEX
  ST(dz, AT(vdz), d_act(LD(g, AT(vg)), LD(s, AT(vs)), act, from_out));
}

/* dst[kept] = scale * sum over the reduced dims of src. The kept dims (up to three,
 * collapsed) are the grid; `vs` holds src's strides along them, `vd` dst's. Compensated
 * (Kahan) summation keeps long sums accurate; infinities propagate as in a plain sum. */
#define REDUCE_BODY(LOADSRC)                                               \
  const long i2 = get_global_id(0), i1 = get_global_id(1), i0 = get_global_id(2); \
  if (i2 >= n2 || i1 >= n1 || i0 >= n0) return;                             \
  long total = 1;                                                           \
  for (int d = 0; d < red.nr; ++d) total *= red.n[d];                       \
  long idx[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                   \
  long off = AT(vs);                                                        \
  float sum = 0.0f, comp = 0.0f;                                            \
  for (long t = 0; t < total; ++t) {                                        \
    const float yv = LOADSRC - comp;                                        \
    const float s2 = sum + yv;                                              \
    /* An infinite partial sum makes (s2 - sum) NaN: no compensation then,  \
     * so -inf + finite terms stays -inf as in a plain sum. */              \
    comp = isfinite(s2) ? (s2 - sum) - yv : 0.0f;                           \
    sum = s2;                                                               \
    for (int d = red.nr - 1; d >= 0; --d) {                                 \
      off += red.s[d];                                                      \
      if (++idx[d] < red.n[d]) break;                                       \
      off -= red.n[d] * red.s[d];                                           \
      idx[d] = 0;                                                           \
    }                                                                       \
  }                                                                         \
  ST(dst, AT(vd), scale * sum);

__kernel void reduce_f(__global const float* src, view_t vs, red_t red, __global T* dst, view_t vd,
                       long n0, long n1, long n2, float scale) {
  REDUCE_BODY(src[off])
}

__kernel void reduce_t(__global const T* src, view_t vs, red_t red, __global T* dst, view_t vd,
                       long n0, long n1, long n2, float scale) {
  REDUCE_BODY(LD(src, off))
}

/* add_mul_activation backward over a [n1 rows, n2 columns] output when every gradient
 * that needs a reduction is summed over the rows only (the common bias [N]): one pass.
 * Work-item (c, chunk) walks rows [chunk * rpi, +rpi) of column c, writes the gradients
 * of the output's shape (`direct` bits as in amx_bwd) and leaves the column sum of d_pre
 * over its rows in part[chunk * n2 + c] (when `part` is not NULL); reduce_f then sums the
 * few chunks. Consecutive work-items read consecutive columns. */
__kernel void amx_bwd_rows(__global const T* g, view_t vg, __global const T* x, view_t vx,
                           __global const T* y, view_t vy, __global const T* b, view_t vb,
                           __global T* gx, view_t vgx, __global T* gy, view_t vgy,
                           __global T* gb, view_t vgb, __global float* part, int direct, long n1,
                           long n2, long rpi, float mult, int act, int from_out) {
  const long c = get_global_id(0), chunk = get_global_id(1);
  if (c >= n2) return;
  /* A chunk past the last row still writes its (zero) partial sum: the reduction reads
   * every chunk, and scratch memory holds whatever it held before. */
  const long r1 = min(n1, (chunk + 1) * rpi);
  float sum = 0.0f;
  for (long r = chunk * rpi; r < r1; ++r) {
#define AT2(v) ((v).off + r * (v).s1 + c * (v).s2)
    const float d = AMX_D(AT2);
    if (direct & 1) ST(gx, AT2(vgx), d);
    if (direct & 2) ST(gy, AT2(vgy), mult * d);
    if (direct & 4) ST(gb, AT2(vgb), d);
    sum += d;
#undef AT2
  }
  if (part) part[chunk * n2 + c] = sum;
}

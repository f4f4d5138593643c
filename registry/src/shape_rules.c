/* The named shape rules (shape_rules.h): what dlfuse_op_infer_outputs answers for MATMUL,
 * BROADCAST and LIKE outputs, and what the Python extension allocates outputs at. Plain C,
 * no allocation, no message: the registry's side says what went wrong. */
#include "shape_rules.h"

static int bad_tensor(const DLTensor* t) {
  return t->ndim < 0 || t->ndim > DLFUSE_MAX_NDIM || (t->ndim > 0 && !t->shape);
}

/* NumPy broadcasting of b into s[0, *n) in place: 1, or 0 with s untouched where they do not
 * broadcast (the registry names the shape so far when an input does not fit). The extension
 * runs this on every call that allocates: equal dims, the common case, cost one compare. */
static int broadcast_into(int64_t* s, int32_t* n, const int64_t* b, int32_t nb) {
  const int32_t na = *n;
  if (nb < 0 || nb > DLFUSE_MAX_NDIM) return 0;
  if (nb <= na) { /* s keeps its rank: only its 1s can change */
    int64_t* t = s + (na - nb);
    int ones = 0;
    for (int32_t i = 0; i < nb; ++i) {
      if (t[i] == b[i]) continue;
      if (t[i] != 1 && b[i] != 1) return 0;
      ones |= t[i] == 1;
    }
    for (int32_t i = 0; ones && i < nb; ++i)
      if (t[i] == 1) t[i] = b[i];
    return 1;
  }
  const int32_t off = nb - na; /* b has more dims: s moves up behind b's leading ones */
  for (int32_t i = 0; i < na; ++i)
    if (s[i] != b[off + i] && s[i] != 1 && b[off + i] != 1) return 0;
  for (int32_t i = na - 1; i >= 0; --i) s[off + i] = s[i] == 1 ? b[off + i] : s[i];
  for (int32_t i = 0; i < off; ++i) s[i] = b[i];
  *n = nb;
  return 1;
}

/* A [..., M, K] @ B [..., K, N]: broadcast batch dims + [M, N]. */
static int matmul_shape(const DLTensor* a, const DLTensor* b, int64_t* out, int32_t* nout) {
  if (a->ndim < 2 || b->ndim < 2 || a->shape[a->ndim - 1] != b->shape[b->ndim - 2]) return 0;
  int32_t n = a->ndim - 2;
  for (int32_t d = 0; d < n; ++d) out[d] = a->shape[d];
  if (!broadcast_into(out, &n, b->shape, b->ndim - 2) || n + 2 > DLFUSE_MAX_NDIM) return 0;
  out[n++] = a->shape[a->ndim - 2];
  out[n++] = b->shape[b->ndim - 1];
  *nout = n;
  return 1;
}

dlfuse_shape_rule_result_t dlfuse_shape_by_rule(int32_t rule, uint32_t reads, const DLTensor* const* in, int32_t nin,
                                                int64_t* shape, int32_t* ndim, int32_t* at) {
  if (nin > 32) nin = 32; /* reads has a bit per input */
  switch (rule) {
    case DLFUSE_SHAPE_MATMUL: { /* the first two inputs read, both required */
      const DLTensor* ab[2];
      int32_t k = 0;
      for (int32_t j = 0; j < nin && k < 2; ++j) {
        if (!((reads >> j) & 1u)) continue;
        *at = j;
        if (!in[j]) return DLFUSE_SHAPE_RULE_ABSENT;
        if (bad_tensor(in[j])) return DLFUSE_SHAPE_RULE_BAD_TENSOR;
        ab[k++] = in[j];
      }
      if (k < 2) return DLFUSE_SHAPE_RULE_NOT_NAMED;
      return matmul_shape(ab[0], ab[1], shape, ndim) ? DLFUSE_SHAPE_RULE_OK : DLFUSE_SHAPE_RULE_NO_MATMUL;
    }
    case DLFUSE_SHAPE_BROADCAST:
    case DLFUSE_SHAPE_LIKE: { /* the present inputs read, in input order, each checked */
      int32_t n = -1;
      for (int32_t j = 0; j < nin; ++j) {
        const DLTensor* t = in[j];
        if (!((reads >> j) & 1u) || !t) continue;
        *at = j;
        if (bad_tensor(t)) return DLFUSE_SHAPE_RULE_BAD_TENSOR;
        if (n < 0) {
          n = t->ndim;
          for (int32_t d = 0; d < n; ++d) shape[d] = t->shape[d]; /* a 0-d tensor's shape may be NULL */
        } else if (rule == DLFUSE_SHAPE_BROADCAST && !broadcast_into(shape, &n, t->shape, t->ndim)) {
          *ndim = n;
          return DLFUSE_SHAPE_RULE_NO_BROADCAST;
        }
      }
      if (n < 0) return DLFUSE_SHAPE_RULE_NO_INPUT;
      *ndim = n;
      return DLFUSE_SHAPE_RULE_OK;
    }
    default: return DLFUSE_SHAPE_RULE_NOT_NAMED;
  }
}

/* A plugin whose ops are all its own, as a third party writes one from docs/plugin-guide.md:
 * two declared ops, float32 and float64, on the CPU. `dlfuse conform` has no reference for
 * them and checks them from their schemas alone (tests/conformance/schema_checks.h); the
 * OWNOPS_MUTANT_* builds (CMakeLists.txt) each break one rule, and conformance must fail them.
 *
 *   softplus_scale_add(x, y; SCALE = 1.0 (FLOAT64, key 1), POWER = 1 in [1, 3] (INT64, key 2))
 *       out = softplus(x)^POWER + SCALE * y, NumPy broadcasting; out may be x
 *   softplus_scale_add_backward(grad_out, x; SCALE, POWER)
 *       grad_x = sum_to(grad_out * POWER softplus(x)^(POWER-1) sigmoid(x), x's shape)
 *       grad_y = SCALE * sum_to(grad_out, y's shape)
 * The keys 1 and 2 are ACTIVATION's and MULTIPLIER's among the core ops, with other types: an
 * op's attribute keys are its own (docs/abi.md). */
#include <dlfuse/plugin.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kMaxRank = DLFUSE_MAX_NDIM, kKeyScale = 1, kKeyPower = 2 };

static dlfuse_status_t fail(const dlfuse_kernel_args_t* a, dlfuse_status_t st, const char* fmt, ...) {
  if (a->err && a->err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, a->err_size, fmt, ap);
    va_end(ap);
  }
  return st;
}

/* Element strides of t aligned to the last t->ndim of `rank` dims; 0 where t is broadcast. */
static void aligned_strides(const DLTensor* t, int rank, int64_t* out) {
  int64_t compact = 1;
  for (int i = 0; i < rank; ++i) out[i] = 0;
  for (int j = t->ndim - 1; j >= 0; --j) {
#ifdef OWNOPS_MUTANT_IGNORES_STRIDES
    const int64_t s = compact; /* mutant: strides taken as compact */
#else
    const int64_t s = t->strides ? t->strides[j] : compact;
#endif
    compact *= t->shape[j];
    if (t->shape[j] != 1) out[rank - t->ndim + j] = s;
  }
}

static char* base(const DLTensor* t) { return (char*)t->data + t->byte_offset; }
static int wide(const DLTensor* t) { return t->dtype.bits == 64; }
static double load(const DLTensor* t, int64_t i) {
  return wide(t) ? ((const double*)base(t))[i] : (double)((const float*)base(t))[i];
}
static void store(const DLTensor* t, int64_t i, double v) {
  if (wide(t))
    ((double*)base(t))[i] = v;
  else
    ((float*)base(t))[i] = (float)v;
}

static int64_t offset(const int64_t* idx, const int64_t* strides, int rank) {
  int64_t o = 0;
  for (int i = 0; i < rank; ++i) o += idx[i] * strides[i];
  return o;
}

static int next_index(int64_t* idx, const int64_t* shape, int rank) {
  for (int i = rank - 1; i >= 0; --i) {
    if (++idx[i] < shape[i]) return 1;
    idx[i] = 0;
  }
  return 0;
}

static int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void read_attrs(const dlfuse_kernel_args_t* args, double* scale, int* power) {
  /* The registry passes every attribute of the schema, defaults filled in, types checked. */
  *scale = dlfuse_find_attr(args, kKeyScale)->value.f64;
  *power = (int)dlfuse_find_attr(args, kKeyPower)->value.i64;
}

#ifdef OWNOPS_MUTANT_DATA_RACE
enum { kScratch = 1 << 16 };
static double g_scratch[kScratch]; /* mutant: one scratch buffer shared by every call, from any thread */
#endif

static dlfuse_status_t forward(void* state, void* kernel_data, const dlfuse_kernel_args_t* args) {
  (void)state;
  (void)kernel_data;
  double scale;
  int power;
  read_attrs(args, &scale, &power);
  const DLTensor *x = args->inputs[0], *y = args->inputs[1];
  const DLTensor* out = args->outputs[0];
  if (out->ndim > kMaxRank) return fail(args, DLFUSE_STATUS_UNSUPPORTED, "ownops: rank %d", (int)out->ndim);
  if (numel(out) == 0) return DLFUSE_STATUS_OK;
  const int rank = out->ndim;
  int64_t xs[kMaxRank], ys[kMaxRank], os[kMaxRank], idx[kMaxRank] = {0};
  aligned_strides(x, rank, xs);
  aligned_strides(y, rank, ys);
  aligned_strides(out, rank, os);
#ifdef OWNOPS_MUTANT_DATA_RACE
  /* Every value into the shared scratch first, then the scratch into out. */
  int64_t n = 0;
  do {
    g_scratch[n++ % kScratch] =
        pow(softplus(load(x, offset(idx, xs, rank))), power) + scale * load(y, offset(idx, ys, rank));
  } while (next_index(idx, out->shape, rank));
  n = 0;
  do {
    store(out, offset(idx, os, rank), g_scratch[n++ % kScratch]);
  } while (next_index(idx, out->shape, rank));
#else
  do {
    const double v = pow(softplus(load(x, offset(idx, xs, rank))), power) + scale * load(y, offset(idx, ys, rank));
    store(out, offset(idx, os, rank), v);
  } while (next_index(idx, out->shape, rank));
#endif
  return DLFUSE_STATUS_OK;
}

/* A gradient summed to its output's shape, in double, then stored. */
static dlfuse_status_t reduce_store(const dlfuse_kernel_args_t* args, const DLTensor* g, const DLTensor* x,
                                    const DLTensor* dst, double scale, int power) {
  if (!dst) return DLFUSE_STATUS_OK;
  const int rank = g->ndim;
  const int64_t n = numel(dst);
  double* sum = (double*)calloc(n > 0 ? (size_t)n : 1, sizeof(double));
  if (!sum) return fail(args, DLFUSE_STATUS_OUT_OF_MEMORY, "ownops: %lld accumulators", (long long)n);
  int64_t gs[kMaxRank], xs[kMaxRank], ds[kMaxRank], cs[kMaxRank], idx[kMaxRank] = {0};
  aligned_strides(g, rank, gs);
  if (x) aligned_strides(x, rank, xs);
  aligned_strides(dst, rank, ds);
  /* Compact strides of dst's own shape, aligned the same way: the accumulator's index. */
  int64_t compact = 1;
  for (int i = 0; i < rank; ++i) cs[i] = 0;
  for (int j = dst->ndim - 1; j >= 0; --j) {
    if (dst->shape[j] != 1) cs[rank - dst->ndim + j] = compact;
    compact *= dst->shape[j];
  }
  if (numel(g) > 0) do {
      double d = load(g, offset(idx, gs, rank));
      if (x) {
        const double xv = load(x, offset(idx, xs, rank));
#ifdef OWNOPS_MUTANT_WRONG_DERIVATIVE
        d *= pow(softplus(xv), power - 1) * sigmoid(xv); /* mutant: the factor POWER lost */
#else
        d *= power * pow(softplus(xv), power - 1) * sigmoid(xv);
#endif
      } else {
#ifndef OWNOPS_MUTANT_GRAD_Y_UNSCALED
        d *= scale;
#endif
      }
#ifdef OWNOPS_MUTANT_REDUCTION_OVERWRITES
      sum[offset(idx, cs, rank)] = d; /* mutant: the last term kept instead of the sum */
#else
      sum[offset(idx, cs, rank)] += d;
#endif
    } while (next_index(idx, g->shape, rank));
  int64_t o[kMaxRank] = {0}, k = 0;
  if (n > 0) do
      store(dst, offset(o, ds + (rank - dst->ndim), dst->ndim), sum[k++]);
    while (next_index(o, dst->shape, dst->ndim));
  free(sum);
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t backward(void* state, void* kernel_data, const dlfuse_kernel_args_t* args) {
  (void)state;
  (void)kernel_data;
  double scale;
  int power;
  read_attrs(args, &scale, &power);
  const DLTensor *g = args->inputs[0], *x = args->inputs[1];
  if (g->ndim > kMaxRank) return fail(args, DLFUSE_STATUS_UNSUPPORTED, "ownops: rank %d", (int)g->ndim);
  if (args->outputs[0] && !x)
    return fail(args, DLFUSE_STATUS_INVALID_ARGUMENT, "ownops: grad_x wanted, but input x is NULL");
  dlfuse_status_t st = reduce_store(args, g, x, args->outputs[0], scale, power);
  if (st == DLFUSE_STATUS_OK) st = reduce_store(args, g, NULL, args->outputs[1], scale, power);
  return st;
}

/* ---- Schemas: what the registry validates calls by, and conformance derives checks from -- */

static const dlfuse_attr_schema_t kAttrs[] = {
    {"SCALE", 0, {kKeyScale, DLFUSE_ATTR_FLOAT64, {.f64 = 1.0}}, 0, 0},
    {"POWER", 0, {kKeyPower, DLFUSE_ATTR_INT64, {.i64 = 1}}, 1, 3},
};
static const dlfuse_arg_schema_t kFwdIn[] = {{"x", 0, 0, 0, 0, -1}, {"y", 0, 0, 0, 0, -1}};
static const dlfuse_arg_schema_t kFwdOut[] = {{"out", 0, 0, DLFUSE_SHAPE_BROADCAST, 0x3u, 0}};
static const dlfuse_arg_schema_t kBwdIn[] = {{"grad_out", 0, 0, 0, 0, -1}, {"x", DLFUSE_ARG_OPTIONAL, 0, 0, 0, -1}};
static const dlfuse_arg_schema_t kBwdOut[] = {
    {"grad_x", DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE, 0, DLFUSE_SHAPE_LIKE, 0x1u, -1},
    {"grad_y", DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE, 0, DLFUSE_SHAPE_LIKE, 0x1u, -1}};
static const dlfuse_op_schema_t kFwd = {
    sizeof(dlfuse_op_schema_t), "softplus_scale_add", 2, 2, kFwdIn, 1, kFwdOut, 2, kAttrs, NULL, -1};
static const dlfuse_op_schema_t kBwd = {
    sizeof(dlfuse_op_schema_t), "softplus_scale_add_backward", 2, 2, kBwdIn, 2, kBwdOut, 2, kAttrs, NULL, -1};

/* ---- Device services: host memory ----------------------------------------------------- */

static dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) {
  (void)host;
  (void)err;
  (void)err_size;
  *state = NULL;
  return DLFUSE_STATUS_OK;
}
static void close_plugin(void* state) { (void)state; }
static dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) {
  (void)state;
  (void)err;
  (void)err_size;
  *count = 1;
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) {
  (void)state;
  (void)device_id;
  *ptr = aligned_alloc(64, (nbytes + 63) / 64 * 64 + 64);
  if (*ptr) return DLFUSE_STATUS_OK;
  snprintf(err, err_size, "ownops: alloc of %zu bytes failed", nbytes);
  return DLFUSE_STATUS_OUT_OF_MEMORY;
}
static dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) {
  (void)state;
  (void)device_id;
  (void)err;
  (void)err_size;
  free(ptr);
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                            const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                            size_t err_size) {
  (void)state;
  (void)device_id;
  (void)kind;
  (void)stream;
  (void)err;
  (void)err_size;
  if (nbytes) memmove((char*)dst + dst_offset, (const char*)src + src_offset, nbytes);
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err, size_t err_size) {
  (void)state;
  (void)device_id;
  (void)stream;
  (void)err;
  (void)err_size;
  return DLFUSE_STATUS_OK;
}

static const DLDataType kDtypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}};
static const dlfuse_kernel_t kKernels[] = {
    {.struct_size = sizeof(dlfuse_kernel_t),
     .op = "softplus_scale_add",
     .device_type = kDLCPU,
     .num_dtypes = 2,
     .dtypes = kDtypes,
     .priority = 100,
     .fn = forward,
     .schema = &kFwd},
    {.struct_size = sizeof(dlfuse_kernel_t),
     .op = "softplus_scale_add_backward",
     .device_type = kDLCPU,
     .num_dtypes = 2,
     .dtypes = kDtypes,
     .priority = 100,
     .fn = backward,
     .schema = &kBwd},
};

static dlfuse_status_t get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num, char* err,
                                   size_t err_size) {
  (void)state;
  (void)err;
  (void)err_size;
  *kernels = kKernels;
  *num = (int32_t)(sizeof kKernels / sizeof kKernels[0]);
  return DLFUSE_STATUS_OK;
}

#ifndef OWNOPS_NAME
#define OWNOPS_NAME "ownops"
#endif

DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) {
  static const dlfuse_plugin_t p = {.struct_size = sizeof(dlfuse_plugin_t),
                                    .abi_major = DLFUSE_ABI_MAJOR,
                                    .abi_minor = DLFUSE_ABI_MINOR,
                                    .name = OWNOPS_NAME,
                                    .version = "1.0.0",
                                    .device_type = kDLCPU,
                                    .open = open_plugin,
                                    .close = close_plugin,
                                    .get_kernels = get_kernels,
                                    .device_count = device_count,
                                    .alloc = alloc,
                                    .free = release,
                                    .copy = copy,
                                    .synchronize = synchronize};
  return &p;
}

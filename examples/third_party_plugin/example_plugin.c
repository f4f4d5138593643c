/* A complete third-party dlfuse plugin in plain C11, written against the installed SDK
 * (<dlfuse/plugin.h>) alone: add_mul_activation forward and backward for float32 on the
 * CPU, every activation, any strides and NumPy broadcasting. It is meant to be read:
 * simple loops, no tuning. docs/plugin-guide.md walks through it.
 *
 * What the registry has already checked before a kernel runs (docs/abi.md): tensor
 * counts, one dtype for all tensors and that the kernel declared it, shapes and
 * broadcasting, output shapes, devices, size/stride overflow, output overlap, attribute
 * types. What stays with the plugin: its own limits (here, the rank of its index arrays)
 * and its resources (here, malloc). */
#include <dlfuse/plugin.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EXAMPLE_VERSION
#define EXAMPLE_VERSION "0"
#endif

enum { kMaxRank = 16 }; /* docs/abi.md: the registry refuses ndim > 16 */

static dlfuse_status_t fail(char* err, size_t err_size, dlfuse_status_t st, const char* fmt, ...) {
  if (err && err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
  }
  return st;
}

/* ---- Addressing strided, broadcast views ------------------------------------------ */

/* Element strides of t aligned to the last t->ndim of `rank` dims; a dim t lacks or has
 * size 1 in gets stride 0, so broadcasting is just a zero stride. */
static void aligned_strides(const DLTensor* t, int rank, int64_t* out) {
  int64_t compact = 1;
  for (int i = 0; i < rank; ++i) out[i] = 0;
  for (int j = t->ndim - 1; j >= 0; --j) {
    const int64_t s = t->strides ? t->strides[j] : compact;
    compact *= t->shape[j];
    if (t->shape[j] != 1) out[rank - t->ndim + j] = s;
  }
}

/* Compact row-major strides of t's own shape, aligned the same way: the index of an
 * element of a reduced gradient in a dense accumulator. */
static void compact_aligned_strides(const DLTensor* t, int rank, int64_t* out) {
  int64_t compact = 1;
  for (int i = 0; i < rank; ++i) out[i] = 0;
  for (int j = t->ndim - 1; j >= 0; --j) {
    if (t->shape[j] != 1) out[rank - t->ndim + j] = compact;
    compact *= t->shape[j];
  }
}

static float* base_f32(const DLTensor* t) { return (float*)((char*)t->data + t->byte_offset); }

static int64_t offset(const int64_t* idx, const int64_t* strides, int rank) {
  int64_t o = 0;
  for (int i = 0; i < rank; ++i) o += idx[i] * strides[i];
  return o;
}

/* Row-major odometer over `shape`; 0 after the last index. */
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

/* ---- The activations (docs/ops.md), computed in double --------------------------- */

static double sigmoid(double p) { return 1.0 / (1.0 + exp(-p)); }

static double activate(int act, double p) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return isnan(p) ? p : (p > 0 ? p : 0.0); /* fmax would eat NaN */
    case DLFUSE_ACT_SIGMOID: return sigmoid(p);
    case DLFUSE_ACT_TANH: return tanh(p);
    case DLFUSE_ACT_GELU_ERF: return 0.5 * p * (1.0 + erf(p * 0.7071067811865476));
    case DLFUSE_ACT_GELU_TANH: return 0.5 * p * (1.0 + tanh(0.7978845608028654 * (p + 0.044715 * p * p * p)));
    default: return p * sigmoid(p); /* SILU */
  }
}

/* grad * act'(p); relu is a select so that Inf/NaN grads where p <= 0 give exactly 0. */
static double activate_grad(int act, double p, double g) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return g;
    case DLFUSE_ACT_RELU: return (p > 0 || isnan(p)) ? g : 0.0;
    case DLFUSE_ACT_SIGMOID: {
      const double s = sigmoid(p);
      return g * s * (1.0 - s);
    }
    case DLFUSE_ACT_TANH: {
      const double t = tanh(p);
      return g * (1.0 - t * t);
    }
    case DLFUSE_ACT_GELU_ERF: {
      const double cdf = 0.5 * (1.0 + erf(p * 0.7071067811865476));
      const double pdf = exp(-0.5 * p * p) * 0.3989422804014327;
      return g * (cdf + p * pdf);
    }
    case DLFUSE_ACT_GELU_TANH: {
      const double t = tanh(0.7978845608028654 * (p + 0.044715 * p * p * p));
      const double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * p * p);
      return g * (0.5 * (1.0 + t) + 0.5 * p * (1.0 - t * t) * du);
    }
    default: {
      const double s = sigmoid(p);
      return g * s * (1.0 + p * (1.0 - s));
    }
  }
}

/* ---- Kernels --------------------------------------------------------------------- */

typedef struct {
  int act;
  double multiplier;
} attrs_t;

/* The registry passes every attribute with defaults filled in; a plugin still refuses
 * a value it cannot handle rather than guessing. */
static dlfuse_status_t read_attrs(const dlfuse_kernel_args_t* args, attrs_t* a) {
  const dlfuse_attr_t* act = dlfuse_find_attr(args, DLFUSE_ATTR_ACTIVATION);
  const dlfuse_attr_t* mul = dlfuse_find_attr(args, DLFUSE_ATTR_MULTIPLIER);
  if (!act || act->type != DLFUSE_ATTR_INT64 || act->value.i64 < 0 || act->value.i64 >= DLFUSE_ACT_COUNT)
    return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                "example: attribute ACTIVATION: expected an int64 in [0, %d), got %s", DLFUSE_ACT_COUNT,
                act ? "another value" : "none");
  a->act = (int)act->value.i64;
  a->multiplier = (mul && mul->type == DLFUSE_ATTR_FLOAT64) ? mul->value.f64 : 1.0;
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t check_rank(const dlfuse_kernel_args_t* args, const DLTensor* t) {
  if (t->ndim > kMaxRank)
    return fail(args->err, args->err_size, DLFUSE_STATUS_UNSUPPORTED,
                "example: tensor rank: expected at most %d, got %d", kMaxRank, (int)t->ndim);
  return DLFUSE_STATUS_OK;
}

/* inputs x, y, bias; output out (which may be x itself: each element of x is read just
 * before its own slot is written, so that is safe). */
static dlfuse_status_t add_mul_activation(void* state, void* kernel_data, const dlfuse_kernel_args_t* args) {
  (void)state;
  (void)kernel_data;
  attrs_t a;
  dlfuse_status_t st = read_attrs(args, &a);
  const DLTensor *x = args->inputs[0], *y = args->inputs[1], *bias = args->inputs[2];
  DLTensor* out = args->outputs[0];
  if (st == DLFUSE_STATUS_OK) st = check_rank(args, out);
  if (st != DLFUSE_STATUS_OK || numel(out) == 0) return st;
  const int rank = out->ndim;
  int64_t xs[kMaxRank], ys[kMaxRank], bs[kMaxRank], os[kMaxRank], idx[kMaxRank] = {0};
  aligned_strides(x, rank, xs);
  aligned_strides(y, rank, ys);
  aligned_strides(bias, rank, bs);
  aligned_strides(out, rank, os);
  const float *px = base_f32(x), *py = base_f32(y), *pb = base_f32(bias);
  float* po = base_f32(out);
  do {
    const double pre = (double)px[offset(idx, xs, rank)] + (double)pb[offset(idx, bs, rank)] +
                       a.multiplier * (double)py[offset(idx, ys, rank)];
    po[offset(idx, os, rank)] = (float)activate(a.act, pre);
  } while (next_index(idx, out->shape, rank));
  return DLFUSE_STATUS_OK;
}

/* A gradient summed down to its input's shape, accumulated in double. */
typedef struct {
  DLTensor* t; /* NULL: not wanted */
  double* sum;
  int64_t index[kMaxRank];
} reduced_t;

static int reduced_init(reduced_t* r, DLTensor* t, int rank) {
  r->t = t;
  r->sum = NULL;
  if (!t) return 1;
  compact_aligned_strides(t, rank, r->index);
  const int64_t n = numel(t);
  r->sum = (double*)calloc(n > 0 ? (size_t)n : 1, sizeof(double));
  return r->sum != NULL;
}

static void reduced_store(reduced_t* r) {
  if (!r->t || numel(r->t) == 0) return;
  const int rank = r->t->ndim;
  int64_t strides[kMaxRank], idx[kMaxRank] = {0}, linear = 0;
  aligned_strides(r->t, rank, strides);
  float* p = base_f32(r->t);
  do {
    p[offset(idx, strides, rank)] = (float)r->sum[linear++];
  } while (next_index(idx, r->t->shape, rank));
}

/* inputs grad_out, x, y, bias; outputs grad_x, grad_y, grad_bias, each optional. */
static dlfuse_status_t add_mul_activation_backward(void* state, void* kernel_data, const dlfuse_kernel_args_t* args) {
  (void)state;
  (void)kernel_data;
  attrs_t a;
  dlfuse_status_t st = read_attrs(args, &a);
  const DLTensor *g = args->inputs[0], *x = args->inputs[1], *y = args->inputs[2], *bias = args->inputs[3];
  if (st == DLFUSE_STATUS_OK) st = check_rank(args, g);
  if (st != DLFUSE_STATUS_OK) return st;
  const int rank = g->ndim;
  reduced_t gx, gy, gb;
  const int ok = reduced_init(&gx, args->outputs[0], rank) & reduced_init(&gy, args->outputs[1], rank) &
                 reduced_init(&gb, args->outputs[2], rank);
  if (!ok) {
    st = fail(args->err, args->err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "example: gradient accumulators: malloc failed");
  } else if (numel(g) > 0) {
    int64_t gs[kMaxRank], xs[kMaxRank], ys[kMaxRank], bs[kMaxRank], idx[kMaxRank] = {0};
    aligned_strides(g, rank, gs);
    aligned_strides(x, rank, xs);
    aligned_strides(y, rank, ys);
    aligned_strides(bias, rank, bs);
    const float *pg = base_f32(g), *px = base_f32(x), *py = base_f32(y), *pb = base_f32(bias);
    do {
      const double pre = (double)px[offset(idx, xs, rank)] + (double)pb[offset(idx, bs, rank)] +
                         a.multiplier * (double)py[offset(idx, ys, rank)];
      const double d_pre = activate_grad(a.act, pre, (double)pg[offset(idx, gs, rank)]);
      if (gx.t) gx.sum[offset(idx, gx.index, rank)] += d_pre;
      if (gy.t) gy.sum[offset(idx, gy.index, rank)] += a.multiplier * d_pre;
      if (gb.t) gb.sum[offset(idx, gb.index, rank)] += d_pre;
    } while (next_index(idx, g->shape, rank));
  }
  if (st == DLFUSE_STATUS_OK) {
    reduced_store(&gx);
    reduced_store(&gy);
    reduced_store(&gb);
  }
  free(gx.sum);
  free(gy.sum);
  free(gb.sum);
  return st;
}

/* ---- Device services: the CPU is device 0, memory is aligned host memory ---------- */

static dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) {
  /* The host speaks our major (the registry checked); a newer minor only adds fields. */
  if (!host || !state) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: open: NULL argument");
  *state = NULL;
  return DLFUSE_STATUS_OK;
}

static void close_plugin(void* state) { (void)state; }

static dlfuse_status_t check_device(int32_t device_id, char* err, size_t err_size) {
  if (device_id != 0)
    return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: device_id: expected 0, got %d",
                (int)device_id);
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t device_count(void* state, int32_t* count, char* err, size_t err_size) {
  (void)state;
  if (!count) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: device_count: count is NULL");
  *count = 1;
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t alloc(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) {
  (void)state;
  dlfuse_status_t st = check_device(device_id, err, err_size);
  if (st != DLFUSE_STATUS_OK) return st;
  if (!ptr) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: alloc: ptr is NULL");
  /* aligned_alloc wants a multiple of the alignment; 0 bytes still gives a real pointer. */
  const size_t rounded = (nbytes + 63) / 64 * 64;
  if (rounded < nbytes)
    return fail(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "example: alloc: %zu bytes overflow", nbytes);
  *ptr = aligned_alloc(64, rounded ? rounded : 64);
  if (!*ptr) return fail(err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "example: alloc: %zu bytes failed", nbytes);
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t release(void* state, int32_t device_id, void* ptr, char* err, size_t err_size) {
  (void)state;
  dlfuse_status_t st = check_device(device_id, err, err_size);
  if (st == DLFUSE_STATUS_OK) free(ptr);
  return st;
}

static dlfuse_status_t copy(void* state, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset,
                            const void* src, size_t src_offset, size_t nbytes, void* stream, char* err,
                            size_t err_size) {
  (void)state;
  (void)stream; /* the CPU has no queue: a copy is complete when it returns */
  dlfuse_status_t st = check_device(device_id, err, err_size);
  if (st != DLFUSE_STATUS_OK) return st;
  if (kind < DLFUSE_COPY_HOST_TO_DEVICE || kind > DLFUSE_COPY_DEVICE_TO_DEVICE)
    return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: copy: kind: expected 1..3, got %d", (int)kind);
  if (nbytes == 0) return DLFUSE_STATUS_OK;
  if (!dst || !src) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: copy: NULL pointer");
  memmove((char*)dst + dst_offset, (const char*)src + src_offset, nbytes);
  return DLFUSE_STATUS_OK;
}

static dlfuse_status_t synchronize(void* state, int32_t device_id, void* stream, char* err, size_t err_size) {
  (void)state;
  (void)stream;
  return check_device(device_id, err, err_size);
}

/* ---- The kernel table and the descriptor ----------------------------------------- */

static const DLDataType kFloat32[] = {{kDLFloat, 32, 1}};

/* Designated initializers: a field that a later ABI minor appends (1.1 added `flags`) is
 * then zero, which always means "nothing new", and the source keeps compiling warning-free. */
static const dlfuse_kernel_t kKernels[] = {
    {.struct_size = sizeof(dlfuse_kernel_t),
     .op = DLFUSE_OP_ADD_MUL_ACTIVATION,
     .device_type = kDLCPU,
     .num_dtypes = 1,
     .dtypes = kFloat32,
     .priority = 10,
     .fn = add_mul_activation},
    {.struct_size = sizeof(dlfuse_kernel_t),
     .op = DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD,
     .device_type = kDLCPU,
     .num_dtypes = 1,
     .dtypes = kFloat32,
     .priority = 10,
     .fn = add_mul_activation_backward},
};

static dlfuse_status_t get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num, char* err,
                                   size_t err_size) {
  (void)state;
  if (!kernels || !num) return fail(err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT, "example: get_kernels: NULL");
  *kernels = kKernels;
  *num = (int32_t)(sizeof kKernels / sizeof kKernels[0]);
  return DLFUSE_STATUS_OK;
}

static const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                        DLFUSE_ABI_MAJOR,
                                        DLFUSE_ABI_MINOR,
                                        "example",
                                        EXAMPLE_VERSION,
                                        kDLCPU,
                                        open_plugin,
                                        close_plugin,
                                        get_kernels,
                                        device_count,
                                        alloc,
                                        release,
                                        copy,
                                        synchronize};

DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin; }

/* One small plugin, built four ways against the installed SDK to pin down the ABI's
 * versioning rules (docs/plugin-guide.md, "ABI evolution"):
 *   COMPAT_MINOR_DELTA=0, COMPAT_V1_0_SIZE  a plugin of ABI 1.0 exactly: it must load
 *                                           into every 1.x host;
 *   COMPAT_V1_1_SIZE                        a plugin of ABI 1.1 exactly (kernel entries
 *                                           without the fields 1.2 appended);
 *   COMPAT_MINOR_DELTA=1                    a plugin from a future 1.(x+1): a longer
 *                                           descriptor whose unknown tail the host ignores;
 *   COMPAT_MAJOR=2                          a plugin of another major: refused with a
 *                                           message naming both versions.
 * Its one kernel, add_mul_activation in float64 on compact [M, N] x, y and [N] bias,
 * proves the loaded plugin really runs. */
#include <dlfuse/plugin.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef COMPAT_NAME
#error "COMPAT_NAME must be set"
#endif
#ifndef COMPAT_MAJOR
#define COMPAT_MAJOR DLFUSE_ABI_MAJOR
#endif
#ifndef COMPAT_MINOR_DELTA
#define COMPAT_MINOR_DELTA 0
#endif
#if defined(COMPAT_V1_1_SIZE)
#define COMPAT_ABI_MINOR 1 /* built against the 1.1 headers */
#else
#define COMPAT_ABI_MINOR (DLFUSE_ABI_MINOR + COMPAT_MINOR_DELTA)
#endif

static int compact_2d(const DLTensor* t, int64_t m, int64_t n) {
  if (t->ndim != 2 || t->shape[0] != m || t->shape[1] != n) return 0;
  return !t->strides || (t->strides[1] == 1 && t->strides[0] == n);
}
static int compact_1d(const DLTensor* t, int64_t n) {
  return t->ndim == 1 && t->shape[0] == n && (!t->strides || t->strides[0] == 1);
}

static dlfuse_status_t add_mul_identity_relu(void* s, void* kd, const dlfuse_kernel_args_t* a) {
  (void)s;
  (void)kd;
  const DLTensor *x = a->inputs[0], *y = a->inputs[1], *bias = a->inputs[2];
  DLTensor* out = a->outputs[0];
  if (out->ndim != 2 || !compact_2d(out, out->shape[0], out->shape[1])) goto unsupported;
  const int64_t m = out->shape[0], n = out->shape[1];
  if (!compact_2d(x, m, n) || !compact_2d(y, m, n) || !compact_1d(bias, n)) goto unsupported;
  const dlfuse_attr_t* act = dlfuse_find_attr(a, DLFUSE_ATTR_ACTIVATION);
  const dlfuse_attr_t* mul = dlfuse_find_attr(a, DLFUSE_ATTR_MULTIPLIER);
  if (!act || (act->value.i64 != DLFUSE_ACT_IDENTITY && act->value.i64 != DLFUSE_ACT_RELU)) {
    snprintf(a->err, a->err_size, COMPAT_NAME ": activation: expected identity or relu");
    return DLFUSE_STATUS_UNSUPPORTED;
  }
  const double k = mul ? mul->value.f64 : 1.0;
  const double *px = (const double*)((const char*)x->data + x->byte_offset),
               *py = (const double*)((const char*)y->data + y->byte_offset),
               *pb = (const double*)((const char*)bias->data + bias->byte_offset);
  double* po = (double*)((char*)out->data + out->byte_offset);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double p = px[i * n + j] + pb[j] + k * py[i * n + j];
      po[i * n + j] = (act->value.i64 == DLFUSE_ACT_RELU && !(p > 0) && !isnan(p)) ? 0.0 : p;
    }
  return DLFUSE_STATUS_OK;
unsupported:
  snprintf(a->err, a->err_size, COMPAT_NAME ": layout: expected compact [M, N] x, y, out and [N] bias");
  return DLFUSE_STATUS_UNSUPPORTED;
}

static dlfuse_status_t open_plugin(const dlfuse_host_info_t* h, void** st, char* e, size_t n) {
  (void)h;
  (void)e;
  (void)n;
  *st = NULL;
  return DLFUSE_STATUS_OK;
}
static void close_plugin(void* st) { (void)st; }
static dlfuse_status_t count(void* st, int32_t* c, char* e, size_t n) {
  (void)st;
  (void)e;
  (void)n;
  *c = 1;
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t alloc(void* st, int32_t d, size_t bytes, void** p, char* e, size_t n) {
  (void)st;
  if (d != 0)
    return snprintf(e, n, COMPAT_NAME ": device_id: expected 0, got %d", (int)d), DLFUSE_STATUS_INVALID_ARGUMENT;
  *p = malloc(bytes ? bytes : 1);
  return *p ? DLFUSE_STATUS_OK : DLFUSE_STATUS_OUT_OF_MEMORY;
}
static dlfuse_status_t release(void* st, int32_t d, void* p, char* e, size_t n) {
  (void)st;
  (void)d;
  (void)e;
  (void)n;
  free(p);
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t copy(void* st, int32_t d, dlfuse_copy_kind_t k, void* dst, size_t doff, const void* src,
                            size_t soff, size_t bytes, void* stream, char* e, size_t n) {
  (void)st;
  (void)d;
  (void)k;
  (void)stream;
  (void)e;
  (void)n;
  if (bytes) memmove((char*)dst + doff, (const char*)src + soff, bytes);
  return DLFUSE_STATUS_OK;
}
static dlfuse_status_t sync(void* st, int32_t d, void* stream, char* e, size_t n) {
  (void)st;
  (void)d;
  (void)stream;
  (void)e;
  (void)n;
  return DLFUSE_STATUS_OK;
}

static const DLDataType kF64[] = {{kDLFloat, 64, 1}};
#if defined(COMPAT_V1_0_SIZE)
/* The kernel table as a 1.0 build lays it out: entries end at kernel_data (ABI 1.1
 * appended `flags`), so the host must step by the entries' own struct_size. */
typedef struct {
  size_t struct_size;
  const char* op;
  int32_t device_type;
  int32_t num_dtypes;
  const DLDataType* dtypes;
  int32_t priority;
  dlfuse_kernel_fn_t fn;
  void* kernel_data;
} kernel_v1_0_t;
static const kernel_v1_0_t kKernels[] = {
    {sizeof(kernel_v1_0_t), DLFUSE_OP_ADD_MUL_ACTIVATION, kDLCPU, 1, kF64, 5, add_mul_identity_relu, NULL}};
#elif defined(COMPAT_V1_1_SIZE)
/* The kernel table as a 1.1 build lays it out: entries end at `flags` (ABI 1.2 appended
 * `schema` and `dtype_priorities`). */
typedef struct {
  size_t struct_size;
  const char* op;
  int32_t device_type;
  int32_t num_dtypes;
  const DLDataType* dtypes;
  int32_t priority;
  dlfuse_kernel_fn_t fn;
  void* kernel_data;
  uint32_t flags;
} kernel_v1_1_t;
static const kernel_v1_1_t kKernels[] = {
    {sizeof(kernel_v1_1_t), DLFUSE_OP_ADD_MUL_ACTIVATION, kDLCPU, 1, kF64, 5, add_mul_identity_relu, NULL, 0}};
#else
static const dlfuse_kernel_t kKernels[] = {{sizeof(dlfuse_kernel_t), DLFUSE_OP_ADD_MUL_ACTIVATION, kDLCPU, 1, kF64, 5,
                                            add_mul_identity_relu, NULL, 0, NULL, NULL}};
#endif
static dlfuse_status_t get_kernels(void* st, const dlfuse_kernel_t** k, int32_t* num, char* e, size_t n) {
  (void)st;
  (void)e;
  (void)n;
  *k = (const dlfuse_kernel_t*)(const void*)kKernels;
  *num = 1;
  return DLFUSE_STATUS_OK;
}

/* A future minor appends fields; the host reads only the prefix it knows. */
typedef struct {
  dlfuse_plugin_t v1;
  void (*appended_in_a_later_minor)(void);
} future_plugin_t;
static void appended(void) {}

static const future_plugin_t kPlugin = {{
#if defined(COMPAT_V1_0_SIZE)
                                            offsetof(dlfuse_plugin_t, synchronize) + sizeof(void*),
#elif COMPAT_MINOR_DELTA > 0
                                            sizeof(future_plugin_t),
#else
                                            sizeof(dlfuse_plugin_t),
#endif
                                            COMPAT_MAJOR, COMPAT_ABI_MINOR, COMPAT_NAME, "1.0.0", kDLCPU, open_plugin,
                                            close_plugin, get_kernels, count, alloc, release, copy, sync},
                                        appended};

DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin.v1; }

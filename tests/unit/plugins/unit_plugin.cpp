// unit_plugin.cpp: the plugins of the registry's unit tests.
//
// One source, built several times with different compile definitions:
//   UNIT_PLUGIN_NAME  the descriptor's name (a string literal)
//   UNIT_PRIORITY     the priority of every kernel
//   UNIT_MODE         a UNIT_MODE_* behaviour (unit_record.h): good, or broken on purpose
//
// A good plugin serves the four ops of ABI 1 on kDLCPU for float32 with plain loops
// (and a third-party op, UNIT_OP_SCALE):
// the forward ops compute the documented result (NumPy broadcasting, strides,
// byte_offset honored); the backward ops only fill their present outputs with zeros
// (the unit tests check the registry, not the numerics). Every call is recorded in a
// global that the tests read through unit_plugin_record().
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "dlfuse/plugin.h"
#include "unit_record.h"

#ifndef UNIT_PLUGIN_NAME
#error "UNIT_PLUGIN_NAME must be defined"
#endif
#ifndef UNIT_PRIORITY
#define UNIT_PRIORITY -10
#endif
#ifndef UNIT_MODE
#define UNIT_MODE UNIT_MODE_GOOD
#endif
#ifndef UNIT_ABI_MINOR
#define UNIT_ABI_MINOR DLFUSE_ABI_MINOR  // the minor the descriptor declares
#endif

namespace {

std::mutex g_mu;
unit_record_t g_rec;  // zero-initialized (static storage)

void put_err(char* err, size_t err_size, const char* msg) {
  if (err && err_size > 0) std::snprintf(err, err_size, "%s", msg);
}

// ---- strided, broadcasting element access ----------------------------------------

int64_t numel(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

// Element offset (in elements) of `t` at the output index `idx` (out_ndim dims), with
// `t` aligned at the right and broadcast along its size-1 and missing dims.
int64_t bcast_offset(const DLTensor* t, const int64_t* idx, int out_ndim) {
  int64_t off = 0;
  int64_t compact = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    const int64_t stride = t->strides ? t->strides[i] : compact;
    compact *= t->shape[i];
    const int od = out_ndim - t->ndim + i;
    const int64_t ix = t->shape[i] == 1 ? 0 : idx[od];
    off += ix * stride;
  }
  return off;
}

float* base_f32(const DLTensor* t) { return reinterpret_cast<float*>(static_cast<char*>(t->data) + t->byte_offset); }

void unravel(int64_t linear, const DLTensor* t, int64_t* idx) {
  for (int i = t->ndim - 1; i >= 0; --i) {
    idx[i] = linear % t->shape[i];
    linear /= t->shape[i];
  }
}

double activate(int64_t act, double p) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return (p > 0.0 || std::isnan(p)) ? p : 0.0;
    case DLFUSE_ACT_SIGMOID: return 1.0 / (1.0 + std::exp(-p));
    case DLFUSE_ACT_TANH: return std::tanh(p);
    case DLFUSE_ACT_GELU_ERF: return 0.5 * p * (1.0 + std::erf(p / std::sqrt(2.0)));
    case DLFUSE_ACT_GELU_TANH: {
      const double u = std::sqrt(2.0 / M_PI) * (p + 0.044715 * p * p * p);
      return 0.5 * p * (1.0 + std::tanh(u));
    }
    case DLFUSE_ACT_SILU: return p / (1.0 + std::exp(-p));
    default: return std::nan("");
  }
}

void record_call(const dlfuse_kernel_args_t* a) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rec.kernel_calls += 1;
  std::snprintf(g_rec.op, sizeof g_rec.op, "%s", a->op ? a->op : "(null)");
  g_rec.args_struct_size = a->struct_size;
  g_rec.num_inputs = a->num_inputs;
  g_rec.num_outputs = a->num_outputs;
  g_rec.num_attrs = a->num_attrs;
  std::memset(g_rec.attrs, 0, sizeof g_rec.attrs);
  for (int i = 0; i < a->num_attrs && i < UNIT_MAX_ATTRS; ++i) g_rec.attrs[i] = a->attrs[i];
  g_rec.stream = a->stream;
  for (int i = 0; i < UNIT_MAX_TENSORS; ++i) {
    g_rec.input_data[i] = nullptr;
    g_rec.output_present[i] = 0;
    g_rec.output_data[i] = nullptr;
  }
  for (int i = 0; i < a->num_inputs && i < UNIT_MAX_TENSORS; ++i)
    g_rec.input_data[i] = a->inputs[i] ? a->inputs[i]->data : nullptr;
  for (int i = 0; i < a->num_outputs && i < UNIT_MAX_TENSORS; ++i) {
    g_rec.output_present[i] = a->outputs[i] != nullptr;
    g_rec.output_data[i] = a->outputs[i] ? a->outputs[i]->data : nullptr;
  }
  g_rec.err_buffer_ok = a->err != nullptr && a->err_size > 0;
}

dlfuse_status_t broken_kernel_behaviour(const dlfuse_kernel_args_t* args) {
#if UNIT_MODE == UNIT_MODE_THROWS
  (void)args;
  throw std::runtime_error(UNIT_THROW_MESSAGE);
#elif UNIT_MODE == UNIT_MODE_KERNEL_ERROR
  put_err(args->err, args->err_size, UNIT_KERNEL_ERROR_MESSAGE);
  return DLFUSE_STATUS_DEVICE_ERROR;
#elif UNIT_MODE == UNIT_MODE_BAD_STATUS
  put_err(args->err, args->err_size, "unit-bad-status: returned a status that does not exist");
  return static_cast<dlfuse_status_t>(UNIT_BAD_STATUS);
#elif UNIT_MODE == UNIT_MODE_SILENT_ERROR
  (void)args;
  return DLFUSE_STATUS_DEVICE_ERROR;
#elif UNIT_MODE == UNIT_MODE_UNTERMINATED
  if (args->err && args->err_size) std::memset(args->err, 'u', args->err_size);
  return DLFUSE_STATUS_DEVICE_ERROR;
#else
  (void)args;
  return DLFUSE_STATUS_OK;
#endif
}

// ---- kernels -----------------------------------------------------------------------

dlfuse_status_t k_add_mul_activation(void*, void*, const dlfuse_kernel_args_t* a) {
  record_call(a);
  if (dlfuse_status_t s = broken_kernel_behaviour(a)) return s;
  const dlfuse_attr_t* act = dlfuse_find_attr(a, DLFUSE_ATTR_ACTIVATION);
  const dlfuse_attr_t* mul = dlfuse_find_attr(a, DLFUSE_ATTR_MULTIPLIER);
  if (!act || !mul) {
    put_err(a->err, a->err_size, "unit plugin: ACTIVATION or MULTIPLIER not passed");
    return DLFUSE_STATUS_INTERNAL;
  }
  const DLTensor *x = a->inputs[0], *y = a->inputs[1], *bias = a->inputs[2];
  DLTensor* out = a->outputs[0];
  const int nd = out->ndim;
  std::vector<int64_t> idx(nd > 0 ? nd : 1, 0);
  const int64_t n = numel(out);
  for (int64_t l = 0; l < n; ++l) {
    unravel(l, out, idx.data());
    const double p = static_cast<double>(base_f32(x)[bcast_offset(x, idx.data(), nd)]) +
                     static_cast<double>(base_f32(bias)[bcast_offset(bias, idx.data(), nd)]) +
                     mul->value.f64 * static_cast<double>(base_f32(y)[bcast_offset(y, idx.data(), nd)]);
    base_f32(out)[bcast_offset(out, idx.data(), nd)] = static_cast<float>(activate(act->value.i64, p));
  }
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t k_matmul_add_relu(void*, void*, const dlfuse_kernel_args_t* a) {
  record_call(a);
  if (dlfuse_status_t s = broken_kernel_behaviour(a)) return s;
  const DLTensor *A = a->inputs[0], *B = a->inputs[1], *bias = a->inputs[2];
  DLTensor* out = a->outputs[0];
  const int nd = out->ndim;
  const int64_t K = A->shape[A->ndim - 1];
  std::vector<int64_t> idx(nd), ia(nd), ib(nd);
  const int64_t n = numel(out);
  for (int64_t l = 0; l < n; ++l) {
    unravel(l, out, idx.data());
    ia = idx;
    ib = idx;
    double acc = base_f32(bias)[bcast_offset(bias, idx.data(), nd)];
    for (int64_t k = 0; k < K; ++k) {
      ia[nd - 1] = k;  // a[..., m, k]
      ib[nd - 2] = k;  // b[..., k, n]
      acc += static_cast<double>(base_f32(A)[bcast_offset(A, ia.data(), nd)]) *
             static_cast<double>(base_f32(B)[bcast_offset(B, ib.data(), nd)]);
    }
    base_f32(out)[bcast_offset(out, idx.data(), nd)] = static_cast<float>((acc > 0.0 || std::isnan(acc)) ? acc : 0.0);
  }
  return DLFUSE_STATUS_OK;
}

// Backward kernels: record, then zero every present output.
dlfuse_status_t k_backward(void*, void*, const dlfuse_kernel_args_t* a) {
  record_call(a);
  if (dlfuse_status_t s = broken_kernel_behaviour(a)) return s;
  for (int i = 0; i < a->num_outputs; ++i) {
    DLTensor* t = a->outputs[i];
    if (!t) continue;
    std::vector<int64_t> idx(t->ndim > 0 ? t->ndim : 1, 0);
    const int64_t n = numel(t);
    for (int64_t l = 0; l < n; ++l) {
      unravel(l, t, idx.data());
      base_f32(t)[bcast_offset(t, idx.data(), t->ndim)] = 0.0f;
    }
  }
  return DLFUSE_STATUS_OK;
}

// The third-party op: out = 2 * in (same shapes; honors strides and byte_offset).
dlfuse_status_t k_scale(void*, void*, const dlfuse_kernel_args_t* a) {
  record_call(a);
  if (dlfuse_status_t s = broken_kernel_behaviour(a)) return s;
  if (a->num_inputs != 1 || a->num_outputs != 1 || !a->inputs[0] || !a->outputs[0] ||
      a->inputs[0]->ndim != a->outputs[0]->ndim) {
    put_err(a->err, a->err_size, "unit_scale: takes one input and one output of one shape");
    return DLFUSE_STATUS_INVALID_ARGUMENT;
  }
  const DLTensor* in = a->inputs[0];
  DLTensor* out = a->outputs[0];
  std::vector<int64_t> idx(out->ndim > 0 ? out->ndim : 1, 0);
  const int64_t n = numel(out);
  for (int64_t l = 0; l < n; ++l) {
    unravel(l, out, idx.data());
    base_f32(out)[bcast_offset(out, idx.data(), out->ndim)] =
        2.0f * base_f32(in)[bcast_offset(in, idx.data(), out->ndim)];
  }
  return DLFUSE_STATUS_OK;
}

const DLDataType kF32 = {kDLFloat, 32, 1};
#ifdef UNIT_F64_PRIORITY  // ABI 1.2: float32 at UNIT_PRIORITY and float64 at its own priority
const DLDataType kF32F64[2] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}};
const int32_t kDtypePriorities[2] = {UNIT_PRIORITY, UNIT_F64_PRIORITY};
#endif

dlfuse_kernel_t make_kernel(const char* op, dlfuse_kernel_fn_t fn) {
  dlfuse_kernel_t k;
  std::memset(&k, 0, sizeof k);
  k.struct_size = sizeof(dlfuse_kernel_t);
  k.op = op;
  k.device_type = UNIT_MODE == UNIT_MODE_KERNEL_UNKNOWN_DEVICE ? 4242 : kDLCPU;
  k.num_dtypes = 1;
  k.dtypes = &kF32;
  k.priority = UNIT_PRIORITY;
#ifdef UNIT_F64_PRIORITY
  k.num_dtypes = 2;
  k.dtypes = kF32F64;
  k.dtype_priorities = kDtypePriorities;
#endif
  k.fn = fn;
  k.kernel_data = nullptr;
  return k;
}

dlfuse_kernel_t with_flags(dlfuse_kernel_t k, uint32_t flags) {
  k.flags = flags;
  return k;
}

// UNIT_DECLARES (ABI 1.2) adds "unit_declared", an op of its own with a schema, served by
// k_backward (zero-filling): 1 the schema below; 2 the same with another default (a
// conflicting declaration); 3 a malformed one (rule MATMUL over one input); 4 a schema for a
// core op's name (matmul_add_activation, which this build's table does not list otherwise);
// 5 "unit_product_backward", whose outputs' shapes come from a shape callback; 6 the schema
// of 1 named "unit_Declared_9" (upper case and digits); 7 named "unit-declared" (a '-').
#ifdef UNIT_DECLARES
#if UNIT_DECLARES == 5
// grad_out, x, y -> grad_x (x's shape), grad_y (y's shape), both optional. The callback of
// each output checks that its own input broadcasts to grad_out, so the relation between x
// and grad_out is only ever checked by grad_x's callback.
const dlfuse_arg_schema_t kDeclaredInputs[] = {
    {"grad_out", 0, 0, 0, 0, -1}, {"x", 0, 0, 0, 0, -1}, {"y", 0, 0, 0, 0, -1}};
const dlfuse_arg_schema_t kDeclaredOutputs[] = {{"grad_x", DLFUSE_ARG_OPTIONAL, 0, DLFUSE_SHAPE_CALLBACK, 0x3u, -1},
                                                {"grad_y", DLFUSE_ARG_OPTIONAL, 0, DLFUSE_SHAPE_CALLBACK, 0x5u, -1}};

void shape_text(const DLTensor* t, char* buf, size_t size) {
  size_t n = size_t(std::snprintf(buf, size, "["));
  for (int d = 0; d < t->ndim && n < size; ++d)
    n += size_t(std::snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", static_cast<long long>(t->shape[d])));
  if (n < size) std::snprintf(buf + n, size - n, "]");
}

dlfuse_status_t backward_shape(const DLTensor* const* in, int32_t, const dlfuse_attr_t*, int32_t, int32_t output,
                               int32_t* ndim, int64_t* shape, char* err, size_t err_size) {
  const DLTensor* g = in[0];
  const DLTensor* t = in[1 + output];
  bool fits = t->ndim <= g->ndim;
  for (int d = 1; fits && d <= t->ndim; ++d) {
    const int64_t s = t->shape[t->ndim - d];
    fits = s == 1 || s == g->shape[g->ndim - d];
  }
  if (!fits) {
    char have[256], want[256];
    shape_text(t, have, sizeof have);
    shape_text(g, want, sizeof want);
    if (err && err_size)
      std::snprintf(err, err_size, "argument '%s': shape is %s; expected a shape that broadcasts to grad_out's %s",
                    output == 0 ? "x" : "y", have, want);
    return DLFUSE_STATUS_INVALID_ARGUMENT;
  }
  *ndim = t->ndim;
  for (int d = 0; d < t->ndim; ++d) shape[d] = t->shape[d];
  return DLFUSE_STATUS_OK;
}
const dlfuse_op_schema_t kDeclaredSchema = {sizeof(dlfuse_op_schema_t),
                                            "unit_product_backward",
                                            2,
                                            3,
                                            kDeclaredInputs,
                                            2,
                                            kDeclaredOutputs,
                                            0,
                                            nullptr,
                                            backward_shape,
                                            -1};
#else
const dlfuse_arg_schema_t kDeclaredInputs[] = {{"x", 0, 0, 0, 0, -1}, {"y", DLFUSE_ARG_OPTIONAL, 0, 0, 0, -1}};
// out: NumPy broadcast of x and y, may be x itself; sum: like x, or any shape broadcasting to it.
const dlfuse_arg_schema_t kDeclaredOutputs[] = {
    {"out", 0, 0, UNIT_DECLARES == 3 ? DLFUSE_SHAPE_MATMUL : DLFUSE_SHAPE_BROADCAST, UNIT_DECLARES == 3 ? 0x1u : 0x3u,
     0},
    {"sum", DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE, 0, DLFUSE_SHAPE_LIKE, 0x1u, -1}};
dlfuse_attr_schema_t factor_attr() {
  dlfuse_attr_schema_t a{};
  a.name = "FACTOR";
  a.default_value.key = 7;
  a.default_value.type = DLFUSE_ATTR_INT64;
  a.default_value.value.i64 = UNIT_DECLARES == 2 ? 3 : 2;
  a.min_value = 1;
  a.max_value = 4;
  return a;
}
const dlfuse_attr_schema_t kDeclaredAttrs[] = {factor_attr()};
const char* const kDeclaredName = UNIT_DECLARES == 4   ? DLFUSE_OP_MATMUL_ADD_ACTIVATION
                                  : UNIT_DECLARES == 6 ? "unit_Declared_9"
                                  : UNIT_DECLARES == 7 ? "unit-declared"
                                                       : "unit_declared";
const dlfuse_op_schema_t kDeclaredSchema = {sizeof(dlfuse_op_schema_t),
                                            kDeclaredName,
                                            2,
                                            2,
                                            kDeclaredInputs,
                                            2,
                                            kDeclaredOutputs,
                                            1,
                                            kDeclaredAttrs,
                                            nullptr,
                                            -1};
#endif
dlfuse_kernel_t declared_kernel() {
  dlfuse_kernel_t k = make_kernel(kDeclaredSchema.name, k_backward);
  k.schema = &kDeclaredSchema;
  return k;
}
#define UNIT_DECLARED_COUNT 1
#else
#define UNIT_DECLARED_COUNT 0
#endif

// UNIT_V1_1_OPS adds the four ops of ABI 1.1 (zero-filling, as k_backward) and the flag
// that lets add_mul_activation_backward take its ABI 1.1 input, `out`.
#ifdef UNIT_V1_1_OPS
#define UNIT_KERNEL_COUNT (UNIT_NUM_KERNELS + 4 + UNIT_DECLARED_COUNT)
#define UNIT_AMA_BACKWARD_FLAGS DLFUSE_KERNEL_TAKES_V1_1_INPUTS
#else
#define UNIT_KERNEL_COUNT (UNIT_NUM_KERNELS + UNIT_DECLARED_COUNT)
#define UNIT_AMA_BACKWARD_FLAGS 0u
#endif

const dlfuse_kernel_t g_kernels[UNIT_KERNEL_COUNT] = {
    make_kernel(DLFUSE_OP_ADD_MUL_ACTIVATION, k_add_mul_activation),
#if UNIT_MODE == UNIT_MODE_DUP_OP
    make_kernel(DLFUSE_OP_ADD_MUL_ACTIVATION, k_add_mul_activation),
#else
    with_flags(make_kernel(DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, k_backward), UNIT_AMA_BACKWARD_FLAGS),
#endif
    make_kernel(DLFUSE_OP_MATMUL_ADD_RELU, k_matmul_add_relu),
    make_kernel(DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, k_backward),
    make_kernel(UNIT_OP_SCALE, k_scale),
#ifdef UNIT_V1_1_OPS
    make_kernel(DLFUSE_OP_MATMUL_ADD_ACTIVATION, k_backward),
    make_kernel(DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, k_backward),
    make_kernel(DLFUSE_OP_MATMUL_ADD_RESIDUAL, k_backward),
    make_kernel(DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, k_backward),
#endif
#ifdef UNIT_DECLARES
    declared_kernel(),
#endif
};

int g_state_token = 0;  // open() hands out its address as the state

// ---- plugin functions --------------------------------------------------------------

dlfuse_status_t p_open(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) {
#if UNIT_MODE == UNIT_MODE_ABI_MAJOR2 || UNIT_MODE == UNIT_MODE_SHORT_STRUCT ||                                    \
    UNIT_MODE == UNIT_MODE_NULL_REQUIRED || UNIT_MODE == UNIT_MODE_NULL_NAME || UNIT_MODE == UNIT_MODE_V2_ENTRY || \
    UNIT_MODE == UNIT_MODE_BAD_NAME || UNIT_MODE == UNIT_MODE_NULL_FREE
  setenv(UNIT_OPENED_ENV_PREFIX UNIT_PLUGIN_NAME, "1", 1);  // must never happen
#endif
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_rec.open_calls += 1;
    if (host) {
      g_rec.host_struct_size = host->struct_size;
      g_rec.host_abi_major = host->abi_major;
      g_rec.host_abi_minor = host->abi_minor;
      if (DLFUSE_HAS_FIELD(host, dlfuse_host_info_t, plugin_path) && host->plugin_path)
        std::snprintf(g_rec.host_plugin_path, sizeof g_rec.host_plugin_path, "%s", host->plugin_path);
    }
  }
#if UNIT_MODE == UNIT_MODE_OPEN_THROWS
  (void)state;
  (void)err;
  (void)err_size;
  throw std::runtime_error(UNIT_OPEN_THROW_MESSAGE);
#elif UNIT_MODE == UNIT_MODE_OPEN_FAILS
  (void)state;
  put_err(err, err_size, UNIT_OPEN_FAIL_REASON);
  return DLFUSE_STATUS_DEVICE_ERROR;
#else
  (void)err;
  (void)err_size;
  *state = &g_state_token;
  return DLFUSE_STATUS_OK;
#endif
}

void p_close(void* state) {
  if (state != &g_state_token) return;  // a wrong state would be a registry bug
  std::lock_guard<std::mutex> lock(g_mu);
  g_rec.close_calls += 1;
}

dlfuse_status_t p_get_kernels(void* state, const dlfuse_kernel_t** kernels, int32_t* num_kernels, char* err,
                              size_t err_size) {
  (void)state;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_rec.get_kernels_calls += 1;
  }
#if UNIT_MODE == UNIT_MODE_KERNELS_FAIL
  (void)kernels;
  (void)num_kernels;
  put_err(err, err_size, UNIT_KERNELS_FAIL_REASON);
  return DLFUSE_STATUS_INTERNAL;
#elif UNIT_MODE == UNIT_MODE_NULL_KERNELS
  (void)err;
  (void)err_size;
  *kernels = nullptr;
  *num_kernels = UNIT_NUM_KERNELS;
  return DLFUSE_STATUS_OK;
#elif UNIT_MODE == UNIT_MODE_NEGATIVE_KERNELS
  (void)err;
  (void)err_size;
  *kernels = g_kernels;
  *num_kernels = -1;
  return DLFUSE_STATUS_OK;
#elif UNIT_MODE == UNIT_MODE_KERNELS_THROW
  (void)kernels;
  (void)num_kernels;
  (void)err;
  (void)err_size;
  throw std::runtime_error(UNIT_KERNELS_THROW_MESSAGE);
#elif UNIT_MODE >= UNIT_MODE_KERNEL_NULL_OP && UNIT_MODE <= UNIT_MODE_KERNEL_MIXED_SIZE
  // Entry 1 of an otherwise good table has one bad field.
  (void)err;
  (void)err_size;
  static dlfuse_kernel_t broken[UNIT_NUM_KERNELS];
  std::memcpy(broken, g_kernels, sizeof broken);
#if UNIT_MODE == UNIT_MODE_KERNEL_NULL_OP
  broken[1].op = nullptr;
#elif UNIT_MODE == UNIT_MODE_KERNEL_NULL_FN
  broken[1].fn = nullptr;
#elif UNIT_MODE == UNIT_MODE_KERNEL_NO_DTYPES
  broken[1].num_dtypes = 0;
#elif UNIT_MODE == UNIT_MODE_KERNEL_CUDA
  broken[1].device_type = kDLCUDA;
#else
  broken[1].struct_size = sizeof(dlfuse_kernel_t) - sizeof(void*);
#endif
  *kernels = broken;
  *num_kernels = UNIT_NUM_KERNELS;
  return DLFUSE_STATUS_OK;
#elif defined(UNIT_KERNEL_LAYOUT_V1_1)
  // The table a 1.1 build makes: entries of 1.1's sizeof(dlfuse_kernel_t), which ends after
  // `flags` (padded to 64 bytes), without the fields 1.2 appended.
  (void)err;
  (void)err_size;
  constexpr size_t kV11Size = 64;
  static_assert(offsetof(dlfuse_kernel_t, schema) == kV11Size, "1.2 appended after 1.1's padded end");
  alignas(dlfuse_kernel_t) static unsigned char packed[UNIT_KERNEL_COUNT * kV11Size];
  for (int i = 0; i < UNIT_KERNEL_COUNT; ++i) {
    dlfuse_kernel_t k = g_kernels[i];
    k.struct_size = kV11Size;
    std::memcpy(packed + size_t(i) * kV11Size, &k, kV11Size);
  }
  *kernels = reinterpret_cast<const dlfuse_kernel_t*>(packed);
  *num_kernels = UNIT_KERNEL_COUNT;
  return DLFUSE_STATUS_OK;
#else
  (void)err;
  (void)err_size;
  *kernels = g_kernels;
  *num_kernels = UNIT_KERNEL_COUNT;
  return DLFUSE_STATUS_OK;
#endif
}

dlfuse_status_t p_device_count(void*, int32_t* count, char* err, size_t err_size) {
#if UNIT_MODE == UNIT_MODE_DEVICE_COUNT_FAILS
  put_err(err, err_size, UNIT_COUNT_FAIL_REASON);
  return DLFUSE_STATUS_DEVICE_ERROR;
#else
  (void)err;
  (void)err_size;
  *count = UNIT_MODE == UNIT_MODE_NO_DEVICE ? 0 : UNIT_MODE == UNIT_MODE_DEVICE_COUNT_NEGATIVE ? -1 : 1;
  return DLFUSE_STATUS_OK;
#endif
}

dlfuse_status_t p_alloc(void*, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) {
  if (device_id != 0) {
    put_err(err, err_size, "unit plugin: only device 0");
    return DLFUSE_STATUS_NOT_FOUND;
  }
  const size_t rounded = ((nbytes + 63) / 64) * 64;
  *ptr = std::aligned_alloc(64, rounded ? rounded : 64);
  if (!*ptr) {
    put_err(err, err_size, "unit plugin: out of memory");
    return DLFUSE_STATUS_OUT_OF_MEMORY;
  }
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t p_free(void*, int32_t, void* ptr, char*, size_t) {
  std::free(ptr);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t p_copy(void*, int32_t, dlfuse_copy_kind_t, void* dst, size_t dst_offset, const void* src,
                       size_t src_offset, size_t nbytes, void*, char*, size_t) {
  std::memcpy(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t p_synchronize(void*, int32_t, void*, char*, size_t) { return DLFUSE_STATUS_OK; }

// A descriptor followed by a field a future minor version might append.
struct extended_plugin_t {
  dlfuse_plugin_t base;
  void* future_field;
  uint64_t future_flags;
};

extended_plugin_t make_descriptor() {
  extended_plugin_t e;
  std::memset(&e, 0, sizeof e);
  dlfuse_plugin_t& p = e.base;
  p.struct_size = sizeof(dlfuse_plugin_t);
  p.abi_major = DLFUSE_ABI_MAJOR;
  p.abi_minor = UNIT_ABI_MINOR;
  p.name = UNIT_PLUGIN_NAME;
  p.version = "1.2.3-unit";
  p.device_type = kDLCPU;
  p.open = p_open;
  p.close = p_close;
  p.get_kernels = p_get_kernels;
  p.device_count = p_device_count;
  p.alloc = p_alloc;
  p.free = p_free;
  p.copy = p_copy;
  p.synchronize = p_synchronize;
#if UNIT_MODE == UNIT_MODE_ABI_MAJOR2
  p.abi_major = 2;
#elif UNIT_MODE == UNIT_MODE_SHORT_STRUCT
  p.struct_size = offsetof(dlfuse_plugin_t, open);
#elif UNIT_MODE == UNIT_MODE_NEWER_MINOR
  p.abi_minor = DLFUSE_ABI_MINOR + 1;
  p.struct_size = sizeof(extended_plugin_t);
  e.future_field = reinterpret_cast<void*>(static_cast<uintptr_t>(0xdeadbeef));
  e.future_flags = ~0ull;
#elif UNIT_MODE == UNIT_MODE_NULL_REQUIRED
  p.get_kernels = nullptr;
#elif UNIT_MODE == UNIT_MODE_NULL_NAME
  p.name = nullptr;
#elif UNIT_MODE == UNIT_MODE_BAD_NAME
  p.name = "Bad-Name/../x";
#elif UNIT_MODE == UNIT_MODE_NULL_FREE
  p.free = nullptr;
#elif UNIT_MODE == UNIT_MODE_KERNEL_UNKNOWN_DEVICE
  p.device_type = 4242;
#endif
  return e;
}

const extended_plugin_t g_descriptor = make_descriptor();

}  // namespace

extern "C" {

#if UNIT_MODE == UNIT_MODE_NO_ENTRY
// No entry symbol at all (the descriptor is reachable only through this test hook).
DLFUSE_EXPORT const dlfuse_plugin_t* unit_plugin_descriptor(void) { return &g_descriptor.base; }
#elif UNIT_MODE == UNIT_MODE_V2_ENTRY
// The entry of another ABI major.
DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v2(void) { return &g_descriptor.base; }
#else
DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) {
#if UNIT_MODE == UNIT_MODE_NULL_ENTRY
  return nullptr;
#elif UNIT_MODE == UNIT_MODE_ENTRY_THROWS
  throw std::runtime_error(UNIT_ENTRY_THROW_MESSAGE);
#else
  return &g_descriptor.base;
#endif
}
#endif

DLFUSE_EXPORT void unit_plugin_record(unit_record_t* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  *out = g_rec;
}

DLFUSE_EXPORT void unit_plugin_reset(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rec.kernel_calls = 0;
  std::memset(g_rec.op, 0, sizeof g_rec.op);
  g_rec.args_struct_size = 0;
  g_rec.num_inputs = g_rec.num_outputs = g_rec.num_attrs = 0;
  std::memset(g_rec.attrs, 0, sizeof g_rec.attrs);
  g_rec.stream = nullptr;
  std::memset(g_rec.input_data, 0, sizeof g_rec.input_data);
  std::memset(g_rec.output_present, 0, sizeof g_rec.output_present);
  std::memset(g_rec.output_data, 0, sizeof g_rec.output_data);
  g_rec.err_buffer_ok = 0;
}

}  // extern "C"

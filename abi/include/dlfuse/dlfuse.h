/* dlfuse/dlfuse.h: the host API of libdlfuse, for applications in any language.
 *
 *   dlfuse_registry_t reg;
 *   dlfuse_registry_create(NULL, &reg);          // discovers plugins (see below)
 *   dlfuse_matmul_add_relu(reg, &a, &b, &bias, &out, NULL);
 *   dlfuse_registry_destroy(reg);
 *
 * Conventions:
 *  - Every function returns a dlfuse_status_t. On failure the calling thread's last
 *    error (dlfuse_last_error) names the argument, the expected and the actual value.
 *    Success leaves the last error as it was. Nothing throws, nothing aborts.
 *  - Tensors are DLTensor views owned by the caller; outputs are caller-allocated.
 *    NULL strides mean compact row-major (accepted although DLPack >= 1.2 requires
 *    strides). Every call is validated before a plugin sees it (docs/abi.md, "Validation").
 *  - Strings returned by the registry live until the registry is destroyed.
 *  - All functions are thread-safe. Loading is serialized; calls do not lock.
 */
#ifndef DLFUSE_DLFUSE_H_
#define DLFUSE_DLFUSE_H_

#include "dlfuse/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlfuse_registry* dlfuse_registry_t; /* a set of loaded plugins */
typedef struct dlfuse_op* dlfuse_op_t;             /* a cached op look-up, owned by its registry */

/* ---- version, errors ---------------------------------------------------------- */

DLFUSE_EXPORT void dlfuse_abi_version(uint32_t* major, uint32_t* minor);
/* The calling thread's last error message; "" if none. Valid until the thread's next
 * failing dlfuse call. */
DLFUSE_EXPORT const char* dlfuse_last_error(void);
DLFUSE_EXPORT const char* dlfuse_status_string(dlfuse_status_t status);

/* ---- registry ----------------------------------------------------------------- */

/* Where dlfuse_registry_create looks for plugins, in this order. Within one folder
 * files named libdlfuse_*.so are loaded in name order. Discovery never searches the
 * current directory (a relative entry is listed as refused; docs/abi.md). */
typedef enum dlfuse_discovery_flags_t {
  DLFUSE_DISCOVER_NONE = 0,
  DLFUSE_DISCOVER_ENV = 1,         /* folders or files in $DLFUSE_PLUGIN_PATH (':'-separated) */
  DLFUSE_DISCOVER_INSTALL_DIR = 2, /* <dir of libdlfuse>/dlfuse/plugins */
  DLFUSE_DISCOVER_DEFAULT = 3
} dlfuse_discovery_flags_t;

/* struct_size = sizeof(dlfuse_registry_options_t); below 24 (LP64, ABI 1.0) is
 * INVALID_ARGUMENT, above is accepted (docs/abi.md, "Host structs"). */
typedef struct dlfuse_registry_options_t {
  size_t struct_size;
  uint32_t discovery;       /* dlfuse_discovery_flags_t bits */
  const char* plugin_paths; /* extra ':'-separated folders or files, loaded first; may be NULL */
} dlfuse_registry_options_t;

/* options may be NULL: DLFUSE_DISCOVER_DEFAULT. Plugins that fail to load are kept in
 * the list as unavailable, with the reason; they never fail creation. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_create(const dlfuse_registry_options_t* options,
                                                     dlfuse_registry_t* registry);
/* Closes every plugin. No call on this registry may be in flight. NULL is ignored. */
DLFUSE_EXPORT void dlfuse_registry_destroy(dlfuse_registry_t registry);

/* Load one plugin file. On failure the file is still listed as unavailable and the
 * status says why: NOT_FOUND (no file at path), LOAD_FAILED (dlopen or the entry symbol
 * failed), ABI_MISMATCH, INVALID_ARGUMENT (a broken descriptor or kernel table),
 * UNAVAILABLE (open() failed or no device), INTERNAL (the plugin threw).
 * *index (may be NULL) receives the plugin's index either way. Loading the same file
 * again returns its first index and outcome; another file whose plugin name is already
 * loaded is refused with INVALID_ARGUMENT. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_load(dlfuse_registry_t registry, const char* path, int32_t* index);

DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_plugin_count(dlfuse_registry_t registry, int32_t* count);

/* The info structs are filled by the registry up to min(struct_size, its sizeof); a
 * struct_size short of the ABI 1.0 fields (68 for plugin_info, 36 for kernel_info on
 * LP64) is INVALID_ARGUMENT and nothing is written (docs/abi.md, "Host structs"). */
typedef struct dlfuse_plugin_info_t {
  size_t struct_size;   /* set by the caller to sizeof(dlfuse_plugin_info_t) */
  const char* name;     /* the plugin's name, or the file's stem if it did not load */
  const char* version;  /* "" if it did not load */
  const char* path;     /* the file */
  int32_t available;    /* 1: open() succeeded and kernels dispatch to it */
  const char* reason;   /* why not available; "" if available */
  int32_t device_type;  /* a DLDeviceType; 0 if it did not load */
  int32_t device_count; /* 0 if unavailable */
  uint32_t abi_major;   /* as the plugin declared; 0 if it did not load */
  uint32_t abi_minor;
  int32_t num_kernels; /* 0 if unavailable */
} dlfuse_plugin_info_t;

/* plugin outside 0 .. plugin_count-1: NOT_FOUND. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_plugin_info(dlfuse_registry_t registry, int32_t plugin,
                                                          dlfuse_plugin_info_t* info);

typedef struct dlfuse_kernel_info_t {
  size_t struct_size; /* set by the caller to sizeof(dlfuse_kernel_info_t) */
  const char* op;
  int32_t device_type;
  int32_t num_dtypes;
  const DLDataType* dtypes;
  int32_t priority;
  uint32_t flags;                  /* ABI 1.1: the kernel's DLFUSE_KERNEL_* bits (dlfuse/plugin.h) */
  const int32_t* dtype_priorities; /* ABI 1.2: num_dtypes priorities, the one for each of
                                      dtypes (each is `priority` unless the plugin gave its own) */
} dlfuse_kernel_info_t;

/* plugin or kernel (0 .. num_kernels-1) out of range: NOT_FOUND. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_kernel_info(dlfuse_registry_t registry, int32_t plugin, int32_t kernel,
                                                          dlfuse_kernel_info_t* info);

/* Dispatch order for (op, device type, dtype): plugins preferred by the user first (the
 * latest dlfuse_registry_prefer call first), then higher kernel priority for that dtype
 * (dlfuse_kernel_info_t.dtype_priorities), then load order. op may be NULL for every op; plugin_name NULL clears the
 * preferences for op (NULL: all). The env var DLFUSE_PREFER (comma-separated plugin names) is applied at creation as if
 * passed to prefer() for every op, first name winning. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_prefer(dlfuse_registry_t registry, const char* op,
                                                     const char* plugin_name);

/* ---- generic call --------------------------------------------------------------- */

/* Look an op up once; the handle stays valid until the registry is destroyed and
 * follows later loads and preferences. An op no plugin offers is NOT_FOUND. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_get(dlfuse_registry_t registry, const char* op_name, dlfuse_op_t* op);

/* Run an op: inputs, outputs (an entry may be NULL where the op allows it), attributes
 * (may be NULL when num_attrs is 0; missing ones take their defaults), and a stream for
 * the device of the tensors (NULL: the plugin's default). The plugin is picked by the
 * tensors' device type and dtype. A bad argument is INVALID_ARGUMENT (a device_id past
 * the device count too); no kernel for the device type and dtype is UNSUPPORTED. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_call(dlfuse_op_t op, const DLTensor* const* inputs, int32_t num_inputs,
                                             DLTensor* const* outputs, int32_t num_outputs, const dlfuse_attr_t* attrs,
                                             int32_t num_attrs, void* stream);

/* The plugin that op_call would run for this device type and dtype, or NOT_FOUND /
 * UNSUPPORTED. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_resolve(dlfuse_op_t op, int32_t device_type, DLDataType dtype, int32_t* plugin);

/* ---- ABI 1.2: op schemas and output inference (docs/abi.md, "Op schemas") ------------ */

/* The ops with a schema: the core ops (dlfuse/ops.def, in that order, indices
 * 0..DLFUSE_NUM_CORE_OPS-1), then the ops the loaded plugins declared, in load order. The
 * count grows when a later load declares ops; an index keeps its op. An op a plugin offers
 * without declaring it has no schema and is not listed. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_op_count(dlfuse_registry_t registry, int32_t* count);

/* Schema number `index` (0..count-1). The caller sets schema->struct_size to
 * sizeof(dlfuse_op_schema_t); the registry fills what fits. Every pointer in it lives as
 * long as the registry. NOT_FOUND for an index out of range. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_registry_op_schema(dlfuse_registry_t registry, int32_t index,
                                                        dlfuse_op_schema_t* schema);

/* The schema of a looked-up op, as dlfuse_registry_op_schema. NOT_FOUND when the op has
 * none (a plugin offers it without declaring it). */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_schema(dlfuse_op_t op, dlfuse_op_schema_t* schema);

/* The shapes and dtypes the outputs of a call would have, from its inputs and attributes,
 * so that a caller can allocate them without knowing the op:
 *  - inputs: num_inputs views in the schema's order (NULL where optional and absent); only
 *    ndim, shape and dtype are read, so data may be NULL. num_inputs is the schema's count
 *    (or the count of the minor that added the op, as dlfuse_op_call accepts).
 *  - attrs: as dlfuse_op_call (missing ones take their defaults).
 *  - num_outputs: the schema's output count; ndims[num_outputs], dtypes[num_outputs] and
 *    shapes[num_outputs * DLFUSE_MAX_NDIM] receive output i's ndim, dtype and shape at
 *    shapes + i * DLFUSE_MAX_NDIM.
 * Every output is inferred, optional ones included. An output flagged DLFUSE_ARG_REDUCIBLE
 * gets the widest shape its op accepts there (a gradient not yet summed to a broadcast
 * input's shape); pass a narrower one to dlfuse_op_call where the op allows it. The dtype is
 * the inputs' dtype. Inference also applies the op's own rules on shapes, optional inputs
 * and attributes, with every output at its inferred shape: inputs a call would refuse for
 * those (a bias that does not broadcast to the output, both of `out` and `pre`) are
 * INVALID_ARGUMENT, with the message naming the argument. It reads no data: dlfuse_op_call
 * still checks the call in full (devices, strides, overlaps). */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_infer_outputs(dlfuse_op_t op, const DLTensor* const* inputs, int32_t num_inputs,
                                                      const dlfuse_attr_t* attrs, int32_t num_attrs,
                                                      int32_t num_outputs, int32_t* ndims, int64_t* shapes,
                                                      DLDataType* dtypes);

/* What a binding keeps from a call of `op` for its backward, the op "<op>_backward" of the
 * same registry (*backward receives its handle), given the call's attributes and the device
 * type and dtype of its tensors: bit i of *backward_inputs is set for each input i of the
 * backward that the binding passes (bit 0, grad_out, always; each other one is the call's
 * input or output of that name, which the binding keeps), and bit k of *forward_outputs for
 * each output k of `op` the call must write (every required one, and each optional one the
 * backward reads). By default the backward reads every input or output of the call named
 * like one of its inputs; add_mul_activation and matmul_add_activation read `out` instead of
 * their inputs or `pre` where the activation's derivative is a function of its output
 * (docs/abi.md, "Backward plans"). NOT_FOUND where no plugin offers "<op>_backward" or
 * either op has no schema. ABI 1.2. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_op_backward_plan(dlfuse_op_t op, const dlfuse_attr_t* attrs, int32_t num_attrs,
                                                      int32_t device_type, DLDataType dtype, dlfuse_op_t* backward,
                                                      uint32_t* backward_inputs, uint32_t* forward_outputs);

/* ---- the typed kernels (docs/ops.md) ------------------------------------------------- */

/* out = relu(a @ b + bias). a [..., M, K], b [..., K, N], bias broadcastable to out
 * [batch..., M, N]. allow_tf32 = 0 is exact fp32. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_relu(dlfuse_registry_t registry, const DLTensor* a, const DLTensor* b,
                                                     const DLTensor* bias, DLTensor* out, int32_t allow_tf32,
                                                     void* stream);

/* Gradients of matmul_add_relu from grad_out and the saved a, b, out. Any of grad_a,
 * grad_b, grad_bias may be NULL; each present one has its input's shape. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_relu_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                              const DLTensor* a, const DLTensor* b, const DLTensor* out,
                                                              DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
                                                              int32_t allow_tf32, void* stream);

/* out = act(x + bias + multiplier * y), NumPy broadcasting; out may be exactly x: equal
 * data, byte_offset, dtype, shape, and strides of every dim of size > 1 (in place). */
DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation(dlfuse_registry_t registry, const DLTensor* x,
                                                        const DLTensor* y, const DLTensor* bias, double multiplier,
                                                        dlfuse_activation_t activation, DLTensor* out, void* stream);

/* Gradients of add_mul_activation from grad_out and the forward's inputs (the
 * pre-activation is recomputed). Any of grad_x, grad_y, grad_bias may be NULL. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                 const DLTensor* x, const DLTensor* y,
                                                                 const DLTensor* bias, double multiplier,
                                                                 dlfuse_activation_t activation, DLTensor* grad_x,
                                                                 DLTensor* grad_y, DLTensor* grad_bias, void* stream);

/* ---- added in ABI 1.1 (a 1.0 plugin serves none of these; docs/abi.md) -------------- */

/* out = act(a @ b + bias), shapes as matmul_add_relu. pre (may be NULL) receives
 * a @ b + bias, which the backward of GELU and SiLU needs. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation(dlfuse_registry_t registry, const DLTensor* a,
                                                           const DLTensor* b, const DLTensor* bias,
                                                           dlfuse_activation_t activation, DLTensor* out, DLTensor* pre,
                                                           int32_t allow_tf32, void* stream);

/* Gradients of matmul_add_activation from grad_out, a, b and exactly one of out and pre
 * (the other NULL; out only for IDENTITY, RELU, SIGMOID, TANH). Any of grad_a, grad_b,
 * grad_bias may be NULL; grad_bias's shape is the forward's bias shape. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_activation_backward(
    dlfuse_registry_t registry, const DLTensor* grad_out, const DLTensor* a, const DLTensor* b, const DLTensor* out,
    const DLTensor* pre, dlfuse_activation_t activation, DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias,
    int32_t allow_tf32, void* stream);

/* out = a @ b + bias + residual; bias and residual broadcast to out; out may be exactly
 * residual (in place; "exactly" as for add_mul_activation's x). */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual(dlfuse_registry_t registry, const DLTensor* a,
                                                         const DLTensor* b, const DLTensor* bias,
                                                         const DLTensor* residual, DLTensor* out, int32_t allow_tf32,
                                                         void* stream);

/* Gradients of matmul_add_residual. Any output may be NULL; grad_bias's and
 * grad_residual's shapes are the forward's bias and residual shapes. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_matmul_add_residual_backward(dlfuse_registry_t registry, const DLTensor* grad_out,
                                                                  const DLTensor* a, const DLTensor* b,
                                                                  DLTensor* grad_a, DLTensor* grad_b,
                                                                  DLTensor* grad_bias, DLTensor* grad_residual,
                                                                  int32_t allow_tf32, void* stream);

/* Gradients of add_mul_activation from grad_out and the forward's out, for IDENTITY,
 * RELU, SIGMOID and TANH: x, y and bias are not needed. grad_x, grad_y, grad_bias
 * (each may be NULL) have the forward's x, y and bias shapes. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_add_mul_activation_backward_from_out(
    dlfuse_registry_t registry, const DLTensor* grad_out, const DLTensor* out, double multiplier,
    dlfuse_activation_t activation, DLTensor* grad_x, DLTensor* grad_y, DLTensor* grad_bias, void* stream);

/* ---- device services (served by the first available plugin for the device type) ----
 * No plugin for device.device_type: NOT_FOUND; device_id past its count: INVALID_ARGUMENT.
 * dlfuse_device_count of a type no plugin serves is OK with *count = 0. */

DLFUSE_EXPORT dlfuse_status_t dlfuse_device_count(dlfuse_registry_t registry, int32_t device_type, int32_t* count);
/* On CPU: host memory aligned to at least 64 bytes. nbytes 0 gives a unique pointer. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_device_alloc(dlfuse_registry_t registry, DLDevice device, size_t nbytes,
                                                  void** ptr);
/* ptr NULL: OK, nothing checked (as free(NULL)). */
DLFUSE_EXPORT dlfuse_status_t dlfuse_device_free(dlfuse_registry_t registry, DLDevice device, void* ptr);
/* Copies as in dlfuse/plugin.h: host memory is done with when the call returns. */
DLFUSE_EXPORT dlfuse_status_t dlfuse_device_copy(dlfuse_registry_t registry, DLDevice device, dlfuse_copy_kind_t kind,
                                                 void* dst, size_t dst_offset, const void* src, size_t src_offset,
                                                 size_t nbytes, void* stream);
DLFUSE_EXPORT dlfuse_status_t dlfuse_device_synchronize(dlfuse_registry_t registry, DLDevice device, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLFUSE_DLFUSE_H_ */

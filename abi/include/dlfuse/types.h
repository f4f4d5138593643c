/* dlfuse/types.h: what the host API and the plugin API share.
 *
 * Every struct that crosses the boundary starts with `size_t struct_size`, set by
 * whoever fills it to sizeof() in *their* build. A reader never looks past
 * struct_size, so fields are only ever appended (see docs/abi.md, "Evolution").
 */
#ifndef DLFUSE_TYPES_H_
#define DLFUSE_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1
#error "dlfuse needs DLPack >= 1.0 (see docs/abi.md for where the header comes from)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version. Major: incompatible change, refused at load. Minor: fields or
 * enum values appended; older plugins keep loading. */
#define DLFUSE_ABI_MAJOR 1
#define DLFUSE_ABI_MINOR 2

/* Exported from libdlfuse and from plugins with default visibility. */
#if defined(_WIN32)
#define DLFUSE_EXPORT __declspec(dllexport)
#else
#define DLFUSE_EXPORT __attribute__((visibility("default")))
#endif

/* True when a struct filled by the other side is long enough to hold `field`. */
#define DLFUSE_HAS_FIELD(ptr, type, field) ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* One status enum for every call. Anything but OK comes with a message. docs/abi.md,
 * "Status of each failed check", gives the status of every check. */
typedef enum dlfuse_status_t {
  DLFUSE_STATUS_OK = 0,
  DLFUSE_STATUS_INVALID_ARGUMENT = 1, /* a value outside what its argument allows: a tensor,
                                         attribute, pointer, struct_size, device_id past
                                         the device count */
  DLFUSE_STATUS_UNSUPPORTED = 2,      /* valid, but no kernel for this op / device / dtype */
  DLFUSE_STATUS_NOT_FOUND = 3,        /* names nothing: op, plugin name, plugin or kernel
                                         index, device type of a service, file to load */
  DLFUSE_STATUS_ABI_MISMATCH = 4,     /* plugin built for another ABI major */
  DLFUSE_STATUS_LOAD_FAILED = 5,      /* dlopen or the entry symbol failed */
  DLFUSE_STATUS_UNAVAILABLE = 6,      /* plugin loaded but its open() failed */
  DLFUSE_STATUS_OUT_OF_MEMORY = 7,    /* host or device allocation failed */
  DLFUSE_STATUS_DEVICE_ERROR = 8,     /* the device runtime reported an error */
  DLFUSE_STATUS_INTERNAL = 9          /* a bug: a plugin threw, broke a rule, ... */
} dlfuse_status_t;

/* The activations of add_mul_activation and matmul_add_activation (docs/ops.md gives the
 * formulas). IDENTITY, RELU, SIGMOID and TANH have a derivative that `out` alone gives. */
typedef enum dlfuse_activation_t {
  DLFUSE_ACT_IDENTITY = 0,
  DLFUSE_ACT_RELU = 1,
  DLFUSE_ACT_SIGMOID = 2,
  DLFUSE_ACT_TANH = 3,
  DLFUSE_ACT_GELU_ERF = 4,
  DLFUSE_ACT_GELU_TANH = 5,
  DLFUSE_ACT_SILU = 6
} dlfuse_activation_t;
#define DLFUSE_ACT_COUNT 7

/* Attribute keys. An op documents which keys it takes (docs/ops.md). */
typedef enum dlfuse_attr_key_t {
  DLFUSE_ATTR_ACTIVATION = 1,       /* int64: a dlfuse_activation_t */
  DLFUSE_ATTR_MULTIPLIER = 2,       /* float64: the scalar multiplier */
  DLFUSE_ATTR_ALLOW_TF32 = 3,       /* int64: 0 = exact fp32 (default), 1 = TF32 allowed */
  DLFUSE_ATTR_OUTPUT_ACTIVATION = 4 /* int64 (ABI 1.2): a dlfuse_activation_t, mlp's last layer */
} dlfuse_attr_key_t;

typedef enum dlfuse_attr_type_t { DLFUSE_ATTR_INT64 = 1, DLFUSE_ATTR_FLOAT64 = 2 } dlfuse_attr_type_t;

/* A typed attribute. This one struct has no struct_size: it is an array element
 * and its layout is frozen for ABI 1; new attributes are new keys, not new fields. */
typedef struct dlfuse_attr_t {
  int32_t key;  /* a dlfuse_attr_key_t */
  int32_t type; /* a dlfuse_attr_type_t */
  union {
    int64_t i64;
    double f64;
  } value;
} dlfuse_attr_t;

/* The core ops by name (dlfuse/ops.def describes each). Ops are named by strings so that a
 * plugin can add an op without an ABI change; the registry validates the core ops and the
 * ops plugins declare (ABI 1.2) by their schemas. */
#define DLFUSE_OP_MATMUL_ADD_RELU "matmul_add_relu"
#define DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD "matmul_add_relu_backward"
#define DLFUSE_OP_ADD_MUL_ACTIVATION "add_mul_activation"
#define DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD "add_mul_activation_backward"
/* Added in ABI 1.1 (docs/ops.md; docs/abi.md says what a 1.0 plugin sees). */
#define DLFUSE_OP_MATMUL_ADD_ACTIVATION "matmul_add_activation"
#define DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD "matmul_add_activation_backward"
#define DLFUSE_OP_MATMUL_ADD_RESIDUAL "matmul_add_residual"
#define DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD "matmul_add_residual_backward"
/* Added in ABI 1.2. */
#define DLFUSE_OP_MLP "mlp"
#define DLFUSE_OP_MLP_BACKWARD "mlp_backward"

/* Direction of a device-service copy. */
typedef enum dlfuse_copy_kind_t {
  DLFUSE_COPY_HOST_TO_DEVICE = 1,
  DLFUSE_COPY_DEVICE_TO_HOST = 2,
  DLFUSE_COPY_DEVICE_TO_DEVICE = 3
} dlfuse_copy_kind_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#include "dlfuse/ops.h"

#endif /* DLFUSE_TYPES_H_ */

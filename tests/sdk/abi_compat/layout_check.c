/* The frozen layout of ABI 1.0 (x86-64 and other LP64 targets), checked at compile time
 * against the installed headers. A field moved, resized or removed, or an enum value
 * renumbered, breaks every plugin already built: this file then fails to compile.
 * A later 1.x minor may only append fields (sizes grow, offsets stay) and enum values.
 * The numbers were read off ABI 1.0 once and are never regenerated. */
#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h>

#include <stddef.h>

#if !defined(__LP64__)
#error "the frozen layout below is the LP64 one"
#endif

#define LAYOUT(T, field, off, size)                                    \
  _Static_assert(offsetof(T, field) == (off), #T "." #field " moved"); \
  _Static_assert(sizeof(((T*)0)->field) == (size), #T "." #field " resized")
/* Structs grow at the end in a minor version; struct_size says how far a caller's reaches. */
#define SIZE(T, size) _Static_assert(sizeof(T) >= (size), #T " shrank below its ABI 1.0 size")
#define VALUE(name, v) _Static_assert((name) == (v), #name " renumbered")

SIZE(dlfuse_host_info_t, 24);
LAYOUT(dlfuse_host_info_t, abi_major, 8, 4);
LAYOUT(dlfuse_host_info_t, abi_minor, 12, 4);
LAYOUT(dlfuse_host_info_t, plugin_path, 16, 8);
SIZE(dlfuse_kernel_args_t, 88);
LAYOUT(dlfuse_kernel_args_t, op, 8, 8);
LAYOUT(dlfuse_kernel_args_t, inputs, 16, 8);
LAYOUT(dlfuse_kernel_args_t, num_inputs, 24, 4);
LAYOUT(dlfuse_kernel_args_t, outputs, 32, 8);
LAYOUT(dlfuse_kernel_args_t, num_outputs, 40, 4);
LAYOUT(dlfuse_kernel_args_t, attrs, 48, 8);
LAYOUT(dlfuse_kernel_args_t, num_attrs, 56, 4);
LAYOUT(dlfuse_kernel_args_t, stream, 64, 8);
LAYOUT(dlfuse_kernel_args_t, err, 72, 8);
LAYOUT(dlfuse_kernel_args_t, err_size, 80, 8);
SIZE(dlfuse_kernel_t, 56);
LAYOUT(dlfuse_kernel_t, op, 8, 8);
LAYOUT(dlfuse_kernel_t, device_type, 16, 4);
LAYOUT(dlfuse_kernel_t, num_dtypes, 20, 4);
LAYOUT(dlfuse_kernel_t, dtypes, 24, 8);
LAYOUT(dlfuse_kernel_t, priority, 32, 4);
LAYOUT(dlfuse_kernel_t, fn, 40, 8);
LAYOUT(dlfuse_kernel_t, kernel_data, 48, 8);
LAYOUT(dlfuse_kernel_t, flags, 56, 4); /* appended in ABI 1.1 */
SIZE(dlfuse_plugin_t, 104);
LAYOUT(dlfuse_plugin_t, abi_major, 8, 4);
LAYOUT(dlfuse_plugin_t, abi_minor, 12, 4);
LAYOUT(dlfuse_plugin_t, name, 16, 8);
LAYOUT(dlfuse_plugin_t, version, 24, 8);
LAYOUT(dlfuse_plugin_t, device_type, 32, 4);
LAYOUT(dlfuse_plugin_t, open, 40, 8);
LAYOUT(dlfuse_plugin_t, close, 48, 8);
LAYOUT(dlfuse_plugin_t, get_kernels, 56, 8);
LAYOUT(dlfuse_plugin_t, device_count, 64, 8);
LAYOUT(dlfuse_plugin_t, alloc, 72, 8);
LAYOUT(dlfuse_plugin_t, free, 80, 8);
LAYOUT(dlfuse_plugin_t, copy, 88, 8);
LAYOUT(dlfuse_plugin_t, synchronize, 96, 8);
SIZE(dlfuse_attr_t, 16);
LAYOUT(dlfuse_attr_t, key, 0, 4);
LAYOUT(dlfuse_attr_t, type, 4, 4);
LAYOUT(dlfuse_attr_t, value, 8, 8);
SIZE(dlfuse_registry_options_t, 24);
LAYOUT(dlfuse_registry_options_t, discovery, 8, 4);
LAYOUT(dlfuse_registry_options_t, plugin_paths, 16, 8);
SIZE(dlfuse_plugin_info_t, 72);
LAYOUT(dlfuse_plugin_info_t, name, 8, 8);
LAYOUT(dlfuse_plugin_info_t, version, 16, 8);
LAYOUT(dlfuse_plugin_info_t, path, 24, 8);
LAYOUT(dlfuse_plugin_info_t, available, 32, 4);
LAYOUT(dlfuse_plugin_info_t, reason, 40, 8);
LAYOUT(dlfuse_plugin_info_t, device_type, 48, 4);
LAYOUT(dlfuse_plugin_info_t, device_count, 52, 4);
LAYOUT(dlfuse_plugin_info_t, abi_major, 56, 4);
LAYOUT(dlfuse_plugin_info_t, abi_minor, 60, 4);
LAYOUT(dlfuse_plugin_info_t, num_kernels, 64, 4);
SIZE(dlfuse_kernel_info_t, 40);
LAYOUT(dlfuse_kernel_info_t, op, 8, 8);
LAYOUT(dlfuse_kernel_info_t, device_type, 16, 4);
LAYOUT(dlfuse_kernel_info_t, num_dtypes, 20, 4);
LAYOUT(dlfuse_kernel_info_t, dtypes, 24, 8);
LAYOUT(dlfuse_kernel_info_t, priority, 32, 4);
LAYOUT(dlfuse_kernel_info_t, flags, 36, 4); /* appended in ABI 1.1, in 1.0's tail padding */
/* Appended in ABI 1.2. */
LAYOUT(dlfuse_kernel_t, schema, 64, 8);
LAYOUT(dlfuse_kernel_t, dtype_priorities, 72, 8);
LAYOUT(dlfuse_kernel_info_t, dtype_priorities, 40, 8);
LAYOUT(dlfuse_arg_schema_t, name, 0, 8);
LAYOUT(dlfuse_arg_schema_t, flags, 8, 4);
LAYOUT(dlfuse_arg_schema_t, since_minor, 12, 4);
LAYOUT(dlfuse_arg_schema_t, shape_rule, 16, 4);
LAYOUT(dlfuse_arg_schema_t, shape_inputs, 20, 4);
LAYOUT(dlfuse_arg_schema_t, alias_input, 24, 4);
LAYOUT(dlfuse_attr_schema_t, name, 0, 8);
LAYOUT(dlfuse_attr_schema_t, flags, 8, 4);
LAYOUT(dlfuse_attr_schema_t, default_value, 16, 16);
LAYOUT(dlfuse_attr_schema_t, min_value, 32, 8);
LAYOUT(dlfuse_attr_schema_t, max_value, 40, 8);
LAYOUT(dlfuse_op_schema_t, name, 8, 8);
LAYOUT(dlfuse_op_schema_t, since_minor, 16, 4);
LAYOUT(dlfuse_op_schema_t, num_inputs, 20, 4);
LAYOUT(dlfuse_op_schema_t, inputs, 24, 8);
LAYOUT(dlfuse_op_schema_t, num_outputs, 32, 4);
LAYOUT(dlfuse_op_schema_t, outputs, 40, 8);
LAYOUT(dlfuse_op_schema_t, num_attrs, 48, 4);
LAYOUT(dlfuse_op_schema_t, attrs, 56, 8);
LAYOUT(dlfuse_op_schema_t, shape_fn, 64, 8);
LAYOUT(dlfuse_op_schema_t, plugin, 72, 4);
LAYOUT(dlfuse_op_schema_t, struct_size, 0, 8);
SIZE(dlfuse_op_schema_t, 80);
/* Schema arguments and attributes are array elements: frozen sizes, as dlfuse_attr_t. */
_Static_assert(sizeof(dlfuse_arg_schema_t) == 32, "dlfuse_arg_schema_t changed size");
_Static_assert(sizeof(dlfuse_attr_schema_t) == 48, "dlfuse_attr_schema_t changed size");
VALUE(DLFUSE_SHAPE_MATMUL, 1);
VALUE(DLFUSE_SHAPE_BROADCAST, 2);
VALUE(DLFUSE_SHAPE_LIKE, 3);
VALUE(DLFUSE_SHAPE_CALLBACK, 4);
VALUE(DLFUSE_ARG_OPTIONAL, 1u);
VALUE(DLFUSE_ARG_REDUCIBLE, 2u);
VALUE(DLFUSE_ATTR_REQUIRED, 1u);
VALUE(DLFUSE_MAX_NDIM, 16);
/* The core ops keep their places and arities (dlfuse/ops.def only appends). */
VALUE(DLFUSE_OP_INDEX(matmul_add_relu), 0);
VALUE(DLFUSE_OP_INDEX(add_mul_activation_backward), 3);
VALUE(DLFUSE_OP_INDEX(matmul_add_residual_backward), 7);
VALUE(DLFUSE_NUM_INPUTS(add_mul_activation_backward), 5);
VALUE(DLFUSE_BASE_INPUTS(add_mul_activation_backward), 4);
VALUE(DLFUSE_OPTIONAL_INPUTS(add_mul_activation_backward), 0x1e);
VALUE(DLFUSE_OPTIONAL_INPUTS(matmul_add_activation_backward), 0x18);
LAYOUT(dlfuse_host_info_t, struct_size, 0, 8);
LAYOUT(dlfuse_kernel_args_t, struct_size, 0, 8);
LAYOUT(dlfuse_kernel_t, struct_size, 0, 8);
LAYOUT(dlfuse_plugin_t, struct_size, 0, 8);
LAYOUT(dlfuse_registry_options_t, struct_size, 0, 8);
LAYOUT(dlfuse_plugin_info_t, struct_size, 0, 8);
LAYOUT(dlfuse_kernel_info_t, struct_size, 0, 8);
/* The attribute record is passed in arrays: its size is frozen, not only its start. */
_Static_assert(sizeof(dlfuse_attr_t) == 16, "dlfuse_attr_t changed size");

VALUE(DLFUSE_ABI_MAJOR, 1);
VALUE(DLFUSE_STATUS_OK, 0);
VALUE(DLFUSE_STATUS_INVALID_ARGUMENT, 1);
VALUE(DLFUSE_STATUS_UNSUPPORTED, 2);
VALUE(DLFUSE_STATUS_NOT_FOUND, 3);
VALUE(DLFUSE_STATUS_ABI_MISMATCH, 4);
VALUE(DLFUSE_STATUS_LOAD_FAILED, 5);
VALUE(DLFUSE_STATUS_UNAVAILABLE, 6);
VALUE(DLFUSE_STATUS_OUT_OF_MEMORY, 7);
VALUE(DLFUSE_STATUS_DEVICE_ERROR, 8);
VALUE(DLFUSE_STATUS_INTERNAL, 9);
VALUE(DLFUSE_ACT_IDENTITY, 0);
VALUE(DLFUSE_ACT_RELU, 1);
VALUE(DLFUSE_ACT_SIGMOID, 2);
VALUE(DLFUSE_ACT_TANH, 3);
VALUE(DLFUSE_ACT_GELU_ERF, 4);
VALUE(DLFUSE_ACT_GELU_TANH, 5);
VALUE(DLFUSE_ACT_SILU, 6);
VALUE(DLFUSE_ATTR_ACTIVATION, 1);
VALUE(DLFUSE_ATTR_MULTIPLIER, 2);
VALUE(DLFUSE_ATTR_ALLOW_TF32, 3);
VALUE(DLFUSE_ATTR_INT64, 1);
VALUE(DLFUSE_ATTR_FLOAT64, 2);
VALUE(DLFUSE_COPY_HOST_TO_DEVICE, 1);
VALUE(DLFUSE_COPY_DEVICE_TO_HOST, 2);
VALUE(DLFUSE_COPY_DEVICE_TO_DEVICE, 3);
VALUE(DLFUSE_DISCOVER_NONE, 0);
VALUE(DLFUSE_DISCOVER_ENV, 1);
VALUE(DLFUSE_DISCOVER_INSTALL_DIR, 2);

/* Something for the object file to hold, so the target links. */
int dlfuse_abi_layout_checked(void) { return 1; }

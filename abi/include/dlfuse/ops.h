/* dlfuse/ops.h: how an op is described (ABI 1.2), and compile-time constants of the core
 * ops, derived from the one table dlfuse/ops.def. Included by dlfuse/types.h.
 *
 * A schema says, for one op: its inputs and outputs (names, which may be NULL, which may be
 * the same view as an input), its attributes (key, type, default, range) and how each
 * output's shape follows from the inputs (a named rule, or a plugin's callback). The
 * registry validates calls by it, dlfuse_op_infer_outputs computes output shapes from it,
 * and a binding can call any op, a plugin's own included, by it (docs/abi.md,
 * "Op schemas"). */
#ifndef DLFUSE_OPS_H_
#define DLFUSE_OPS_H_

#ifndef DLFUSE_TYPES_H_
#error "include dlfuse/types.h (or dlfuse/dlfuse.h, dlfuse/plugin.h), not dlfuse/ops.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The most dims of a tensor the registry accepts. */
#define DLFUSE_MAX_NDIM 16
/* The most inputs, and the most outputs, of one call. */
#define DLFUSE_MAX_ARGS 16

/* dlfuse_arg_schema_t.flags */
#define DLFUSE_ARG_OPTIONAL 1u /* the entry may be NULL (the op's rules say when) */
/* An output that may instead have any shape broadcasting to its rule's shape (a gradient
   summed to a broadcast input's shape); the rule gives the widest. */
#define DLFUSE_ARG_REDUCIBLE 2u

/* dlfuse_attr_schema_t.flags */
#define DLFUSE_ATTR_REQUIRED 1u /* a call must give it (default_value is not used) */

/* How an output's shape follows from the present inputs named by shape_inputs (bit i:
 * input i). */
typedef enum dlfuse_shape_rule_t {
  DLFUSE_SHAPE_MATMUL = 1,    /* the two inputs [..., M, K] and [..., K, N], in input order:
                                 NumPy broadcast of their batch dims + [M, N] */
  DLFUSE_SHAPE_BROADCAST = 2, /* NumPy broadcast of the inputs' shapes */
  DLFUSE_SHAPE_LIKE = 3,      /* the shape of the first of the inputs that is present */
  DLFUSE_SHAPE_CALLBACK = 4   /* the op's shape_fn computes it (plugin-declared ops) */
} dlfuse_shape_rule_t;

/* One input or output. An array element: its layout is frozen for ABI 1 (as dlfuse_attr_t). */
typedef struct dlfuse_arg_schema_t {
  const char* name;      /* e.g. "grad_out"; 1-64 characters of [A-Za-z0-9_] */
  uint32_t flags;        /* DLFUSE_ARG_* */
  uint32_t since_minor;  /* inputs: the ABI minor that appended it to the op (a caller or
                            plugin of an older minor passes or reads the older inputs only) */
  int32_t shape_rule;    /* outputs: a dlfuse_shape_rule_t; inputs: 0 */
  uint32_t shape_inputs; /* outputs: bit i set when input i feeds the rule */
  int32_t alias_input;   /* outputs: the input this output may be exactly (in place); -1: none */
} dlfuse_arg_schema_t;

/* One attribute. An array element: its layout is frozen for ABI 1. */
typedef struct dlfuse_attr_schema_t {
  const char* name;            /* e.g. "ACTIVATION"; 1-64 characters of [A-Za-z0-9_];
                                  bindings take it case-insensitively */
  uint32_t flags;              /* DLFUSE_ATTR_REQUIRED */
  dlfuse_attr_t default_value; /* its key and type, and the value a call without it gets */
  int64_t min_value;           /* INT64 attributes: the accepted range [min_value, max_value] */
  int64_t max_value;
} dlfuse_attr_schema_t;

/* Computes output `output`'s shape (rule DLFUSE_SHAPE_CALLBACK) from a call's inputs (only
 * ndim, shape and dtype are read; absent optional inputs are NULL) and its attributes (every
 * attribute of the schema, defaults filled, in schema order). Writes *ndim <= DLFUSE_MAX_NDIM
 * and shape[0, *ndim). On a bad call: a status and a message in err, as a kernel does. */
typedef dlfuse_status_t (*dlfuse_shape_fn_t)(const DLTensor* const* inputs, int32_t num_inputs,
                                             const dlfuse_attr_t* attrs, int32_t num_attrs, int32_t output,
                                             int32_t* ndim, int64_t* shape, char* err, size_t err_size);

/* An op's schema: what a plugin declares for an op of its own (dlfuse_kernel_t.schema) and
 * what dlfuse_op_schema / dlfuse_registry_op_schema fill in. */
typedef struct dlfuse_op_schema_t {
  size_t struct_size;
  const char* name;     /* the op's name; 1-64 characters of [A-Za-z0-9_] */
  uint32_t since_minor; /* the ABI minor that added it (plugin-declared ops: 2) */
  int32_t num_inputs;   /* 0..DLFUSE_MAX_ARGS */
  const dlfuse_arg_schema_t* inputs;
  int32_t num_outputs; /* 1..DLFUSE_MAX_ARGS */
  const dlfuse_arg_schema_t* outputs;
  int32_t num_attrs; /* 0..DLFUSE_MAX_ATTRS */
  const dlfuse_attr_schema_t* attrs;
  dlfuse_shape_fn_t shape_fn; /* required when an output's rule is DLFUSE_SHAPE_CALLBACK */
  int32_t plugin;             /* filled by the registry: -1 for a core op, else the index of
                                 the plugin that declared it; ignored in a declaration */
} dlfuse_op_schema_t;

/* The most attributes of one op. */
#define DLFUSE_MAX_ATTRS 8

/* ---- the core ops' constants, from dlfuse/ops.def ---------------------------------------
 * For op `op` (its name as an identifier, e.g. add_mul_activation_backward):
 *   DLFUSE_OP_INDEX(op)          its place in the core table (dlfuse_registry_op_schema)
 *   DLFUSE_INPUT(op, name)       an input's index; DLFUSE_OUTPUT(op, name) an output's
 *   DLFUSE_NUM_INPUTS(op)        its inputs now; DLFUSE_NUM_OUTPUTS(op), DLFUSE_NUM_ATTRS(op)
 *   DLFUSE_BASE_INPUTS(op)       the inputs it had in the ABI minor that added it
 *   DLFUSE_OPTIONAL_INPUTS(op)   bit i set when input i may be NULL
 *   DLFUSE_ARITY(op)             DLFUSE_NUM_INPUTS(op), DLFUSE_NUM_OUTPUTS(op): two arguments
 *                                (for a check such as dlfuse::kit::check_call) */
#define DLFUSE_OP_INDEX(op) dlfuse_op_index_##op
#define DLFUSE_INPUT(op, name) dlfuse_##op##_in_##name
#define DLFUSE_OUTPUT(op, name) dlfuse_##op##_out_##name
#define DLFUSE_NUM_INPUTS(op) dlfuse_##op##_num_inputs
#define DLFUSE_NUM_OUTPUTS(op) dlfuse_##op##_num_outputs
#define DLFUSE_NUM_ATTRS(op) dlfuse_##op##_num_attrs
#define DLFUSE_BASE_INPUTS(op) dlfuse_##op##_base_inputs
#define DLFUSE_OPTIONAL_INPUTS(op) dlfuse_##op##_optional_inputs
#define DLFUSE_ARITY(op) DLFUSE_NUM_INPUTS(op), DLFUSE_NUM_OUTPUTS(op)

/* Indices of inputs, outputs and attributes; `_` is -1 (none). */
/* X-lists over ops.def, kept as written: */
/* clang-format off */
#define DLFUSE_OP(op, since) enum { dlfuse_##op##_in__ = -1,
#define DLFUSE_IN(op, name, flags, since) dlfuse_##op##_in_##name,
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) dlfuse_##op##_num_inputs };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR

#define DLFUSE_OP(op, since) enum { dlfuse_##op##_out__ = -1,
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias) dlfuse_##op##_out_##name,
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) dlfuse_##op##_num_outputs };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR

#define DLFUSE_OP(op, since) enum {
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi) dlfuse_##op##_attr_##key,
#define DLFUSE_END(op) dlfuse_##op##_num_attrs };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR

#define DLFUSE_OP(op, since) enum { dlfuse_##op##_optional_inputs = 0
#define DLFUSE_IN(op, name, flags, since) | (((flags) & DLFUSE_ARG_OPTIONAL) ? 1 << dlfuse_##op##_in_##name : 0)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR

#define DLFUSE_OP(op, since) enum { dlfuse_##op##_since = since, dlfuse_##op##_base_inputs = 0
#define DLFUSE_IN(op, name, flags, since) + ((since) <= dlfuse_##op##_since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR

#define DLFUSE_OP(op, since) dlfuse_op_index_##op,
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
enum {
#include "dlfuse/ops.def"
  DLFUSE_NUM_CORE_OPS /* the ops of dlfuse/ops.def */
};
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_END
#undef DLFUSE_ATTR
/* clang-format on */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLFUSE_OPS_H_ */

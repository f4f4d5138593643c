/* Output shapes by the schemas' named rules (MATMUL, BROADCAST, LIKE: dlfuse/ops.h), in C so
 * that the registry (output_rules.cpp) and the Python extension, which sizes the outputs it
 * allocates by them on every call, compile one copy. They compute and say why not; the
 * registry words the message. */
#ifndef DLFUSE_SHAPE_RULES_H_
#define DLFUSE_SHAPE_RULES_H_

#include <stdint.h>

#include "dlfuse/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a rule found. `at` names the input an outcome is about. */
typedef enum dlfuse_shape_rule_result_t {
  DLFUSE_SHAPE_RULE_OK = 0,
  DLFUSE_SHAPE_RULE_BAD_TENSOR,   /* input `at`: ndim outside 0..DLFUSE_MAX_NDIM, or no shape array */
  DLFUSE_SHAPE_RULE_ABSENT,       /* MATMUL: input `at` is NULL */
  DLFUSE_SHAPE_RULE_NO_MATMUL,    /* MATMUL: the two inputs do not multiply (rank, K, batch dims) */
  DLFUSE_SHAPE_RULE_NO_BROADCAST, /* BROADCAST: input `at` does not broadcast with the inputs
                                     before it; the shape holds their broadcast */
  DLFUSE_SHAPE_RULE_NO_INPUT,     /* BROADCAST, LIKE: none of the inputs read is present */
  DLFUSE_SHAPE_RULE_NOT_NAMED     /* CALLBACK or no rule of dlfuse_shape_rule_t; MATMUL reading
                                     other than two inputs */
} dlfuse_shape_rule_result_t;

/* Output shape by `rule` from the inputs whose bits `reads` sets (dlfuse_arg_schema_t's
 * shape_rule, shape_inputs), in[j] NULL where absent; shape has DLFUSE_MAX_NDIM entries.
 * Every present input read is checked to be a tensor of valid rank first. */
dlfuse_shape_rule_result_t dlfuse_shape_by_rule(int32_t rule, uint32_t reads, const DLTensor* const* in, int32_t nin,
                                                int64_t* shape, int32_t* ndim, int32_t* at);

#ifdef __cplusplus
}
#endif

#endif

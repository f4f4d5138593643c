// The core ops' schemas: one X-macro expansion of dlfuse/ops.def into the public schema
// structs that validation, output inference and introspection read.
#include "core_ops.hpp"

#include "attrs.hpp"
#include "mlp_rules.hpp"

namespace dlfuse {
namespace {

// Bit of input `index`; none for -1 (`_` in ops.def).
constexpr uint32_t input_bit(int index) { return index < 0 ? 0u : 1u << index; }

dlfuse_attr_t default_of(int32_t key, int32_t type, double v) {
  return type == DLFUSE_ATTR_FLOAT64 ? float_attr(key, v) : int_attr(key, static_cast<int64_t>(v));
}

#define DLFUSE_BIT(op, s) input_bit(dlfuse_##op##_in_##s)

// The shape callback of an op with CALLBACK outputs; NULL for the others.
dlfuse_shape_fn_t core_shape_fn(int32_t index) {
  if (index == DLFUSE_OP_INDEX(mlp)) return mlp_output_shape;
  if (index == DLFUSE_OP_INDEX(mlp_backward)) return mlp_backward_output_shape;
  return nullptr;
}

// Function-local statics: the attribute defaults are built at run time, on first use, so
// no other file's static initializer can read them unset.
const dlfuse_op_schema_t* core_table() {
// Each array ends in a zero entry, so an op without attributes still has an array.
// X-lists over ops.def, kept as written:
// clang-format off
#define DLFUSE_OP(op, since) static const dlfuse_arg_schema_t op##_inputs[] = {
#define DLFUSE_IN(op, name, flags, since) {#name, flags, since, 0, 0, -1},
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) {}};
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END

#define DLFUSE_OP(op, since) static const dlfuse_arg_schema_t op##_outputs[] = {
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)                                    \
  {#name, flags, 0, DLFUSE_SHAPE_##rule, DLFUSE_BIT(op, s0) | DLFUSE_BIT(op, s1) | DLFUSE_BIT(op, s2), \
   dlfuse_##op##_in_##alias},
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op) {}};
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END

#define DLFUSE_OP(op, since) static const dlfuse_attr_schema_t op##_attrs[] = {
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi) \
  {#key, flags, default_of(DLFUSE_ATTR_##key, DLFUSE_ATTR_##type, def), lo, hi},
#define DLFUSE_END(op) {}};
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END

#define DLFUSE_OP(op, since)                                                                          \
  {sizeof(dlfuse_op_schema_t), #op, since, dlfuse_##op##_num_inputs, op##_inputs, dlfuse_##op##_num_outputs, \
   op##_outputs, dlfuse_##op##_num_attrs, op##_attrs, core_shape_fn(DLFUSE_OP_INDEX(op)), -1},
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
static const dlfuse_op_schema_t kCoreSchemas[DLFUSE_NUM_CORE_OPS] = {
#include "dlfuse/ops.def"
};
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
#undef DLFUSE_BIT
  // clang-format on
  return kCoreSchemas;
}

}  // namespace

const dlfuse_op_schema_t& core_schema(int32_t i) { return core_table()[i]; }

}  // namespace dlfuse

// The core ops' schemas, generated from dlfuse/ops.def.
#pragma once
#include <cstdint>

#include "dlfuse/types.h"

namespace dlfuse {

namespace core_counts {
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, key, type, flags, def, lo, hi)
#define DLFUSE_END(op)
// X-lists over ops.def, kept as written:
// clang-format off
#define DLFUSE_OP(op, since) dlfuse_##op##_num_inputs,
constexpr int32_t kInputs[] = {
#include "dlfuse/ops.def"
};
#undef DLFUSE_OP
#define DLFUSE_OP(op, since) dlfuse_##op##_num_outputs,
constexpr int32_t kOutputs[] = {
#include "dlfuse/ops.def"
};
#undef DLFUSE_OP
#define DLFUSE_OP(op, since) dlfuse_##op##_base_inputs,
constexpr int32_t kBaseInputs[] = {
#include "dlfuse/ops.def"
};
#undef DLFUSE_OP
#define DLFUSE_OP(op, since) dlfuse_##op##_num_attrs,
constexpr int32_t kAttrs[] = {
#include "dlfuse/ops.def"
};
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
// clang-format on
template <size_t N>
constexpr int32_t max_of(const int32_t (&v)[N]) {
  int32_t m = 0;
  for (int32_t x : v) m = x > m ? x : m;
  return m;
}
}  // namespace core_counts

// The most inputs, and the most outputs, of any core op.
constexpr int32_t kCoreMaxInputs = core_counts::max_of(core_counts::kInputs);
constexpr int32_t kCoreMaxOutputs = core_counts::max_of(core_counts::kOutputs);

// Schema i of the core table, 0 <= i < DLFUSE_NUM_CORE_OPS (plugin -1).
const dlfuse_op_schema_t& core_schema(int32_t i);

}  // namespace dlfuse

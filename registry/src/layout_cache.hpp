// Layouts remembered per thread and core op.
//
// Training and inference loops repeat each call's shapes, strides, dtypes and devices step
// after step; only data pointers and offsets change. Everything validation concludes from
// those fields (check_layout, the common dtype and device, the op's shape rules, the
// attributes) is remembered for the last kRememberedLayouts valid layouts of each known op,
// per thread, and a call repeating one of them reruns only what reads data and
// byte_offset: check_placement and the overlap tests (op_validators.cpp). Both paths run the
// same checks in the same order over the same values, so a repeat gets the status and
// message a first call would (tests/unit/test_repeat_calls.cpp, fuzz_validation compare
// them). Per thread: calls never share or lock it.
#pragma once
#include <cstdint>

#include "core_ops.hpp"
#include "op_validators.hpp"
#include "tensor_checks.hpp"

namespace dlfuse {

constexpr int32_t kKnownOps = DLFUSE_NUM_CORE_OPS;   // the ops whose layouts are remembered
constexpr int32_t kLayoutInputs = kCoreMaxInputs;    // the most inputs of any core op
constexpr int32_t kLayoutOutputs = kCoreMaxOutputs;  // the most outputs of any core op

// One call of known op number `op_index` (its place in the registry's op table).
struct LayoutCall {
  int32_t op_index;
  const DLTensor* const* inputs;
  int32_t num_inputs;
  DLTensor* const* outputs;  // entries may be NULL
  int32_t num_outputs;
  const dlfuse_attr_t* attrs;  // as given
  int32_t num_attrs;
  int32_t num_canonical;  // the op's complete attribute list, plan->canonical[0, n)
};

// True when `call` repeats a layout remembered on this thread: in, out and plan's device,
// dtype, skip and canonical attributes are then what the full checks made of it.
bool repeat_layout(const LayoutCall& call, TensorView* in, TensorView* out, CallPlan* plan);

// Remembers a call the full checks passed (nothing, for layouts too deep to remember).
void remember_layout(const LayoutCall& call, const TensorView* in, const TensorView* out, const CallPlan& plan);

}  // namespace dlfuse

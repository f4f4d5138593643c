// dlfuse_op_backward_plan (ABI 1.2): what a binding keeps from a forward call for its
// backward, by the op's rules, the call's attributes and the kernel serving the backward.
#include "unit_common.h"

namespace unit {
namespace {

struct Plan {
  dlfuse_status_t status = DLFUSE_STATUS_INTERNAL;
  dlfuse_op_t backward = nullptr;
  uint32_t inputs = 0xdeadu, outputs = 0xdeadu;  // poisoned: a success must write both
};

Plan plan(dlfuse_registry_t reg, const char* name, std::vector<dlfuse_attr_t> attrs, int32_t device = kDLCPU) {
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, name, &op), DLFUSE_STATUS_OK) << last_error();
  Plan p;
  p.status = dlfuse_op_backward_plan(op, attrs.data(), int32_t(attrs.size()), device, f32(), &p.backward, &p.inputs,
                                     &p.outputs);
  return p;
}

constexpr uint32_t bit(int32_t i) { return 1u << i; }

dlfuse_attr_t act(int64_t a) { return attr_i64(DLFUSE_ATTR_ACTIVATION, a); }

class BackwardPlan : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error(); }
  Registry reg;
};

TEST_F(BackwardPlan, MatmulAddActivationKeepsOutOrPreByTheActivation) {
  const uint32_t common = bit(DLFUSE_INPUT(matmul_add_activation_backward, grad_out)) |
                          bit(DLFUSE_INPUT(matmul_add_activation_backward, a)) |
                          bit(DLFUSE_INPUT(matmul_add_activation_backward, b));
  for (int64_t a : {DLFUSE_ACT_IDENTITY, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID, DLFUSE_ACT_TANH}) {
    const Plan p = plan(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION, {act(a)});
    ASSERT_EQ(p.status, DLFUSE_STATUS_OK) << last_error();
    EXPECT_EQ(p.inputs, common | bit(DLFUSE_INPUT(matmul_add_activation_backward, out))) << a;
    EXPECT_EQ(p.outputs, bit(DLFUSE_OUTPUT(matmul_add_activation, out))) << a;
  }
  for (int64_t a : {DLFUSE_ACT_GELU_ERF, DLFUSE_ACT_GELU_TANH, DLFUSE_ACT_SILU}) {
    const Plan p = plan(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION, {act(a)});
    ASSERT_EQ(p.status, DLFUSE_STATUS_OK) << last_error();
    EXPECT_EQ(p.inputs, common | bit(DLFUSE_INPUT(matmul_add_activation_backward, pre))) << a;
    EXPECT_EQ(p.outputs,
              bit(DLFUSE_OUTPUT(matmul_add_activation, out)) | bit(DLFUSE_OUTPUT(matmul_add_activation, pre)))
        << "pre is written where the backward reads it";
  }
}

TEST_F(BackwardPlan, TheBackwardHandleIsTheBackwardOp) {
  const Plan p = plan(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION, {act(DLFUSE_ACT_RELU)});
  ASSERT_EQ(p.status, DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t want = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, &want), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(p.backward, want);
}

TEST_F(BackwardPlan, AddMulKeepsOutWhereItsDerivativeAndTheKernelAllow) {
  const uint32_t from_out =
      bit(DLFUSE_INPUT(add_mul_activation_backward, grad_out)) | bit(DLFUSE_INPUT(add_mul_activation_backward, out));
  const uint32_t from_inputs =
      bit(DLFUSE_INPUT(add_mul_activation_backward, grad_out)) | bit(DLFUSE_INPUT(add_mul_activation_backward, x)) |
      bit(DLFUSE_INPUT(add_mul_activation_backward, y)) | bit(DLFUSE_INPUT(add_mul_activation_backward, bias));
  const Plan relu =
      plan(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, {act(DLFUSE_ACT_RELU), attr_f64(DLFUSE_ATTR_MULTIPLIER, 2)});
  ASSERT_EQ(relu.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(relu.inputs, from_out);
  EXPECT_EQ(relu.outputs, 1u);
  const Plan silu = plan(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, {act(DLFUSE_ACT_SILU)});
  ASSERT_EQ(silu.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(silu.inputs, from_inputs);
  // No kernel for the device: the form every kernel takes.
  EXPECT_EQ(plan(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, {act(DLFUSE_ACT_RELU)}, kDLCUDA).inputs, from_inputs);
}

// unit_echo's add_mul_activation_backward lacks DLFUSE_KERNEL_TAKES_V1_1_INPUTS.
TEST(BackwardPlanFlag, AKernelWithoutTheNewerInputsGetsTheInputs) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  const Plan p = plan(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, {act(DLFUSE_ACT_RELU)});
  ASSERT_EQ(p.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(p.inputs, bit(0) | bit(DLFUSE_INPUT(add_mul_activation_backward, x)) |
                          bit(DLFUSE_INPUT(add_mul_activation_backward, y)) |
                          bit(DLFUSE_INPUT(add_mul_activation_backward, bias)));
}

TEST_F(BackwardPlan, OtherOpsKeepEveryTensorTheirBackwardNames) {
  const Plan mar = plan(reg, DLFUSE_OP_MATMUL_ADD_RELU, {});
  ASSERT_EQ(mar.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(mar.inputs, bit(0) | bit(DLFUSE_INPUT(matmul_add_relu_backward, a)) |
                            bit(DLFUSE_INPUT(matmul_add_relu_backward, b)) |
                            bit(DLFUSE_INPUT(matmul_add_relu_backward, out)));
  EXPECT_EQ(mar.outputs, 1u);
  const Plan res = plan(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL, {attr_i64(DLFUSE_ATTR_ALLOW_TF32, 1)});
  ASSERT_EQ(res.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(res.inputs, bit(0) | bit(DLFUSE_INPUT(matmul_add_residual_backward, a)) |
                            bit(DLFUSE_INPUT(matmul_add_residual_backward, b)));
}

TEST_F(BackwardPlan, BadArgumentsNameWhatIsWrong) {
  dlfuse_op_t op = nullptr, bwd = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();
  uint32_t in = 0, out = 0;
  const dlfuse_attr_t relu = act(DLFUSE_ACT_RELU);
  EXPECT_EQ(dlfuse_op_backward_plan(nullptr, &relu, 1, kDLCPU, f32(), &bwd, &in, &out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'op' is NULL");
  EXPECT_EQ(dlfuse_op_backward_plan(op, &relu, 1, kDLCPU, f32(), &bwd, nullptr, &out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'backward_inputs' is NULL");
  // The attributes are checked as a call's: ACTIVATION is required.
  EXPECT_EQ(dlfuse_op_backward_plan(op, nullptr, 0, kDLCPU, f32(), &bwd, &in, &out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "ACTIVATION");
  const dlfuse_attr_t bad = attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_COUNT);
  EXPECT_EQ(dlfuse_op_backward_plan(op, &bad, 1, kDLCPU, f32(), &bwd, &in, &out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "ACTIVATION");
  // A backward op has no backward.
  dlfuse_op_t backward_op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, &backward_op), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(dlfuse_op_backward_plan(backward_op, nullptr, 0, kDLCPU, f32(), &bwd, &in, &out), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "'matmul_add_relu_backward_backward'");
}

TEST(BackwardPlanDeclared, AnOpWithoutABackwardHasNoPlan) {
  Registry reg;
  ASSERT_EQ(dlfuse_registry_load(reg, DLFUSE_UNIT_PLUGIN_DIR "/examples/libdlfuse_cxx_example.so", nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  dlfuse_op_t op = nullptr, bwd = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, "cxx_example_outer", &op), DLFUSE_STATUS_OK) << last_error();
  uint32_t in = 0, out = 0;
  EXPECT_EQ(dlfuse_op_backward_plan(op, nullptr, 0, kDLCPU, DLDataType{kDLFloat, 64, 1}, &bwd, &in, &out),
            DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "no available plugin offers its backward 'cxx_example_outer_backward'");
}

}  // namespace
}  // namespace unit

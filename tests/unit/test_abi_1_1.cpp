// ABI 1.1 in the registry: the four ops it added, add_mul_activation_backward's appended
// input `out`, and what plugins of 1.0 (or kernels without the flag) get.
#include "unit_common.h"

namespace unit {
namespace {

class Abi11 : public ::testing::Test {
 protected:
  // unit_v11 serves the 1.1 ops and takes `out`; unit_echo (loaded by the tests that
  // need it) takes the 1.0 inputs only.
  void SetUp() override {
    ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error();
    probe = std::make_unique<Probe>("unit_v11");
    ASSERT_TRUE(probe->loaded());
    probe->reset();
  }
  unit_record_t rec() const { return probe->record(); }
  // Runs `st`, expects `want` and that no kernel ran; the message stays in msg.
  void refused(dlfuse_status_t st, dlfuse_status_t want = DLFUSE_STATUS_INVALID_ARGUMENT) {
    msg = last_error();
    EXPECT_EQ(st, want) << dlfuse_status_string(st) << ": " << msg;
    EXPECT_EQ(rec().kernel_calls, 0) << "a refused call reached the plugin";
  }

  Registry reg;
  std::unique_ptr<Probe> probe;
  std::string msg;
  // Shapes of one matmul: a [2, 3], b [3, 4], out [2, 4].
  Tensor a{{2, 3}}, b{{3, 4}}, bias{{4}}, out{{2, 4}}, pre{{2, 4}}, grad_out{{2, 4}};
  Tensor grad_a{{2, 3}}, grad_b{{3, 4}}, grad_bias{{4}};
};

TEST_F(Abi11, MatmulAddActivationReachesThePluginWithCanonicalAttrs) {
  ASSERT_EQ(dlfuse_matmul_add_activation(reg, a, b, bias, DLFUSE_ACT_GELU_TANH, out, nullptr, 1, nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r = rec();
  EXPECT_STREQ(r.op, DLFUSE_OP_MATMUL_ADD_ACTIVATION);
  EXPECT_EQ(r.num_inputs, 3);
  EXPECT_EQ(r.num_outputs, 2);
  EXPECT_EQ(r.output_present[0], 1);
  EXPECT_EQ(r.output_present[1], 0);  // pre not wanted
  ASSERT_EQ(r.num_attrs, 2);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ACTIVATION);
  EXPECT_EQ(r.attrs[0].value.i64, DLFUSE_ACT_GELU_TANH);
  EXPECT_EQ(r.attrs[1].key, DLFUSE_ATTR_ALLOW_TF32);
  EXPECT_EQ(r.attrs[1].value.i64, 1);
}

TEST_F(Abi11, MatmulAddActivationNeedsOutAndChecksPre) {
  refused(dlfuse_matmul_add_activation(reg, a, b, bias, DLFUSE_ACT_TANH, nullptr, pre, 0, nullptr));
  EXPECT_MSG_HAS(msg, "'out' is NULL");
  Tensor wrong({4, 2});
  refused(dlfuse_matmul_add_activation(reg, a, b, bias, DLFUSE_ACT_TANH, out, wrong, 0, nullptr));
  EXPECT_MSG_HAS(msg, "'pre'");
  EXPECT_MSG_HAS(msg, "[4, 2]");
  refused(dlfuse_matmul_add_activation(reg, a, b, bias, static_cast<dlfuse_activation_t>(7), out, nullptr, 0, nullptr));
  EXPECT_MSG_HAS(msg, "ACTIVATION is 7");
}

TEST_F(Abi11, BackwardTakesExactlyOneOfOutAndPre) {
  refused(dlfuse_matmul_add_activation_backward(reg, grad_out, a, b, nullptr, nullptr, DLFUSE_ACT_RELU, grad_a, grad_b,
                                                grad_bias, 0, nullptr));
  EXPECT_MSG_HAS(msg, "both NULL");
  refused(dlfuse_matmul_add_activation_backward(reg, grad_out, a, b, out, pre, DLFUSE_ACT_RELU, grad_a, grad_b,
                                                grad_bias, 0, nullptr));
  EXPECT_MSG_HAS(msg, "both given");
  ASSERT_EQ(dlfuse_matmul_add_activation_backward(reg, grad_out, a, b, nullptr, pre, DLFUSE_ACT_GELU_ERF, grad_a,
                                                  nullptr, grad_bias, 0, nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r = rec();
  EXPECT_EQ(r.num_inputs, 5);
  EXPECT_EQ(r.input_data[3], nullptr);
  EXPECT_EQ(r.input_data[4], pre.dl()->data);
  EXPECT_EQ(r.output_present[1], 0);
}

TEST_F(Abi11, DerivativeFromOutOnlyForActivationsItDetermines) {
  for (dlfuse_activation_t act : {DLFUSE_ACT_GELU_ERF, DLFUSE_ACT_GELU_TANH, DLFUSE_ACT_SILU}) {
    refused(dlfuse_matmul_add_activation_backward(reg, grad_out, a, b, out, nullptr, act, grad_a, grad_b, grad_bias, 0,
                                                  nullptr));
    EXPECT_MSG_HAS(msg, "pass 'pre'");
  }
  for (dlfuse_activation_t act : {DLFUSE_ACT_IDENTITY, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID, DLFUSE_ACT_TANH})
    EXPECT_EQ(dlfuse_matmul_add_activation_backward(reg, grad_out, a, b, out, nullptr, act, grad_a, grad_b, grad_bias,
                                                    0, nullptr),
              DLFUSE_STATUS_OK)
        << last_error();
}

TEST_F(Abi11, ResidualMayBeOutExactlyAndNothingElse) {
  Tensor residual({2, 4});
  ASSERT_EQ(dlfuse_matmul_add_residual(reg, a, b, bias, residual, residual, 0, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_EQ(rec().kernel_calls, 1);
  probe->reset();
  Tensor row({1, 4});
  refused(dlfuse_matmul_add_residual(reg, a, b, bias, out, row, 0, nullptr));  // out is [1, 4]: wrong shape
  EXPECT_MSG_HAS(msg, "'out'");
  Tensor col({3, 1});
  refused(dlfuse_matmul_add_residual(reg, a, b, bias, col, out, 0, nullptr));
  EXPECT_MSG_HAS(msg, "'residual'");
  // out overlapping a (not the in-place case) is refused.
  DLTensor alias = *out.dl();
  alias.data = a.dl()->data;
  refused(dlfuse_matmul_add_residual(reg, a, b, bias, residual, &alias, 0, nullptr));
  EXPECT_MSG_HAS(msg, "overlaps input 'a'");
}

TEST_F(Abi11, ResidualBackwardReductionsBroadcastToOut) {
  Tensor grad_residual({2, 1});
  ASSERT_EQ(
      dlfuse_matmul_add_residual_backward(reg, grad_out, a, b, grad_a, grad_b, grad_bias, grad_residual, 0, nullptr),
      DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_EQ(rec().num_outputs, 4);
  probe->reset();
  Tensor bad({3});
  refused(dlfuse_matmul_add_residual_backward(reg, grad_out, a, b, nullptr, nullptr, nullptr, bad, 0, nullptr));
  EXPECT_MSG_HAS(msg, "'grad_residual'");
}

// add_mul_activation_backward: x, y, bias (ABI 1.0) or out (ABI 1.1), never both.
class AddMulOut : public Abi11 {
 protected:
  Tensor x{{2, 3}}, y{{3}}, b3{{3}}, o{{2, 3}}, g{{2, 3}}, gx{{2, 3}}, gy{{3}}, gb{{3}};
};

TEST_F(AddMulOut, OutFormReachesAKernelThatTakesIt) {
  ASSERT_EQ(dlfuse_add_mul_activation_backward_from_out(reg, g, o, 0.5, DLFUSE_ACT_SIGMOID, gx, gy, gb, nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r = rec();
  EXPECT_EQ(r.num_inputs, 5);
  EXPECT_EQ(r.input_data[1], nullptr);
  EXPECT_EQ(r.input_data[2], nullptr);
  EXPECT_EQ(r.input_data[3], nullptr);
  EXPECT_EQ(r.input_data[4], o.dl()->data);
}

TEST_F(AddMulOut, FourInputsOfA10CallerArriveWithOutAbsent) {
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &op), DLFUSE_STATUS_OK);
  const DLTensor* in[4] = {g, x, y, b3};
  DLTensor* outs[3] = {gx, gy, gb};
  const dlfuse_attr_t attrs[1] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_TANH)};
  ASSERT_EQ(dlfuse_op_call(op, in, 4, outs, 3, attrs, 1, nullptr), DLFUSE_STATUS_OK) << last_error();
  const unit_record_t r = rec();
  EXPECT_EQ(r.num_inputs, 5);  // the kernel takes the 1.1 inputs: `out` arrives as NULL
  EXPECT_EQ(r.input_data[4], nullptr);
  EXPECT_EQ(r.input_data[1], x.dl()->data);
  probe->reset();
  refused(dlfuse_op_call(op, in, 3, outs, 3, attrs, 1, nullptr));
  EXPECT_MSG_HAS(msg, "num_inputs is 3; expected 4 or 5");
}

TEST_F(AddMulOut, BothFormsOrNeitherRefused) {
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &op), DLFUSE_STATUS_OK);
  DLTensor* outs[3] = {gx, gy, gb};
  const dlfuse_attr_t attrs[1] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  const DLTensor* both[5] = {g, x, y, b3, o};
  refused(dlfuse_op_call(op, both, 5, outs, 3, attrs, 1, nullptr));
  EXPECT_MSG_HAS(msg, "argument 'x' is given; expected NULL");
  const DLTensor* neither[5] = {g, nullptr, nullptr, nullptr, nullptr};
  refused(dlfuse_op_call(op, neither, 5, outs, 3, attrs, 1, nullptr));
  EXPECT_MSG_HAS(msg, "argument 'x' is NULL");
  refused(dlfuse_add_mul_activation_backward_from_out(reg, g, o, 1.0, DLFUSE_ACT_SILU, gx, gy, gb, nullptr));
  EXPECT_MSG_HAS(msg, "ACTIVATION SILU");
  Tensor wide({2, 4});
  refused(
      dlfuse_add_mul_activation_backward_from_out(reg, g, o, 1.0, DLFUSE_ACT_RELU, wide, nullptr, nullptr, nullptr));
  EXPECT_MSG_HAS(msg, "'grad_x'");
}

// unit_echo's kernel has no DLFUSE_KERNEL_TAKES_V1_1_INPUTS: the 1.0 form reaches it with
// four inputs; the out form is refused with the reason.
TEST(Abi11Echo, KernelWithoutTheFlagGetsTheFourInputsOfAbi10) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  Probe probe("unit_echo");
  probe.reset();
  Tensor x({2, 3}), y({3}), b({3}), o({2, 3}), g({2, 3}), gx({2, 3});
  ASSERT_EQ(dlfuse_add_mul_activation_backward(reg, g, x, y, b, 1.0, DLFUSE_ACT_RELU, gx, nullptr, nullptr, nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_EQ(probe.record().num_inputs, 4);
  probe.reset();
  const dlfuse_status_t st =
      dlfuse_add_mul_activation_backward_from_out(reg, g, o, 1.0, DLFUSE_ACT_RELU, gx, nullptr, nullptr, nullptr);
  EXPECT_EQ(st, DLFUSE_STATUS_UNSUPPORTED) << last_error();
  EXPECT_MSG_HAS(last_error(), "DLFUSE_KERNEL_TAKES_V1_1_INPUTS");
  EXPECT_MSG_HAS(last_error(), "'out'");
  EXPECT_EQ(probe.record().kernel_calls, 0);
}

// A plugin declaring ABI 1.0 never gets the ops 1.1 added, even under their names.
TEST(Abi11V10, OpsAddedIn11NeverReachA10Plugin) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_v10"), DLFUSE_STATUS_OK) << last_error();
  Probe probe("unit_v10");
  probe.reset();
  Tensor a({2, 3}), b({3, 4}), bias({4}), out({2, 4});
  const dlfuse_status_t st = dlfuse_matmul_add_activation(reg, a, b, bias, DLFUSE_ACT_RELU, out, nullptr, 0, nullptr);
  EXPECT_EQ(st, DLFUSE_STATUS_UNSUPPORTED) << last_error();
  EXPECT_MSG_HAS(last_error(), "no available plugin offers this op");
  EXPECT_EQ(probe.record().kernel_calls, 0);
  // Its 1.0 ops still serve.
  EXPECT_EQ(dlfuse_matmul_add_relu(reg, a, b, bias, out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
}

TEST_F(Abi11, KernelInfoReportsTheFlag) {
  PluginInfo info = plugin_info(reg, 0);
  bool seen = false;
  for (int32_t k = 0; k < info.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    ASSERT_EQ(dlfuse_registry_kernel_info(reg, 0, k, &ki), DLFUSE_STATUS_OK) << last_error();
    const bool ama_backward = std::string(ki.op) == DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD;
    EXPECT_EQ(ki.flags, ama_backward ? DLFUSE_KERNEL_TAKES_V1_1_INPUTS : 0u) << ki.op;
    seen = seen || ama_backward;
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace unit

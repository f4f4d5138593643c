// Dispatch: priority, load order, preferences, op handles, zero-size calls, attributes.
#include "unit_common.h"

namespace unit {
namespace {

int32_t resolve(dlfuse_registry_t reg, const char* op_name = DLFUSE_OP_ADD_MUL_ACTIVATION) {
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, op_name, &op), DLFUSE_STATUS_OK) << last_error();
  int32_t plugin = -1;
  EXPECT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &plugin), DLFUSE_STATUS_OK) << last_error();
  return plugin;
}

// Runs one add_mul_activation and returns the name of the unit plugin that ran it.
std::string who_runs(dlfuse_registry_t reg) {
  const char* stems[] = {"unit_echo", "unit_echo2", "unit_echo3"};
  std::vector<int64_t> before;
  for (const char* s : stems) before.push_back(Probe(s).calls());
  AmaCase c;
  EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  std::string ran;
  for (size_t i = 0; i < 3; ++i)
    if (Probe(stems[i]).calls() != before[i]) ran += (ran.empty() ? "" : "+") + std::string(stems[i]);
  return ran.empty() ? "<none>" : ran;
}

TEST(Dispatch, HighestPriorityWins) {
  for (bool echo2_first : {false, true}) {
    Registry reg;
    if (echo2_first) ASSERT_EQ(reg.load("unit_echo2"), DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
    if (!echo2_first) ASSERT_EQ(reg.load("unit_echo2"), DLFUSE_STATUS_OK) << last_error();
    EXPECT_EQ(resolve(reg), find_plugin(reg, "unit_echo2"));
    EXPECT_EQ(who_runs(reg), "unit_echo2") << "echo2 loaded first: " << echo2_first;
  }
}

TEST(Dispatch, TiesGoToTheEarlierLoaded) {
  {
    Registry reg;
    ASSERT_EQ(reg.load("unit_echo3"), DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
    EXPECT_EQ(resolve(reg), 0);
    EXPECT_EQ(who_runs(reg), "unit_echo3");
  }
  {
    Registry reg;
    ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(reg.load("unit_echo3"), DLFUSE_STATUS_OK) << last_error();
    EXPECT_EQ(resolve(reg), 0);
    EXPECT_EQ(who_runs(reg), "unit_echo");
  }
}

class Prefer : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* s : {"unit_echo", "unit_echo2", "unit_echo3"})
      ASSERT_EQ(reg.load(s), DLFUSE_STATUS_OK) << last_error();
    echo = find_plugin(reg, "unit_echo");
    echo2 = find_plugin(reg, "unit_echo2");
    echo3 = find_plugin(reg, "unit_echo3");
    ASSERT_EQ(resolve(reg), echo2);
  }
  Registry reg;
  int32_t echo = -1, echo2 = -1, echo3 = -1;
};

TEST_F(Prefer, OverridesPriorityForOneOp) {
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo"), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(resolve(reg), echo);
  EXPECT_EQ(who_runs(reg), "unit_echo");
  // Only that op.
  EXPECT_EQ(resolve(reg, DLFUSE_OP_MATMUL_ADD_RELU), echo2);
  EXPECT_EQ(resolve(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD), echo2);
}

TEST_F(Prefer, NullOpMeansEveryOp) {
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo3"), DLFUSE_STATUS_OK) << last_error();
  for (const char* op : {DLFUSE_OP_ADD_MUL_ACTIVATION, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, DLFUSE_OP_MATMUL_ADD_RELU,
                         DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD})
    EXPECT_EQ(resolve(reg, op), echo3) << op;
  EXPECT_EQ(who_runs(reg), "unit_echo3");
}

TEST_F(Prefer, LatestPreferenceFirst) {
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo3"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo"), DLFUSE_STATUS_OK);
  EXPECT_EQ(resolve(reg), echo);
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo3"), DLFUSE_STATUS_OK);
  EXPECT_EQ(resolve(reg), echo3);
}

TEST_F(Prefer, NullNameClearsThatOp) {
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_MATMUL_ADD_RELU, "unit_echo3"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(resolve(reg), echo2);
  EXPECT_EQ(who_runs(reg), "unit_echo2");
  EXPECT_EQ(resolve(reg, DLFUSE_OP_MATMUL_ADD_RELU), echo3) << "clearing one op cleared another";
}

TEST_F(Prefer, NullNullClearsEverything) {
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo3"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(resolve(reg), echo2);
  EXPECT_EQ(resolve(reg, DLFUSE_OP_MATMUL_ADD_RELU), echo2);
}

TEST_F(Prefer, UnknownPluginNameNotFound) {
  EXPECT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "no_such_plugin"), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "no_such_plugin");
  EXPECT_EQ(resolve(reg), echo2);
}

TEST_F(Prefer, PreferredPluginWithoutTheDtypeFallsThrough) {
  // A preference orders the plugins that have a kernel; it cannot make one appear.
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo"), DLFUSE_STATUS_OK);
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK);
  int32_t p = -1;
  EXPECT_EQ(dlfuse_op_resolve(op, kDLCPU, f16(), &p), DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_EQ(dlfuse_op_resolve(op, kDLCUDA, f32(), &p), DLFUSE_STATUS_UNSUPPORTED);
}

TEST(Dispatch, OpHandleFollowsLaterLoadsAndPreferences) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();
  int32_t p = -1;
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &p), DLFUSE_STATUS_OK);
  EXPECT_EQ(p, 0);

  AmaCase c;
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  auto call = [&] { return dlfuse_op_call(op, in, 3, out, 1, attrs, 1, nullptr); };

  ASSERT_EQ(reg.load("unit_echo2"), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &p), DLFUSE_STATUS_OK);
  EXPECT_EQ(p, 1) << "the handle did not see the later load";
  Probe echo("unit_echo"), echo2("unit_echo2");
  const int64_t e0 = echo.calls(), e20 = echo2.calls();
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(echo2.calls(), e20 + 1);
  EXPECT_EQ(echo.calls(), e0);

  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_echo"), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &p), DLFUSE_STATUS_OK);
  EXPECT_EQ(p, 0) << "the handle did not see the preference";
  ASSERT_EQ(call(), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(echo.calls(), e0 + 1);

  // The same op looked up again gives a handle that agrees.
  dlfuse_op_t again = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &again), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_op_resolve(again, kDLCPU, f32(), &p), DLFUSE_STATUS_OK);
  EXPECT_EQ(p, 0);
}

TEST(Dispatch, OpHandleOfAnOpNoPluginOffersYet) {
  Registry reg;
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), DLFUSE_OP_ADD_MUL_ACTIVATION);
}

TEST(Dispatch, PreferEnvAppliedAtCreation) {
  const std::string paths =
      plugin_path("unit_echo") + ":" + plugin_path("unit_echo2") + ":" + plugin_path("unit_echo3");
  ScopedEnv prefer("DLFUSE_PREFER", "unit_echo3,unit_echo");
  ScopedEnv path("DLFUSE_PLUGIN_PATH", paths.c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(plugin_names(reg), (std::vector<std::string>{"unit_echo", "unit_echo2", "unit_echo3"}));
  // First name wins, for every op.
  EXPECT_EQ(resolve(reg), 2);
  EXPECT_EQ(resolve(reg, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD), 2);
  EXPECT_EQ(who_runs(reg), "unit_echo3");
  // As if passed to prefer(): a later prefer() comes first, and NULL clears.
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo"), DLFUSE_STATUS_OK);
  EXPECT_EQ(resolve(reg), 0);
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, nullptr), DLFUSE_STATUS_OK);
  EXPECT_EQ(resolve(reg), 1);
}

TEST(Dispatch, PreferEnvSecondNameWhenFirstIsAbsent) {
  // A name in DLFUSE_PREFER that no plugin has does not fail creation.
  const std::string paths = plugin_path("unit_echo") + ":" + plugin_path("unit_echo2");
  ScopedEnv prefer("DLFUSE_PREFER", "not_loaded_here,unit_echo");
  ScopedEnv path("DLFUSE_PLUGIN_PATH", paths.c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(resolve(reg), 0);
}

TEST(Dispatch, ResolveUnsupportedAndBadArguments) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &op), DLFUSE_STATUS_OK);
  int32_t p = -1;
  EXPECT_EQ(dlfuse_op_resolve(op, kDLCPU, f64(), &p), DLFUSE_STATUS_UNSUPPORTED);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, DLFUSE_OP_MATMUL_ADD_RELU);
  EXPECT_MSG_HAS(msg, "float64");
  EXPECT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dlfuse_op_resolve(nullptr, kDLCPU, f32(), &p), DLFUSE_STATUS_INVALID_ARGUMENT);
}

// ---- what the plugin receives --------------------------------------------------------

class Received : public EchoTest {
 protected:
  unit_record_t rec() const { return probe->record(); }
};

TEST_F(Received, TypedForwardPassesArgumentsAndAllAttributesInOrder) {
  AmaCase c;
  int stream_token = 0;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 2.5, DLFUSE_ACT_SIGMOID, c.out, &stream_token),
            DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r = rec();
  EXPECT_EQ(r.kernel_calls, 1);
  EXPECT_STREQ(r.op, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_GE(r.args_struct_size, offsetof(dlfuse_kernel_args_t, err_size) + sizeof(size_t));
  EXPECT_EQ(r.num_inputs, 3);
  EXPECT_EQ(r.num_outputs, 1);
  EXPECT_EQ(r.input_data[0], c.x.dl()->data);
  EXPECT_EQ(r.input_data[1], c.y.dl()->data);
  EXPECT_EQ(r.input_data[2], c.bias.dl()->data);
  EXPECT_EQ(r.output_data[0], c.out.dl()->data);
  EXPECT_EQ(r.stream, &stream_token);
  EXPECT_EQ(r.err_buffer_ok, 1);
  ASSERT_EQ(r.num_attrs, 2);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ACTIVATION);
  EXPECT_EQ(r.attrs[0].type, DLFUSE_ATTR_INT64);
  EXPECT_EQ(r.attrs[0].value.i64, DLFUSE_ACT_SIGMOID);
  EXPECT_EQ(r.attrs[1].key, DLFUSE_ATTR_MULTIPLIER);
  EXPECT_EQ(r.attrs[1].type, DLFUSE_ATTR_FLOAT64);
  EXPECT_EQ(r.attrs[1].value.f64, 2.5);
  for (int64_t i = 0; i < 6; ++i) {
    const double p = double(c.x.f()[i]) + double(c.bias.f()[i % 3]) + 2.5 * double(c.y.f()[i]);
    EXPECT_NEAR(c.out.f()[i], 1.0 / (1.0 + std::exp(-p)), 1e-6) << i;
  }
}

TEST_F(Received, GenericCallFillsDefaultsInDocumentedOrder) {
  AmaCase c;
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};

  // Only ACTIVATION: MULTIPLIER defaults to 1.0.
  const dlfuse_attr_t only_act[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_IDENTITY)};
  ASSERT_EQ(dlfuse_op_call(op, in, 3, out, 1, only_act, 1, nullptr), DLFUSE_STATUS_OK) << last_error();
  unit_record_t r = rec();
  ASSERT_EQ(r.num_attrs, 2);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ACTIVATION);
  EXPECT_EQ(r.attrs[0].value.i64, DLFUSE_ACT_IDENTITY);
  EXPECT_EQ(r.attrs[1].key, DLFUSE_ATTR_MULTIPLIER);
  EXPECT_EQ(r.attrs[1].type, DLFUSE_ATTR_FLOAT64);
  EXPECT_EQ(r.attrs[1].value.f64, 1.0);
  EXPECT_EQ(r.stream, nullptr);
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 1.0, false)) << i;

  // Given in the other order: the plugin still gets ACTIVATION then MULTIPLIER.
  const dlfuse_attr_t reversed[] = {attr_f64(DLFUSE_ATTR_MULTIPLIER, -3.0),
                                    attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  ASSERT_EQ(dlfuse_op_call(op, in, 3, out, 1, reversed, 2, nullptr), DLFUSE_STATUS_OK) << last_error();
  r = rec();
  ASSERT_EQ(r.num_attrs, 2);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ACTIVATION);
  EXPECT_EQ(r.attrs[0].value.i64, DLFUSE_ACT_RELU);
  EXPECT_EQ(r.attrs[1].key, DLFUSE_ATTR_MULTIPLIER);
  EXPECT_EQ(r.attrs[1].value.f64, -3.0);
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, -3.0, true)) << i;
}

TEST_F(Received, MatmulAllowTf32DefaultAndTyped) {
  MmCase m;
  ASSERT_EQ(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 1, nullptr), DLFUSE_STATUS_OK) << last_error();
  unit_record_t r = rec();
  ASSERT_EQ(r.num_attrs, 1);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ALLOW_TF32);
  EXPECT_EQ(r.attrs[0].type, DLFUSE_ATTR_INT64);
  EXPECT_EQ(r.attrs[0].value.i64, 1);

  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &op), DLFUSE_STATUS_OK);
  const DLTensor* in[] = {m.a, m.b, m.bias};
  DLTensor* out[] = {m.out};
  ASSERT_EQ(dlfuse_op_call(op, in, 3, out, 1, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  r = rec();
  ASSERT_EQ(r.num_attrs, 1);
  EXPECT_EQ(r.attrs[0].key, DLFUSE_ATTR_ALLOW_TF32);
  EXPECT_EQ(r.attrs[0].value.i64, 0);
  EXPECT_STREQ(r.op, DLFUSE_OP_MATMUL_ADD_RELU);
  for (int64_t i = 0; i < m.M; ++i)
    for (int64_t j = 0; j < m.N; ++j) EXPECT_FLOAT_EQ(m.out.f()[i * m.N + j], m.expect(i, j));
}

TEST_F(Received, BackwardAbsentOutputsArriveAsNull) {
  AmaCase c;
  Tensor g({2, 3}), gy({2, 3});
  gy.fill(5.0f);
  ASSERT_EQ(
      dlfuse_add_mul_activation_backward(reg, g, c.x, c.y, c.bias, 0.5, DLFUSE_ACT_TANH, nullptr, gy, nullptr, nullptr),
      DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r = rec();
  EXPECT_STREQ(r.op, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD);
  EXPECT_EQ(r.num_inputs, 4);
  EXPECT_EQ(r.input_data[0], g.dl()->data);
  EXPECT_EQ(r.input_data[1], c.x.dl()->data);
  EXPECT_EQ(r.input_data[2], c.y.dl()->data);
  EXPECT_EQ(r.input_data[3], c.bias.dl()->data);
  ASSERT_EQ(r.num_outputs, 3);
  EXPECT_EQ(r.output_present[0], 0);
  EXPECT_EQ(r.output_present[1], 1);
  EXPECT_EQ(r.output_present[2], 0);
  EXPECT_EQ(r.output_data[1], gy.dl()->data);
  ASSERT_EQ(r.num_attrs, 2);
  EXPECT_EQ(r.attrs[0].value.i64, DLFUSE_ACT_TANH);
  EXPECT_EQ(r.attrs[1].value.f64, 0.5);
  EXPECT_EQ(gy.f()[0], 0.0f);  // the echo backward zeroes what it is given

  Tensor gmo({2, 4}), gb({3, 4});
  MmCase m;
  ASSERT_EQ(dlfuse_matmul_add_relu_backward(reg, gmo, m.a, m.b, m.out, nullptr, gb, nullptr, 0, nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  const unit_record_t r2 = rec();
  EXPECT_STREQ(r2.op, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD);
  EXPECT_EQ(r2.num_inputs, 4);
  EXPECT_EQ(r2.input_data[3], m.out.dl()->data);
  ASSERT_EQ(r2.num_outputs, 3);
  EXPECT_EQ(r2.output_present[0], 0);
  EXPECT_EQ(r2.output_present[1], 1);
  EXPECT_EQ(r2.output_present[2], 0);
}

// ---- zero-size calls -------------------------------------------------------------------

TEST_F(Received, ZeroSizeOutputsReturnOkWithoutAKernel) {
  Tensor x({0, 3}), y({0, 3}), bias({3}), out({0, 3});
  ASSERT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  // Zero-size tensors may have no memory at all.
  x.dl()->data = nullptr;
  y.dl()->data = nullptr;
  out.dl()->data = nullptr;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  Tensor a({0, 3}), b({3, 4}), mb({4}), mout({0, 4});
  ASSERT_EQ(dlfuse_matmul_add_relu(reg, a, b, mb, mout, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  Tensor g({0, 4}), ga({0, 3});
  ASSERT_EQ(dlfuse_matmul_add_relu_backward(reg, g, a, b, mout, ga, nullptr, nullptr, 0, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_EQ(calls(), 0) << "a kernel ran for a call with only zero-size outputs";
}

TEST_F(Received, ZeroSizeCallIsStillValidated) {
  // Zero elements do not excuse a wrong shape.
  Tensor x({0, 3}), y({0, 4}), bias({3}), out({0, 3});
  EXPECT_EQ(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr),
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(calls(), 0);
}

TEST_F(Received, MatmulWithKZeroRunsAndGivesReluBias) {
  Tensor a({2, 0}), b({0, 3}), bias({3}), out({2, 3});
  bias.fill([](int64_t i) { return static_cast<float>(i) - 1.0f; });  // -1, 0, 1
  out.fill(-777.0f);
  ASSERT_EQ(dlfuse_matmul_add_relu(reg, a, b, bias, out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1) << "K = 0 has a non-empty output: the kernel must run";
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(out.f()[i * 3 + 0], 0.0f);
    EXPECT_EQ(out.f()[i * 3 + 1], 0.0f);
    EXPECT_EQ(out.f()[i * 3 + 2], 1.0f);
  }
}

TEST_F(Received, StridedAndOffsetViewsReachThePluginIntact) {
  // x is the transpose of a [3, 2] buffer, bias starts 2 floats into its storage.
  Tensor xt({2, 3}), y({2, 3}), bias({3}), out({2, 3});
  Tensor base({3, 2});
  base.fill([](int64_t i) { return static_cast<float>(i); });  // base[r][c] = 2r + c
  xt.dl()->data = base.dl()->data;
  xt.strides({1, 2});  // xt[i][j] = base[j][i] = 2j + i
  y.fill(0.0f);
  Tensor bstore({5});
  bstore.fill([](int64_t i) { return 10.0f * static_cast<float>(i); });
  bias.dl()->data = bstore.dl()->data;
  bias.dl()->byte_offset = 2 * sizeof(float);  // 20, 30, 40
  ASSERT_EQ(dlfuse_add_mul_activation(reg, xt, y, bias, 1.0, DLFUSE_ACT_IDENTITY, out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_FLOAT_EQ(out.f()[i * 3 + j], static_cast<float>(2 * j + i) + 10.0f * static_cast<float>(j + 2));
}

}  // namespace
}  // namespace unit

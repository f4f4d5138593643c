// ABI 1.2: the op table's schemas through the C API, output inference, ops that plugins
// declare (examples/cxx_plugin's cxx_example_outer), and priorities per dtype.
#include <random>

#include "unit_common.h"

namespace unit {
namespace {

dlfuse_op_schema_t schema_at(dlfuse_registry_t reg, int32_t i) {
  dlfuse_op_schema_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  EXPECT_EQ(dlfuse_registry_op_schema(reg, i, &s), DLFUSE_STATUS_OK) << last_error();
  return s;
}

int32_t op_count(dlfuse_registry_t reg) {
  int32_t n = -1;
  EXPECT_EQ(dlfuse_registry_op_count(reg, &n), DLFUSE_STATUS_OK) << last_error();
  return n;
}

dlfuse_op_t get_op(dlfuse_registry_t reg, const char* name) {
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, name, &op), DLFUSE_STATUS_OK) << last_error();
  return op;
}

// A tensor description without data: inference reads ndim, shape and dtype only.
struct Shape {
  std::vector<int64_t> dims;
  DLTensor t{};
  explicit Shape(std::vector<int64_t> d, DLDataType dtype = f32()) : dims(std::move(d)) {
    t.data = nullptr;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = int32_t(dims.size());
    t.dtype = dtype;
    t.shape = dims.data();
  }
};

struct Inferred {
  dlfuse_status_t status;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLDataType> dtypes;
};

Inferred infer(dlfuse_op_t op, std::vector<const DLTensor*> in, int32_t num_outputs,
               std::vector<dlfuse_attr_t> attrs = {}) {
  std::vector<int32_t> ndims(size_t(num_outputs), -1);
  std::vector<int64_t> shapes(size_t(num_outputs) * DLFUSE_MAX_NDIM, -7);
  std::vector<DLDataType> dtypes(size_t(num_outputs), DLDataType{0, 0, 0});
  Inferred r;
  r.status = dlfuse_op_infer_outputs(op, in.data(), int32_t(in.size()), attrs.data(), int32_t(attrs.size()),
                                     num_outputs, ndims.data(), shapes.data(), dtypes.data());
  if (r.status == DLFUSE_STATUS_OK)
    for (int32_t i = 0; i < num_outputs; ++i)
      r.shapes.emplace_back(shapes.begin() + i * DLFUSE_MAX_NDIM,
                            shapes.begin() + i * DLFUSE_MAX_NDIM + ndims[size_t(i)]);
  r.dtypes = dtypes;
  return r;
}

using Dims = std::vector<int64_t>;

TEST(OpSchema, CoreOpsAreListedFirstInTableOrder) {
  Registry reg;
  ASSERT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS);
  const dlfuse_op_schema_t mm = schema_at(reg, DLFUSE_OP_INDEX(matmul_add_relu));
  EXPECT_STREQ(mm.name, DLFUSE_OP_MATMUL_ADD_RELU);
  EXPECT_EQ(mm.since_minor, 0u);
  EXPECT_EQ(mm.plugin, -1);
  ASSERT_EQ(mm.num_inputs, DLFUSE_NUM_INPUTS(matmul_add_relu));
  EXPECT_STREQ(mm.inputs[DLFUSE_INPUT(matmul_add_relu, bias)].name, "bias");
  ASSERT_EQ(mm.num_outputs, 1);
  EXPECT_EQ(mm.outputs[0].shape_rule, DLFUSE_SHAPE_MATMUL);
  EXPECT_EQ(mm.outputs[0].shape_inputs, 0x3u);
  ASSERT_EQ(mm.num_attrs, 1);
  EXPECT_STREQ(mm.attrs[0].name, "ALLOW_TF32");
  EXPECT_EQ(mm.attrs[0].default_value.key, DLFUSE_ATTR_ALLOW_TF32);
  EXPECT_EQ(mm.attrs[0].default_value.value.i64, 0);

  const dlfuse_op_schema_t ama = schema_at(reg, DLFUSE_OP_INDEX(add_mul_activation));
  EXPECT_EQ(ama.outputs[0].alias_input, DLFUSE_INPUT(add_mul_activation, x));
  EXPECT_EQ(ama.attrs[0].flags, DLFUSE_ATTR_REQUIRED);
  EXPECT_EQ(ama.attrs[1].default_value.type, DLFUSE_ATTR_FLOAT64);
  EXPECT_EQ(ama.attrs[1].default_value.value.f64, 1.0);

  // The compile-time constants and the run-time schema are the same table.
  const dlfuse_op_schema_t bwd = schema_at(reg, DLFUSE_OP_INDEX(add_mul_activation_backward));
  uint32_t optional = 0;
  int32_t base = 0;
  for (int32_t i = 0; i < bwd.num_inputs; ++i) {
    if (bwd.inputs[i].flags & DLFUSE_ARG_OPTIONAL) optional |= 1u << i;
    base += bwd.inputs[i].since_minor <= bwd.since_minor;
  }
  EXPECT_EQ(optional, uint32_t(DLFUSE_OPTIONAL_INPUTS(add_mul_activation_backward)));
  EXPECT_EQ(optional, 0x1eu);
  EXPECT_EQ(base, DLFUSE_BASE_INPUTS(add_mul_activation_backward));
  EXPECT_EQ(base, 4);
  EXPECT_EQ(schema_at(reg, DLFUSE_OP_INDEX(matmul_add_residual)).outputs[0].alias_input,
            DLFUSE_INPUT(matmul_add_residual, residual));
  EXPECT_EQ(schema_at(reg, DLFUSE_OP_INDEX(matmul_add_residual_backward)).since_minor, 1u);
}

TEST(OpSchema, BadArgumentsNameWhatIsWrong) {
  Registry reg;
  dlfuse_op_schema_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = 8;
  EXPECT_EQ(dlfuse_registry_op_schema(reg, 0, &s), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "struct_size is 8");
  s.struct_size = sizeof s;
  EXPECT_EQ(dlfuse_registry_op_schema(reg, DLFUSE_NUM_CORE_OPS, &s), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "'index' is " + std::to_string(DLFUSE_NUM_CORE_OPS));
  EXPECT_EQ(dlfuse_registry_op_schema(reg, -1, &s), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_EQ(dlfuse_registry_op_schema(reg, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dlfuse_registry_op_count(nullptr, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(dlfuse_op_schema(nullptr, &s), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST(OpSchema, InfersMatmulShapesWithoutData) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION);
  Shape a({2, 1, 3, 4}), b({5, 4, 6}), bias({6});
  const auto r = infer(op, {&a.t, &b.t, &bias.t}, 2, {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)});
  ASSERT_EQ(r.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(r.shapes[0], (Dims{2, 5, 3, 6}));
  EXPECT_EQ(r.shapes[1], (Dims{2, 5, 3, 6}));  // pre, optional, inferred too
  EXPECT_EQ(r.dtypes[0].code, kDLFloat);
  EXPECT_EQ(r.dtypes[0].bits, 32);

  Shape bad_b({5, 3, 6});
  EXPECT_EQ(infer(op, {&a.t, &bad_b.t, &bias.t}, 2, {attr_i64(DLFUSE_ATTR_ACTIVATION, 0)}).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'b': shape[-2] (K) is 3; expected 4");
  // The attributes are checked as a call checks them: ACTIVATION is required.
  EXPECT_EQ(infer(op, {&a.t, &b.t, &bias.t}, 2).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "attribute ACTIVATION is missing");
  EXPECT_EQ(infer(op, {&a.t, &b.t, &bias.t}, 1, {attr_i64(DLFUSE_ATTR_ACTIVATION, 0)}).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "num_outputs is 1; expected 2");
  Shape b64({5, 4, 6}, f64());
  EXPECT_EQ(infer(op, {&a.t, &b64.t, &bias.t}, 2, {attr_i64(DLFUSE_ATTR_ACTIVATION, 0)}).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'b': dtype is float64");
}

TEST(OpSchema, InfersBroadcastAndLikeShapes) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error();
  const std::vector<dlfuse_attr_t> act = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_TANH)};
  Shape x({3, 1}), y({1, 4}), bias({4});
  const auto fwd = infer(get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION), {&x.t, &y.t, &bias.t}, 1, act);
  ASSERT_EQ(fwd.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(fwd.shapes[0], (Dims{3, 4}));
  Shape bad_bias({5});
  EXPECT_EQ(infer(get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION), {&x.t, &y.t, &bad_bias.t}, 1, act).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'bias'");
  EXPECT_MSG_SHAPE(last_error(), 5);

  // The backward's gradients are shaped like x, y and bias, or like out in the 1.1 form.
  dlfuse_op_t bwd = get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD);
  Shape g({3, 4});
  const auto full = infer(bwd, {&g.t, &x.t, &y.t, &bias.t, nullptr}, 3, act);
  ASSERT_EQ(full.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(full.shapes[0], (Dims{3, 1}));
  EXPECT_EQ(full.shapes[1], (Dims{1, 4}));
  EXPECT_EQ(full.shapes[2], (Dims{4}));
  const auto v10 = infer(bwd, {&g.t, &x.t, &y.t, &bias.t}, 3, act);  // a 1.0 caller's four inputs
  ASSERT_EQ(v10.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(v10.shapes[2], (Dims{4}));
  Shape out({3, 4});
  const auto from_out = infer(bwd, {&g.t, nullptr, nullptr, nullptr, &out.t}, 3, act);
  ASSERT_EQ(from_out.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(from_out.shapes[1], (Dims{3, 4}));
  EXPECT_EQ(infer(bwd, {&g.t, nullptr, nullptr, nullptr, nullptr}, 3, act).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "output 'grad_x' has its shape from 'x', 'out'");
  EXPECT_EQ(infer(bwd, {nullptr, &x.t, &y.t, &bias.t, nullptr}, 3, act).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'grad_out' is NULL");

  // Residual backward: every gradient is optional and inferred from grad_out, a and b.
  Shape ga({3, 4}), a({3, 2}), b({2, 4});
  const auto res = infer(get_op(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD), {&ga.t, &a.t, &b.t}, 4);
  ASSERT_EQ(res.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(res.shapes[0], (Dims{3, 2}));
  EXPECT_EQ(res.shapes[1], (Dims{2, 4}));
  EXPECT_EQ(res.shapes[3], (Dims{3, 4}));
}

TEST(OpSchema, InferenceAppliesTheOpsOwnRules) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error();
  // A bias that is no rule's source still has to broadcast to the output.
  Shape a({4, 3}), b({3, 5}), bias({5}), bad_bias({7}), residual({2, 4, 5});
  dlfuse_op_t mar = get_op(reg, DLFUSE_OP_MATMUL_ADD_RELU);
  ASSERT_EQ(infer(mar, {&a.t, &b.t, &bias.t}, 1).status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(infer(mar, {&a.t, &b.t, &bad_bias.t}, 1).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'bias': shape is [7]; expected a shape that broadcasts to [4, 5]");
  EXPECT_EQ(infer(get_op(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL), {&a.t, &b.t, &bias.t, &residual.t}, 1).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'residual': shape is [2, 4, 5]");
  // Which optional inputs go together, and with which attributes.
  dlfuse_op_t maa_bwd = get_op(reg, DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD);
  Shape g({4, 5}), out({4, 5});
  const std::vector<dlfuse_attr_t> relu = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  const std::vector<dlfuse_attr_t> gelu = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_GELU_ERF)};
  ASSERT_EQ(infer(maa_bwd, {&g.t, &a.t, &b.t, &out.t, nullptr}, 3, relu).status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(infer(maa_bwd, {&g.t, &a.t, &b.t, nullptr, nullptr}, 3, relu).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "arguments 'out' and 'pre' are both NULL");
  EXPECT_EQ(infer(maa_bwd, {&g.t, &a.t, &b.t, &out.t, nullptr}, 3, gelu).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'out' is given with ACTIVATION GELU_ERF");
  Shape bad_g({4, 6});
  EXPECT_EQ(infer(maa_bwd, {&bad_g.t, &a.t, &b.t, &out.t, nullptr}, 3, relu).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'grad_out': shape is [4, 6]");
}

TEST(OpSchema, InfersFromZeroDimInputsWithoutAShapeArray) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_v11"), DLFUSE_STATUS_OK) << last_error();
  Shape x({}), y({}), bias({});
  x.t.shape = y.t.shape = bias.t.shape = nullptr;  // DLPack allows NULL for ndim 0
  const auto r = infer(get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION), {&x.t, &y.t, &bias.t}, 1,
                       {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)});
  ASSERT_EQ(r.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(r.shapes[0], Dims{});
}

// mlp's inputs: x, w0..w6, b0..b6 (NULL past the last layer).
std::vector<const DLTensor*> mlp_inputs(const Shape& x, const std::vector<const Shape*>& w,
                                        const std::vector<const Shape*>& b) {
  std::vector<const DLTensor*> in(15, nullptr);
  in[0] = &x.t;
  for (size_t i = 0; i < w.size(); ++i) in[1 + i] = w[i] ? &w[i]->t : nullptr;
  for (size_t i = 0; i < b.size(); ++i) in[8 + i] = b[i] ? &b[i]->t : nullptr;
  return in;
}

const std::vector<dlfuse_attr_t> kReluMlp = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};

// A registry with the test plugin, which offers mlp (dlfuse_op_get finds only offered ops).
struct MlpRegistry : Registry {
  MlpRegistry() {
    const std::string testref = std::string(DLFUSE_UNIT_LIB_DIR) + "/dlfuse/plugins/libdlfuse_testref.so";
    EXPECT_EQ(dlfuse_registry_load(get(), testref.c_str(), nullptr), DLFUSE_STATUS_OK) << last_error();
  }
};

TEST(MlpRules, InfersEachLayersOutputAndEmptyOnesPastTheLast) {
  MlpRegistry reg;
  Shape x({5, 3}), w0({3, 4}), w1({4, 6}), w2({6, 2}), b0({4}), b1({6}), b2({2});
  const auto r = infer(get_op(reg, DLFUSE_OP_MLP), mlp_inputs(x, {&w0, &w1, &w2}, {&b0, &b1, &b2}), 7, kReluMlp);
  ASSERT_EQ(r.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(r.shapes[0], (Dims{5, 2}));  // out
  EXPECT_EQ(r.shapes[1], (Dims{5, 4}));  // h0
  EXPECT_EQ(r.shapes[2], (Dims{5, 6}));  // h1
  for (int i = 3; i < 7; ++i) EXPECT_EQ(r.shapes[size_t(i)], Dims{0}) << "h" << i - 1;
}

TEST(MlpRules, BackwardInfersTheGradientsOfTheGivenLayers) {
  MlpRegistry reg;
  Shape g({5, 2}), x({5, 3}), w0({3, 4}), w1({4, 2}), h0({5, 4}), out({5, 2});
  std::vector<const DLTensor*> in(16, nullptr);
  in[0] = &g.t, in[1] = &x.t, in[2] = &w0.t, in[3] = &w1.t, in[9] = &h0.t, in[15] = &out.t;
  const auto r = infer(get_op(reg, DLFUSE_OP_MLP_BACKWARD), in, 15, kReluMlp);
  ASSERT_EQ(r.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(r.shapes[0], (Dims{5, 3}));  // grad_x
  EXPECT_EQ(r.shapes[1], (Dims{3, 4}));  // grad_w0
  EXPECT_EQ(r.shapes[2], (Dims{4, 2}));
  EXPECT_EQ(r.shapes[3], Dims{0});
  EXPECT_EQ(r.shapes[8], Dims{4});  // grad_b0
  EXPECT_EQ(r.shapes[9], Dims{2});
  EXPECT_EQ(r.shapes[10], Dims{0});
}

TEST(MlpRules, RefusesAGapBetweenLayers) {
  MlpRegistry reg;
  Shape x({5, 3}), w0({3, 4}), w2({4, 2}), b0({4}), b2({2});
  EXPECT_EQ(
      infer(get_op(reg, DLFUSE_OP_MLP), mlp_inputs(x, {&w0, nullptr, &w2}, {&b0, nullptr, &b2}), 7, kReluMlp).status,
      DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'w2' is given but 'w1' is NULL");
}

TEST(MlpRules, RefusesAWeightThatDoesNotTakeThePreviousLayersOutput) {
  MlpRegistry reg;
  Shape x({5, 3}), w0({3, 4}), w1({5, 2}), b0({4}), b1({2});
  EXPECT_EQ(infer(get_op(reg, DLFUSE_OP_MLP), mlp_inputs(x, {&w0, &w1}, {&b0, &b1}), 7, kReluMlp).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'w1': shape[0] (K) is 5; expected 4, w0's shape[1]");
}

TEST(MlpRules, EachLayerHasItsBiasAndNoOther) {
  MlpRegistry reg;
  dlfuse_op_t mlp = get_op(reg, DLFUSE_OP_MLP);
  Shape x({5, 3}), w0({3, 4}), w1({4, 2}), b0({4}), b1({2}), wrong({3});
  EXPECT_EQ(infer(mlp, mlp_inputs(x, {&w0, &w1}, {&b0, nullptr}), 7, kReluMlp).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'b1' is NULL");
  EXPECT_EQ(infer(mlp, mlp_inputs(x, {&w0}, {&b0, &b1}), 7, kReluMlp).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'b1' is given; expected NULL");
  EXPECT_EQ(infer(mlp, mlp_inputs(x, {&w0, &w1}, {&b0, &wrong}), 7, kReluMlp).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'b1': shape is [3]; expected [2]");
}

TEST(MlpRules, BackwardNeedsActivationsThatTheirOutputsDifferentiate) {
  MlpRegistry reg;
  dlfuse_op_t bwd = get_op(reg, DLFUSE_OP_MLP_BACKWARD);
  Shape g({5, 2}), x({5, 3}), w0({3, 4}), w1({4, 2}), h0({5, 4}), out({5, 2});
  std::vector<const DLTensor*> in(16, nullptr);
  in[0] = &g.t, in[1] = &x.t, in[2] = &w0.t, in[3] = &w1.t, in[9] = &h0.t, in[15] = &out.t;
  EXPECT_EQ(infer(bwd, in, 15, {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_GELU_ERF)}).status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "attribute ACTIVATION is GELU_ERF; expected IDENTITY, RELU, SIGMOID or TANH");
  EXPECT_EQ(infer(bwd, in, 15,
                  {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU),
                   attr_i64(DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ACT_SILU)})
                .status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "attribute OUTPUT_ACTIVATION is SILU");
  in[15] = nullptr;  // out: needed by every output activation but IDENTITY
  EXPECT_EQ(infer(bwd, in, 15, kReluMlp).status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(infer(bwd, in, 15,
                  {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU),
                   attr_i64(DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ACT_SIGMOID)})
                .status,
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'out' is NULL; expected the forward's out (OUTPUT_ACTIVATION SIGMOID");
}

TEST(MlpRules, UnusedLayersTakeNullOrEmptyTensorsOnly) {
  MlpRegistry reg;
  dlfuse_op_t mlp = get_op(reg, DLFUSE_OP_MLP);
  Shape x({5, 3}), w0({3, 2}), b0({2}), out({5, 2}), empty({0}), full({5, 2});
  std::vector<float> xs(15, 1.f), ws(6, 1.f), bs(2, 0.f), outs_data(10, 0.f);
  std::vector<float> spare(10);
  x.t.data = xs.data(), w0.t.data = ws.data(), b0.t.data = bs.data(), out.t.data = outs_data.data();
  full.t.data = spare.data();
  const std::vector<const DLTensor*> in = mlp_inputs(x, {&w0}, {&b0});
  std::vector<DLTensor*> outs(7, nullptr);
  outs[0] = &out.t;
  outs[3] = &empty.t;
  const dlfuse_attr_t act = kReluMlp[0];
  EXPECT_EQ(dlfuse_op_call(mlp, in.data(), 15, outs.data(), 7, &act, 1, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(outs_data[0], 3.f);
  outs[3] = &full.t;
  EXPECT_EQ(dlfuse_op_call(mlp, in.data(), 15, outs.data(), 7, &act, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'h2': shape is [5, 2]; expected [0] (layer 3 does not exist");
}

TEST(OpSchema, AnOpWithoutSchemaHasNone) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, UNIT_OP_SCALE);
  dlfuse_op_schema_t s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  EXPECT_EQ(dlfuse_op_schema(op, &s), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "has no schema");
  Shape x({2});
  EXPECT_EQ(infer(op, {&x.t}, 1).status, DLFUSE_STATUS_NOT_FOUND);
  EXPECT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS);
}

// ---- a plugin's own op ----------------------------------------------------------------------

constexpr int32_t kScaleKey = 1001;  // cxx_example_outer's SCALE

dlfuse_status_t load_example(dlfuse_registry_t reg, int32_t* index = nullptr) {
  return dlfuse_registry_load(reg, DLFUSE_UNIT_PLUGIN_DIR "/examples/libdlfuse_cxx_example.so", index);
}

TEST(DeclaredOp, IsListedWithItsSchema) {
  Registry reg;
  int32_t index = -1;
  ASSERT_EQ(load_example(reg, &index), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS + 1);
  const dlfuse_op_schema_t s = schema_at(reg, DLFUSE_NUM_CORE_OPS);
  EXPECT_STREQ(s.name, "cxx_example_outer");
  EXPECT_EQ(s.plugin, index);
  EXPECT_EQ(s.since_minor, 2u);
  ASSERT_EQ(s.num_inputs, 2);
  EXPECT_STREQ(s.inputs[1].name, "y");
  ASSERT_EQ(s.num_outputs, 1);
  EXPECT_EQ(s.outputs[0].shape_rule, DLFUSE_SHAPE_CALLBACK);
  ASSERT_EQ(s.num_attrs, 1);
  EXPECT_STREQ(s.attrs[0].name, "SCALE");
  EXPECT_EQ(s.attrs[0].default_value.key, kScaleKey);
  EXPECT_EQ(s.attrs[0].default_value.value.f64, 1.0);
  dlfuse_op_schema_t by_handle;
  std::memset(&by_handle, 0, sizeof by_handle);
  by_handle.struct_size = sizeof by_handle;
  ASSERT_EQ(dlfuse_op_schema(get_op(reg, "cxx_example_outer"), &by_handle), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(by_handle.inputs, s.inputs);
  // Loading the same file again declares nothing new.
  ASSERT_EQ(load_example(reg), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS + 1);
}

TEST(DeclaredOp, RunsByNameAgainstAFloat64Reference) {
  Registry reg;
  ASSERT_EQ(load_example(reg), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "cxx_example_outer");
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  Tensor x({5}, f64()), y({7}, f64());
  double* xs = static_cast<double*>(x.storage());
  double* ys = static_cast<double*>(y.storage());
  for (int i = 0; i < 5; ++i) xs[i] = dist(rng);
  for (int j = 0; j < 7; ++j) ys[j] = dist(rng);
  const double scale = dist(rng);

  const auto shape = infer(op, {x.dl(), y.dl()}, 1, {attr_f64(kScaleKey, scale)});
  ASSERT_EQ(shape.status, DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(shape.shapes[0], (Dims{5, 7}));
  EXPECT_EQ(shape.dtypes[0].bits, 64);
  Tensor out(shape.shapes[0], f64());
  double* os = static_cast<double*>(out.storage());
  for (int k = 0; k < 35; ++k) os[k] = std::nan("");  // poisoned: every element must be written
  const DLTensor* in[2] = {x.dl(), y.dl()};
  DLTensor* outs[1] = {out.dl()};
  const dlfuse_attr_t attrs[1] = {attr_f64(kScaleKey, scale)};
  ASSERT_EQ(dlfuse_op_call(op, in, 2, outs, 1, attrs, 1, nullptr), DLFUSE_STATUS_OK) << last_error();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) {
      const double ref = scale * xs[i] * ys[j];
      EXPECT_NEAR(os[i * 7 + j], ref, 1e-12 * std::max(1.0, std::fabs(ref))) << i << "," << j;
    }
  // SCALE defaults to 1.
  ASSERT_EQ(dlfuse_op_call(op, in, 2, outs, 1, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_NEAR(os[8], xs[1] * ys[1], 1e-12);
}

TEST(DeclaredOp, CallsAreValidatedByTheSchema) {
  Registry reg;
  ASSERT_EQ(load_example(reg), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "cxx_example_outer");
  Tensor x({3}, f64()), y({4}, f64()), wrong({4, 3}, f64()), x2({3, 1}, f64()), out({3, 4}, f64());
  const DLTensor* in[2] = {x.dl(), y.dl()};
  DLTensor* bad_out[1] = {wrong.dl()};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, bad_out, 1, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'out'");
  EXPECT_MSG_SHAPE(last_error(), 3, 4);
  DLTensor* outs[1] = {out.dl()};
  EXPECT_EQ(dlfuse_op_call(op, in, 1, outs, 1, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "num_inputs is 1; expected 2");
  const dlfuse_attr_t unknown[1] = {attr_f64(7, 1.0)};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, outs, 1, unknown, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "expected one of SCALE (1001)");
  const dlfuse_attr_t as_int[1] = {attr_i64(kScaleKey, 2)};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, outs, 1, as_int, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "attribute SCALE: type is INT64; expected FLOAT64");
  // The shape callback's own refusal comes back with its message.
  const DLTensor* in2[2] = {x2.dl(), y.dl()};
  EXPECT_EQ(dlfuse_op_call(op, in2, 2, outs, 1, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "x: expected 1 dim, got 2 dims");
  const DLTensor* missing[2] = {x.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, missing, 2, outs, 1, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'y'");
}

// ---- declared ops' rules (unit_decl: out = BROADCAST(x, y) and may be x; sum LIKE x, reducible)

TEST(DeclaredOp, NamedRulesValidateCalls) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_decl"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "unit_declared");
  Probe probe("unit_decl");
  probe.reset();
  Tensor x({3, 1}), y({1, 4}), out({3, 4}), sum({1}), wrong({4, 3}), wide_sum({3, 4});
  const auto inferred = infer(op, {x.dl(), y.dl()}, 2);
  ASSERT_EQ(inferred.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(inferred.shapes[0], (Dims{3, 4}));
  EXPECT_EQ(inferred.shapes[1], (Dims{3, 1}));
  const DLTensor* in[2] = {x.dl(), y.dl()};
  DLTensor* outs[2] = {out.dl(), sum.dl()};
  ASSERT_EQ(dlfuse_op_call(op, in, 2, outs, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  const unit_record_t r = probe.record();
  EXPECT_EQ(r.kernel_calls, 1);
  ASSERT_EQ(r.num_attrs, 1);  // every attribute, its default filled in
  EXPECT_EQ(r.attrs[0].key, 7);
  EXPECT_EQ(r.attrs[0].value.i64, 2);

  DLTensor* bad_out[2] = {wrong.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, bad_out, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'out'");
  EXPECT_MSG_HAS(last_error(), "rule BROADCAST of 'x', 'y'");
  DLTensor* bad_sum[2] = {out.dl(), wide_sum.dl()};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, bad_sum, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'sum'");
  EXPECT_MSG_HAS(last_error(), "broadcasts to");
  DLTensor* no_out[2] = {nullptr, sum.dl()};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, no_out, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'out' is NULL");
  const dlfuse_attr_t too_big[1] = {attr_i64(7, 5)};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, outs, 2, too_big, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "attribute FACTOR is 5; expected 1..4");

  // y is optional: out is then like x, and may be x itself (its alias_input); not y.
  Tensor x2({3, 4}), y2({4});
  const DLTensor* only_x[2] = {x2.dl(), nullptr};
  DLTensor* in_place[2] = {x2.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, only_x, 2, in_place, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  const DLTensor* xy2[2] = {x2.dl(), y2.dl()};
  EXPECT_EQ(dlfuse_op_call(op, xy2, 2, in_place, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  Tensor y3({3, 4});
  const DLTensor* xy3[2] = {x2.dl(), y3.dl()};
  DLTensor* onto_y[2] = {y3.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, xy3, 2, onto_y, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "overlaps input 'y'");
}

TEST(DeclaredOp, ConflictingMalformedOrCoreSchemasRefuseThePlugin) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_decl"), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(reg.load("unit_decl_other"), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "op 'unit_declared' is declared with another schema by plugin 'unit_decl'");
  EXPECT_EQ(reg.load("unit_decl_bad"), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "rule MATMUL reads exactly two inputs");
  EXPECT_EQ(reg.load("unit_decl_core"), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'matmul_add_activation', a core op");
  EXPECT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS + 1);
  // The refused ones serve nothing; the first declaration stands.
  const dlfuse_op_schema_t s = schema_at(reg, DLFUSE_NUM_CORE_OPS);
  EXPECT_EQ(s.attrs[0].default_value.value.i64, 2);
  EXPECT_EQ(plugin_info(reg, 1).available, 0);
}

// ---- unit_decl_bwd: grad_out, x, y -> grad_x, grad_y, each optional; each output's shape
// callback checks that its own input broadcasts to grad_out.

TEST(DeclaredOp, ShapeCallbacksOfAbsentOutputsStillCheckTheInputs) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_decl_bwd"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "unit_product_backward");
  Probe probe("unit_decl_bwd");
  probe.reset();
  Tensor g({3, 4}), x({5}), y({4}), grad_y({4});
  // grad_x is not wanted, and x does not broadcast to grad_out: only grad_x's rule says so.
  const DLTensor* bad_in[3] = {g.dl(), x.dl(), y.dl()};
  DLTensor* only_grad_y[2] = {nullptr, grad_y.dl()};
  EXPECT_EQ(dlfuse_op_call(op, bad_in, 3, only_grad_y, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, "unit_product_backward");
  EXPECT_MSG_HAS(msg, "argument 'x'");
  EXPECT_MSG_HAS(msg, "shape is [5]");                                           // actual
  EXPECT_MSG_HAS(msg, "expected a shape that broadcasts to grad_out's [3, 4]");  // expected
  EXPECT_EQ(probe.record().kernel_calls, 0);
  // Inference refuses the same inputs with the same message.
  EXPECT_EQ(infer(op, {g.dl(), x.dl(), y.dl()}, 2).status, DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(last_error(), msg);
  // Both outputs absent: the inputs are still checked (such a call runs no kernel anyway).
  DLTensor* none[2] = {nullptr, nullptr};
  EXPECT_EQ(dlfuse_op_call(op, bad_in, 3, none, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'x'");

  // A consistent x with grad_x absent runs, and so does one with grad_x present.
  Tensor x_ok({1, 4}), grad_x({1, 4});
  const DLTensor* in[3] = {g.dl(), x_ok.dl(), y.dl()};
  ASSERT_EQ(dlfuse_op_call(op, in, 3, only_grad_y, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(probe.record().kernel_calls, 1);
  DLTensor* both[2] = {grad_x.dl(), grad_y.dl()};
  ASSERT_EQ(dlfuse_op_call(op, in, 3, both, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(probe.record().kernel_calls, 2);
  // y that does not broadcast, with grad_y absent: refused the same way.
  Tensor y_bad({3});
  const DLTensor* bad_y[3] = {g.dl(), x_ok.dl(), y_bad.dl()};
  DLTensor* only_grad_x[2] = {grad_x.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, bad_y, 3, only_grad_x, 2, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'y': shape is [3]; expected a shape that broadcasts to grad_out's [3, 4]");
  EXPECT_EQ(probe.record().kernel_calls, 2);
}

TEST(DeclaredOp, AnAbsentOutputsNamedRuleAcceptsAValidCall) {
  // unit_decl's sum (LIKE x) is optional: its rule runs with it absent, and accepts.
  Registry reg;
  ASSERT_EQ(reg.load("unit_decl"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "unit_declared");
  Tensor x({3, 1}), y({1, 4}), out({3, 4});
  const DLTensor* in[2] = {x.dl(), y.dl()};
  DLTensor* no_sum[2] = {out.dl(), nullptr};
  EXPECT_EQ(dlfuse_op_call(op, in, 2, no_sum, 2, nullptr, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
}

TEST(DeclaredOp, NamesAreLettersOfEitherCaseDigitsAndUnderscores) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_decl_cased"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, "unit_Declared_9");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS + 1);
  EXPECT_STREQ(schema_at(reg, DLFUSE_NUM_CORE_OPS).name, "unit_Declared_9");
  EXPECT_EQ(reg.load("unit_decl_dash"), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "schema name is invalid; expected 1-64 characters of [A-Za-z0-9_]");
  EXPECT_EQ(op_count(reg), DLFUSE_NUM_CORE_OPS + 1);
}

// ---- priorities per dtype -------------------------------------------------------------------

TEST(DtypePriority, EachDtypeGoesToItsHighestPriority) {
  Registry reg;
  int32_t a = -1, b = -1;
  ASSERT_EQ(reg.load("unit_prio_a", &a), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(reg.load("unit_prio_b", &b), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = get_op(reg, UNIT_OP_SCALE);
  int32_t chosen = -1;
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, b);  // float32: -5 beats -10
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f64(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, a);  // float64: -1 beats -20
  // A preference still comes first.
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_prio_b"), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f64(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, b);

  dlfuse_kernel_info_t k;
  std::memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  ASSERT_EQ(dlfuse_registry_kernel_info(reg, a, 0, &k), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(k.num_dtypes, 2);
  ASSERT_NE(k.dtype_priorities, nullptr);
  EXPECT_EQ(k.dtype_priorities[0], -10);
  EXPECT_EQ(k.dtype_priorities[1], -1);
}

TEST(DtypePriority, AnOlderTableHasItsOnePriorityForEveryDtype) {
  Registry reg;
  int32_t e = -1;
  ASSERT_EQ(reg.load("unit_echo", &e), DLFUSE_STATUS_OK) << last_error();
  dlfuse_kernel_info_t k;
  std::memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  ASSERT_EQ(dlfuse_registry_kernel_info(reg, e, 0, &k), DLFUSE_STATUS_OK) << last_error();
  ASSERT_NE(k.dtype_priorities, nullptr);
  for (int32_t i = 0; i < k.num_dtypes; ++i) EXPECT_EQ(k.dtype_priorities[i], k.priority);
}

}  // namespace
}  // namespace unit

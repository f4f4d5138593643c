// Validation: every bad call is refused before the plugin sees it, and the message names
// the argument and the expected and actual values.
#include "unit_common.h"

namespace unit {
namespace {

// Runs `expr`, expects `status`, and that the plugin was not called; leaves the message
// in `msg` for further checks.
#define EXPECT_REFUSED(expr, status)                                                  \
  do {                                                                                \
    const int64_t calls_before_ = calls();                                            \
    const dlfuse_status_t got_ = (expr);                                              \
    msg = last_error();                                                               \
    EXPECT_EQ(got_, (status)) << "got " << dlfuse_status_string(got_) << ": " << msg; \
    EXPECT_FALSE(msg.empty()) << "no message";                                        \
    EXPECT_EQ(calls(), calls_before_) << "the plugin was called on a refused call";   \
  } while (0)

class Validation : public EchoTest {
 protected:
  dlfuse_status_t ama(AmaCase& c, double mul = 1.0, dlfuse_activation_t act = DLFUSE_ACT_RELU) {
    return dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, mul, act, c.out, nullptr);
  }
  dlfuse_status_t ama(DLTensor* x, DLTensor* y, DLTensor* bias, DLTensor* out) {
    return dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr);
  }
  dlfuse_status_t mm(DLTensor* a, DLTensor* b, DLTensor* bias, DLTensor* out) {
    return dlfuse_matmul_add_relu(reg, a, b, bias, out, 0, nullptr);
  }
  dlfuse_op_t op(const char* name) {
    dlfuse_op_t h = nullptr;
    EXPECT_EQ(dlfuse_op_get(reg, name, &h), DLFUSE_STATUS_OK) << last_error();
    return h;
  }
  std::string msg;
};

// ---- a valid call, so that the refusals below are refusals of the one thing changed ----

TEST_F(Validation, ValidCallReachesThePlugin) {
  AmaCase c;
  ASSERT_EQ(ama(c, 2.0), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 2.0, true));
  MmCase m;
  ASSERT_EQ(mm(m.a, m.b, m.bias, m.out), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 2);
  for (int64_t i = 0; i < m.M; ++i)
    for (int64_t j = 0; j < m.N; ++j) EXPECT_FLOAT_EQ(m.out.f()[i * m.N + j], m.expect(i, j));
}

// ---- add_mul_activation ------------------------------------------------------------

TEST_F(Validation, NullTensorNamed) {
  AmaCase c;
  EXPECT_REFUSED(ama(c.x, nullptr, c.bias, c.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
  EXPECT_REFUSED(ama(nullptr, c.y, c.bias, c.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "x");
  EXPECT_REFUSED(ama(c.x, c.y, nullptr, c.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
}

TEST_F(Validation, NullDataPointerRefused) {
  AmaCase c;
  c.y.dl()->data = nullptr;
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
}

TEST_F(Validation, DtypeMismatchNamesArgumentAndBothDtypes) {
  AmaCase c;
  Tensor y({2, 3}, f64());
  EXPECT_REFUSED(ama(c.x, y, c.bias, c.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
  EXPECT_MSG_HAS(msg, "float32");
  EXPECT_MSG_HAS(msg, "float64");
}

TEST_F(Validation, NonBroadcastableShapesNamed) {
  Tensor x({2, 3}), y({2, 4}), bias({1}), out({2, 3});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_SHAPE(msg, 2, 3);
  EXPECT_MSG_SHAPE(msg, 2, 4);
}

TEST_F(Validation, NonBroadcastableBiasNamed) {
  Tensor x({2, 3}), y({2, 3}), bias({2}), out({2, 3});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
  EXPECT_MSG_SHAPE(msg, 2);
}

TEST_F(Validation, WrongOutputShapeGivesExpectedAndActual) {
  AmaCase c;
  Tensor out({3, 2});
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
  EXPECT_MSG_SHAPE(msg, 2, 3);
  EXPECT_MSG_SHAPE(msg, 3, 2);
}

TEST_F(Validation, OutputLargerThanBroadcastShapeRefused) {
  // out must be exactly broadcast(x, y, bias), not something the inputs broadcast to.
  AmaCase c;
  Tensor out({4, 2, 3});
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
  EXPECT_MSG_SHAPE(msg, 2, 3);
  EXPECT_MSG_SHAPE(msg, 4, 2, 3);
}

TEST_F(Validation, NegativeStrideRefused) {
  AmaCase c;
  c.x.strides({-3, 1});
  c.x.dl()->byte_offset = 3 * sizeof(float);  // points at the last row: valid memory
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "x");
  EXPECT_MSG_IHAS(msg, "stride");
  EXPECT_MSG_HAS(msg, "-3");
}

TEST_F(Validation, NegativeDimRefused) {
  Tensor x({2, -3}), y({2, 3}), bias({3}), out({2, 3});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "x");
  EXPECT_MSG_HAS(msg, "-3");
}

TEST_F(Validation, ZeroStrideInputAccepted) {
  // A stride of 0 (a broadcast view) is allowed on inputs.
  AmaCase c;
  c.y.strides({0, 1});
  ASSERT_EQ(ama(c), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  for (int64_t i = 0; i < 6; ++i) {
    const double p = double(c.x.f()[i]) + double(c.bias.f()[i % 3]) + double(c.y.f()[i % 3]);
    EXPECT_FLOAT_EQ(c.out.f()[i], static_cast<float>(p > 0 ? p : 0)) << i;
  }
}

TEST_F(Validation, ZeroStrideOutputRefused) {
  // An output with a 0 stride writes one element twice: it overlaps itself.
  AmaCase c;
  c.out.strides({0, 1});
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
}

TEST_F(Validation, DeviceTypeMismatchNamed) {
  AmaCase c;
  c.y.dl()->device = DLDevice{kDLCUDA, 0};
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
}

TEST_F(Validation, DeviceIdMismatchNamed) {
  AmaCase c;
  c.bias.dl()->device = DLDevice{kDLCPU, 1};
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
}

TEST_F(Validation, LanesOtherThanOneRefused) {
  const DLDataType v2{kDLFloat, 32, 2};
  Tensor x({2, 3}, v2), y({2, 3}, v2), bias({3}, v2), out({2, 3}, v2);
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "lanes");
}

TEST_F(Validation, SizeOverflowRefused) {
  const int64_t huge = int64_t{1} << 62;
  Tensor x({huge, 4}), y({huge, 4}), bias({4}), out({huge, 4});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, std::to_string(huge));
}

TEST_F(Validation, ElementCountOverflowRefused) {
  // Each dim fits, the product does not fit in int64.
  const int64_t big = int64_t{1} << 32;
  Tensor x({big, big}), y({1}), bias({1}), out({big, big});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST_F(Validation, StrideByteOverflowRefused) {
  // The element offset fits in int64; in bytes (x 4) it does not.
  AmaCase c;
  c.y.strides({int64_t{1} << 61, 1});
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
}

TEST_F(Validation, PartialOverlapOfOutWithInputRefused) {
  AmaCase c;
  Tensor out({2, 3});
  out.dl()->data = c.x.dl()->data;
  out.dl()->byte_offset = sizeof(float);  // one element into x
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
  EXPECT_MSG_HAS(msg, "x");
  EXPECT_MSG_IHAS(msg, "overlap");
}

TEST_F(Validation, OutOverlappingBiasRefused) {
  AmaCase c;
  Tensor out({2, 3});
  out.dl()->data = c.bias.dl()->data;  // out's first row is bias
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
}

TEST_F(Validation, OutExactlyYIsNotInPlace) {
  // Only out == x is in place; out == y is an overlap.
  AmaCase c;
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, c.y), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
}

TEST_F(Validation, OutSameMemoryAsXButOtherStridesRefused) {
  // Same data pointer, transposed view: not "exactly x".
  Tensor x({3, 3}), y({3, 3}), bias({3});
  Tensor out({3, 3});
  out.dl()->data = x.dl()->data;
  out.strides({1, 3});
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
}

TEST_F(Validation, ExactInPlaceOutEqualsXAccepted) {
  AmaCase c;
  AmaCase ref;
  ASSERT_EQ(ama(c.x, c.y, c.bias, c.x), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.x.f()[i], ref.expect(i, 1.0, true)) << i;

  // A distinct DLTensor struct describing exactly x's memory is in place too.
  AmaCase d;
  Tensor alias({2, 3});
  alias.dl()->data = d.x.dl()->data;
  ASSERT_EQ(ama(d.x, d.y, d.bias, alias), DLFUSE_STATUS_OK) << last_error();
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(d.x.f()[i], ref.expect(i, 1.0, true)) << i;
}

// "Exactly x" compares the views (docs/abi.md, "Validation"): NULL strides equal their
// compact values, and a size-1 dim's stride is never compared.
TEST_F(Validation, InPlaceWithExplicitCompactStridesAgainstNullAccepted) {
  AmaCase c, ref;
  Tensor alias({2, 3});
  alias.dl()->data = c.x.dl()->data;
  alias.strides({3, 1});  // x has NULL strides
  ASSERT_EQ(ama(c.x, c.y, c.bias, alias), DLFUSE_STATUS_OK) << last_error();
  for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c.x.f()[i], ref.expect(i, 1.0, true)) << i;
}

TEST_F(Validation, InPlaceIgnoresTheStrideOfASizeOneDim) {
  Tensor x({1, 3}), y({1, 3}), bias({3}), alias({1, 3});
  x.fill([](int64_t i) { return static_cast<float>(i) - 1.0f; });
  alias.dl()->data = x.dl()->data;
  alias.strides({1000, 1});  // x: NULL strides, {3, 1}
  ASSERT_EQ(ama(x, y, bias, alias), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  EXPECT_FLOAT_EQ(x.f()[0], 0.0f);  // relu(-1)
  EXPECT_FLOAT_EQ(x.f()[2], 1.0f);
}

TEST_F(Validation, InPlaceOfAnotherDtypeIsRefusedBeforeOverlap) {
  // Same memory, other dtype: the call's one dtype is checked first, so the message
  // names the dtype (the overlap would be refused as well).
  AmaCase c;
  Tensor alias({2, 3}, DLDataType{kDLInt, 32, 1});
  alias.dl()->data = c.x.dl()->data;
  EXPECT_REFUSED(ama(c.x, c.y, c.bias, alias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "dtype");
}

// NULL strides are accepted (compact row-major) although DLPack >= 1.2 asks producers to
// set them: the same call with explicit compact strides gives the same result.
TEST_F(Validation, NullStridesMeanCompactRowMajor) {
  AmaCase implicit, explicit_;
  for (Tensor* t : {&explicit_.x, &explicit_.y, &explicit_.out}) t->strides({3, 1});
  explicit_.bias.strides({1});
  ASSERT_EQ(ama(implicit), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(ama(explicit_), DLFUSE_STATUS_OK) << last_error();
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(implicit.out.f()[i], explicit_.out.f()[i]) << i;
  EXPECT_EQ(calls(), 2);
}

TEST_F(Validation, InputsMayAliasEachOther) {
  AmaCase c;
  ASSERT_EQ(ama(c.x, c.x, c.bias, c.out), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(Validation, UnknownActivationRefused) {
  AmaCase c;
  EXPECT_REFUSED(ama(c, 1.0, static_cast<dlfuse_activation_t>(DLFUSE_ACT_COUNT)), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "activation");
  EXPECT_MSG_HAS(msg, std::to_string(DLFUSE_ACT_COUNT));
  EXPECT_REFUSED(ama(c, 1.0, static_cast<dlfuse_activation_t>(100)), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "100");
}

TEST_F(Validation, UnsupportedDtypeNamesOpDeviceAndDtype) {
  Tensor x({2, 3}, f16()), y({2, 3}, f16()), bias({3}, f16()), out({2, 3}, f16());
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_MSG_HAS(msg, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_MSG_IHAS(msg, "cpu");
  EXPECT_MSG_HAS(msg, "float16");
}

TEST_F(Validation, UnsupportedDeviceNamed) {
  // Consistent tensors on a device no plugin serves.
  AmaCase c;
  for (DLTensor* t : {c.x.dl(), c.y.dl(), c.bias.dl(), c.out.dl()}) t->device = DLDevice{kDLCUDA, 0};
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_MSG_HAS(msg, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_MSG_IHAS(msg, "cuda");
}

// ---- the generic call ----------------------------------------------------------------

TEST_F(Validation, WrongInputCountRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 2, out, 1, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "input");
  EXPECT_MSG_HAS(msg, "3");
  EXPECT_MSG_HAS(msg, "2");
}

TEST_F(Validation, WrongOutputCountRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out, c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 2, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "output");
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 0, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST_F(Validation, NullArraysRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  EXPECT_REFUSED(dlfuse_op_call(h, nullptr, 3, out, 1, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, nullptr, 1, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, nullptr, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, attrs, -1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  // A NULL entry where the forward needs its output.
  DLTensor* no_out[] = {nullptr};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, no_out, 1, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
}

TEST_F(Validation, UnknownAttributeKeyRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU), attr_i64(99, 1)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, attrs, 2, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "99");
}

TEST_F(Validation, AttributeOfAnotherOpRefused) {
  // ALLOW_TF32 is a key, but not one add_mul_activation takes.
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU),
                                 attr_i64(DLFUSE_ATTR_ALLOW_TF32, 1)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, attrs, 2, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST_F(Validation, AttributeOfWrongTypeRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t a1[] = {attr_f64(DLFUSE_ATTR_ACTIVATION, 1.0)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, a1, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "activation");
  const dlfuse_attr_t a2[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU), attr_i64(DLFUSE_ATTR_MULTIPLIER, 2)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, a2, 2, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "multiplier");
}

TEST_F(Validation, MissingRequiredActivationRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "activation");
  const dlfuse_attr_t only_mul[] = {attr_f64(DLFUSE_ATTR_MULTIPLIER, 2.0)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, only_mul, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "activation");
}

TEST_F(Validation, UnknownActivationThroughAttributeRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, 42)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, attrs, 1, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "42");
}

TEST_F(Validation, UnknownOpNotFound) {
  dlfuse_op_t h = nullptr;
  const int64_t before = calls();
  EXPECT_EQ(dlfuse_op_get(reg, "no_such_op", &h), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_MSG_HAS(last_error(), "no_such_op");
  EXPECT_EQ(calls(), before);
}

// ---- matmul_add_relu -------------------------------------------------------------------

TEST_F(Validation, MatmulOneDimOperandRefused) {
  MmCase m;
  Tensor a1({3});
  EXPECT_REFUSED(mm(a1, m.b, m.bias, m.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "a");
  EXPECT_MSG_HAS(msg, "2");
  Tensor b1({3});
  EXPECT_REFUSED(mm(m.a, b1, m.bias, m.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "b");
}

TEST_F(Validation, MatmulKMismatchRefused) {
  Tensor a({2, 3}), b({4, 5}), bias({5}), out({2, 5});
  EXPECT_REFUSED(mm(a, b, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  // Names K (or both shapes) and both values.
  EXPECT_TRUE(contains(msg, "K") || (has_shape(msg, {2, 3}) && has_shape(msg, {4, 5}))) << msg;
  EXPECT_MSG_HAS(msg, "3");
  EXPECT_MSG_HAS(msg, "4");
}

TEST_F(Validation, MatmulBatchNotBroadcastableRefused) {
  Tensor a({2, 2, 3}), b({3, 3, 4}), bias({4}), out({2, 2, 4});
  EXPECT_REFUSED(mm(a, b, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_SHAPE(msg, 2, 2, 3);
  EXPECT_MSG_SHAPE(msg, 3, 3, 4);
}

TEST_F(Validation, MatmulBiasNotBroadcastableRefused) {
  MmCase m;  // out [2, 4]
  Tensor bias({3});
  EXPECT_REFUSED(mm(m.a, m.b, bias, m.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
  EXPECT_MSG_SHAPE(msg, 3);
}

TEST_F(Validation, MatmulWrongOutputShapeRefused) {
  MmCase m;
  Tensor out({2, 5});
  EXPECT_REFUSED(mm(m.a, m.b, m.bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
  EXPECT_MSG_SHAPE(msg, 2, 4);
  EXPECT_MSG_SHAPE(msg, 2, 5);
}

TEST_F(Validation, MatmulBatchedBroadcastAccepted) {
  Tensor a({2, 2, 3}), b({3, 4}), bias({1, 4}), out({2, 2, 4});
  a.fill([](int64_t i) { return 0.5f * static_cast<float>(i % 4); });
  b.fill([](int64_t i) { return 0.25f * static_cast<float>(i % 3) - 0.25f; });
  bias.fill(0.5f);
  ASSERT_EQ(mm(a, b, bias, out), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  for (int64_t bt = 0; bt < 2; ++bt)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        double acc = 0.5;
        for (int64_t k = 0; k < 3; ++k) acc += double(a.f()[bt * 6 + i * 3 + k]) * double(b.f()[k * 4 + j]);
        EXPECT_FLOAT_EQ(out.f()[bt * 8 + i * 4 + j], static_cast<float>(acc > 0 ? acc : 0));
      }
}

TEST_F(Validation, MatmulDtypeMismatchNamed) {
  MmCase m;
  Tensor bias({4}, f64());
  EXPECT_REFUSED(mm(m.a, m.b, bias, m.out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
  EXPECT_MSG_HAS(msg, "float64");
}

TEST_F(Validation, MatmulOutOverlappingARefused) {
  // out [2, 4] laid over a [4, 3] (12 floats) from its second element.
  Tensor a({4, 3}), b({3, 4}), bias({4}), out({2, 4});
  out.dl()->data = a.dl()->data;
  out.dl()->byte_offset = sizeof(float);
  EXPECT_REFUSED(mm(a, b, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
}

TEST_F(Validation, MatmulInPlaceNotAllowed) {
  // matmul_add_relu has no in-place form: out exactly bias is an overlap.
  Tensor a({2, 2}), b({2, 2}), bias({2, 2});
  EXPECT_REFUSED(mm(a, b, bias, bias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "bias");
}

// ---- the backward ops -----------------------------------------------------------------

TEST_F(Validation, AmaBackwardShapesChecked) {
  AmaCase c;
  Tensor g({2, 3}), gx({2, 3}), gy({2, 3}), gb({3});
  auto bwd = [&](DLTensor* go, DLTensor* gxx, DLTensor* gyy, DLTensor* gbb) {
    return dlfuse_add_mul_activation_backward(reg, go, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, gxx, gyy, gbb, nullptr);
  };
  ASSERT_EQ(bwd(g, gx, gy, gb), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);

  Tensor bad_g({3, 2});
  EXPECT_REFUSED(bwd(bad_g, gx, gy, gb), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_out");
  Tensor bad_gx({2, 4});
  EXPECT_REFUSED(bwd(g, bad_gx, gy, gb), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_x");
  EXPECT_MSG_SHAPE(msg, 2, 4);
  // grad_bias has bias's shape [3], not out's.
  Tensor bad_gb({2, 3});
  EXPECT_REFUSED(bwd(g, gx, gy, bad_gb), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_bias");
  EXPECT_MSG_SHAPE(msg, 3);
}

TEST_F(Validation, AmaBackwardOutputsMustNotOverlap) {
  AmaCase c;
  Tensor g({2, 3}), gx({2, 3}), gb({3});
  // grad_y is grad_x: two outputs on the same memory.
  EXPECT_REFUSED(
      dlfuse_add_mul_activation_backward(reg, g, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, gx, gx, gb, nullptr),
      DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_y");
  // grad_x over grad_out (an input).
  EXPECT_REFUSED(
      dlfuse_add_mul_activation_backward(reg, g, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, g, nullptr, nullptr, nullptr),
      DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_x");
}

TEST_F(Validation, AmaBackwardUnknownActivationRefused) {
  AmaCase c;
  Tensor g({2, 3}), gx({2, 3});
  EXPECT_REFUSED(dlfuse_add_mul_activation_backward(reg, g, c.x, c.y, c.bias, 1.0, static_cast<dlfuse_activation_t>(9),
                                                    gx, nullptr, nullptr, nullptr),
                 DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "9");
}

TEST_F(Validation, MatmulBackwardShapesChecked) {
  MmCase m;  // a [2,3], b [3,4], out [2,4]
  Tensor g({2, 4}), ga({2, 3}), gb({3, 4}), gbias({4});
  auto bwd = [&](DLTensor* go, DLTensor* out, DLTensor* gaa, DLTensor* gbb, DLTensor* gbi) {
    return dlfuse_matmul_add_relu_backward(reg, go, m.a, m.b, out, gaa, gbb, gbi, 0, nullptr);
  };
  ASSERT_EQ(bwd(g, m.out, ga, gb, gbias), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);

  Tensor bad_ga({3, 2});
  EXPECT_REFUSED(bwd(g, m.out, bad_ga, gb, gbias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_a");
  EXPECT_MSG_SHAPE(msg, 2, 3);
  EXPECT_MSG_SHAPE(msg, 3, 2);
  Tensor bad_gb({4, 3});
  EXPECT_REFUSED(bwd(g, m.out, ga, bad_gb, gbias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_b");
  Tensor bad_out({2, 5});
  EXPECT_REFUSED(bwd(g, bad_out, ga, gb, gbias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "out");
  Tensor bad_g({4, 2});
  EXPECT_REFUSED(bwd(bad_g, m.out, ga, gb, gbias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_out");
  // grad_bias must broadcast to out (it takes bias's shape, which is unknown here).
  Tensor bad_gbias({3});
  EXPECT_REFUSED(bwd(g, m.out, ga, gb, bad_gbias), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_bias");
}

TEST_F(Validation, MatmulBackwardOutputOverlapRefused) {
  MmCase m;
  Tensor g({2, 4}), gb({3, 4});
  Tensor ga({2, 3});
  ga.dl()->data = g.dl()->data;  // grad_a written over grad_out
  EXPECT_REFUSED(dlfuse_matmul_add_relu_backward(reg, g, m.a, m.b, m.out, ga, gb, nullptr, 0, nullptr),
                 DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "grad_a");
}

// ---- more per-tensor checks (docs/abi.md, "Validation") ---------------------------------

TEST_F(Validation, MisalignedFirstElementRefused) {
  AmaCase c;
  c.y.dl()->byte_offset = 2;  // half a float32
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "y");
  EXPECT_MSG_HAS(msg, "aligned to 4 bytes");  // expected, then the actual address and offset
  EXPECT_MSG_HAS(msg, "byte_offset 2)");
}

TEST_F(Validation, DeviceIdBeyondDeviceCountRefused) {
  // Every tensor on CPU device 1; the plugin serves one CPU device.
  AmaCase c;
  for (DLTensor* t : {c.x.dl(), c.y.dl(), c.bias.dl(), c.out.dl()}) t->device = DLDevice{kDLCPU, 1};
  EXPECT_REFUSED(ama(c), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "1");
}

TEST_F(Validation, TooManyDimsRefused) {
  std::vector<int64_t> shape(17, 1);
  Tensor x(shape), y(shape), bias({1}), out(shape);
  EXPECT_REFUSED(ama(x, y, bias, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "17");
}

TEST_F(Validation, DuplicateAttributeRefused) {
  AmaCase c;
  dlfuse_op_t h = op(DLFUSE_OP_ADD_MUL_ACTIVATION);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU),
                                 attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_TANH)};
  EXPECT_REFUSED(dlfuse_op_call(h, in, 3, out, 1, attrs, 2, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_IHAS(msg, "activation");
}

TEST_F(Validation, AllowTf32OutOfRangeRefused) {
  MmCase m;
  EXPECT_REFUSED(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 7, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "7");
}

// ---- a third-party op: only the generic checks ------------------------------------------

class GenericOp : public Validation {
 protected:
  dlfuse_status_t scale(DLTensor* in, DLTensor* out) {
    const DLTensor* ins[] = {in};
    DLTensor* outs[] = {out};
    return dlfuse_op_call(op(UNIT_OP_SCALE), ins, 1, outs, 1, nullptr, 0, nullptr);
  }
};

TEST_F(GenericOp, RunsThroughOpCall) {
  Tensor in({2, 3}), out({2, 3});
  in.fill([](int64_t i) { return static_cast<float>(i); });
  ASSERT_EQ(scale(in, out), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 1);
  const unit_record_t r = probe->record();
  EXPECT_STREQ(r.op, UNIT_OP_SCALE);
  EXPECT_EQ(r.num_attrs, 0);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out.f()[i], 2.0f * static_cast<float>(i));
}

TEST_F(GenericOp, DtypeAndDeviceMismatchRefused) {
  Tensor in({2, 3}), out64({2, 3}, f64());
  EXPECT_REFUSED(scale(in, out64), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(msg, "float64");
  Tensor out_gpu({2, 3}, f32(), DLDevice{kDLCUDA, 0});
  EXPECT_REFUSED(scale(in, out_gpu), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST_F(GenericOp, OverlapRefusedAndNoInPlaceExemption) {
  Tensor in({2, 3});
  EXPECT_REFUSED(scale(in, in), DLFUSE_STATUS_INVALID_ARGUMENT);
  Tensor out({2, 3});
  out.dl()->data = in.dl()->data;
  out.dl()->byte_offset = sizeof(float);
  EXPECT_REFUSED(scale(in, out), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST_F(GenericOp, TensorChecksApply) {
  Tensor in({2, 3}), out({2, 3});
  in.strides({-3, 1});
  EXPECT_REFUSED(scale(in, out), DLFUSE_STATUS_INVALID_ARGUMENT);
  Tensor e_in({0, 3}), e_out({0, 3});
  ASSERT_EQ(scale(e_in, e_out), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(calls(), 0) << "zero-size outputs ran a kernel";
}

}  // namespace
}  // namespace unit

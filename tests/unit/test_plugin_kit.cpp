// The plugin kit (dlfuse/plugin_kit.hpp) on its own: the exception wall's mapping, attribute
// reads, views of DLTensors (NULL strides, byte_offset, broadcasting, transposition), the
// dims a gradient is reduced over, and the kernel table.
#include <dlfuse/plugin_kit.hpp>
#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

namespace kit = dlfuse::kit;

namespace {

DLTensor tensor(float* data, std::vector<int64_t>& shape, int64_t* strides, uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = int32_t(shape.size());
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape.data();
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}

TEST(PluginKit, GuardedMapsEveryThrowToAStatusAndMessage) {
  char err[64];
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] {}), DLFUSE_STATUS_OK);
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] { return DLFUSE_STATUS_UNSUPPORTED; }), DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] { kit::invalid("device_id", "0", "3"); }),
            DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STREQ(err, "p: device_id: expected 0, got 3");
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] { throw std::bad_alloc(); }), DLFUSE_STATUS_OUT_OF_MEMORY);
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] { throw std::runtime_error("boom"); }), DLFUSE_STATUS_INTERNAL);
  EXPECT_STREQ(err, "p: exception: boom");
  EXPECT_EQ(kit::guarded("p", err, sizeof err, [] { throw 42; }), DLFUSE_STATUS_INTERNAL);
  char small[8];  // truncated, still terminated
  kit::guarded("plugin", small, sizeof small, [] { kit::invalid("x", "y", "z"); });
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  EXPECT_EQ(kit::guarded("p", nullptr, 0, [] { throw 1; }), DLFUSE_STATUS_INTERNAL);  // no buffer: no write
}

TEST(PluginKit, AttributesAreTypedAndRangeChecked) {
  dlfuse_attr_t attrs[2]{};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION;
  attrs[0].type = DLFUSE_ATTR_INT64;
  attrs[0].value.i64 = DLFUSE_ACT_SILU;
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
  attrs[1].type = DLFUSE_ATTR_FLOAT64;
  attrs[1].value.f64 = 0.25;
  dlfuse_kernel_args_t args{};
  args.attrs = attrs;
  args.num_attrs = 2;
  EXPECT_EQ(kit::activation(&args), DLFUSE_ACT_SILU);
  EXPECT_EQ(kit::multiplier(&args), 0.25);
  EXPECT_EQ(kit::attr_int(&args, DLFUSE_ATTR_ALLOW_TF32, 7), 7);  // absent: the fallback
  attrs[0].value.i64 = DLFUSE_ACT_COUNT;
  EXPECT_THROW(kit::activation(&args), kit::Error);
  attrs[1].type = DLFUSE_ATTR_INT64;
  try {
    kit::multiplier(&args);
    FAIL() << "a wrong type must throw";
  } catch (const kit::Error& e) {
    EXPECT_EQ(e.status, DLFUSE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("MULTIPLIER: expected type FLOAT64"), std::string::npos) << e.what();
  }
}

// Messages name an attribute by ops.def's KEY; a key no core op has is "attribute".
TEST(PluginKit, AttributeNamesComeFromOpsDef) {
  EXPECT_STREQ(kit::attr_name(DLFUSE_ATTR_ACTIVATION), "ACTIVATION");
  EXPECT_STREQ(kit::attr_name(DLFUSE_ATTR_MULTIPLIER), "MULTIPLIER");
  EXPECT_STREQ(kit::attr_name(DLFUSE_ATTR_ALLOW_TF32), "ALLOW_TF32");
  EXPECT_STREQ(kit::attr_name(DLFUSE_ATTR_OUTPUT_ACTIVATION), "OUTPUT_ACTIVATION");
  EXPECT_STREQ(kit::attr_name(0), "attribute");
  EXPECT_STREQ(kit::attr_name(1000), "attribute");
}

// Argument names for messages: inputs then outputs, as ops.def lists them.
TEST(PluginKit, ArgumentNamesComeFromOpsDef) {
  const auto& r = kit::arg_names::matmul_add_relu;
  ASSERT_EQ(sizeof r / sizeof r[0], size_t(DLFUSE_NUM_INPUTS(matmul_add_relu) + DLFUSE_NUM_OUTPUTS(matmul_add_relu)));
  EXPECT_STREQ(r[DLFUSE_INPUT(matmul_add_relu, bias)], "bias");
  EXPECT_STREQ(r[DLFUSE_NUM_INPUTS(matmul_add_relu) + DLFUSE_OUTPUT(matmul_add_relu, out)], "out");
  const auto& b = kit::arg_names::add_mul_activation_backward;
  const int ni = DLFUSE_NUM_INPUTS(add_mul_activation_backward);
  EXPECT_STREQ(b[DLFUSE_INPUT(add_mul_activation_backward, out)], "out");
  EXPECT_STREQ(b[ni + DLFUSE_OUTPUT(add_mul_activation_backward, grad_bias)], "grad_bias");
  EXPECT_EQ(sizeof b / sizeof b[0], size_t(ni + DLFUSE_NUM_OUTPUTS(add_mul_activation_backward)));
}

TEST(PluginKit, ViewsHonourStridesOffsetsAndBroadcasting) {
  float data[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<int64_t> shape = {3, 4};
  DLTensor t = tensor(data, shape, nullptr, 4 * sizeof(float));
  const kit::View v(&t);
  EXPECT_EQ(v.strides, (kit::Dims{4, 1}));
  EXPECT_TRUE(v.is_compact());
  EXPECT_FALSE(v.is_transposed());
  EXPECT_EQ(v.base<float>()[0], 4.f);
  EXPECT_EQ(v.elem_offset(), 4);
  EXPECT_EQ(v.aligned_shape(3), (kit::Dims{1, 3, 4}));
  EXPECT_EQ(v.aligned_strides(3), (kit::Dims{0, 4, 1}));

  std::vector<int64_t> tshape = {4, 3};
  int64_t tstrides[2] = {1, 4};  // the transpose of a compact [3, 4]
  DLTensor tt = tensor(data, tshape, tstrides);
  EXPECT_TRUE(kit::View(&tt).is_transposed());

  std::vector<int64_t> row = {1, 4};
  DLTensor r = tensor(data, row, nullptr);
  EXPECT_EQ(kit::View(&r).aligned_strides(2), (kit::Dims{0, 1}));  // size-1 dim broadcasts

  std::vector<int64_t> empty = {0, 5};
  DLTensor e = tensor(nullptr, empty, nullptr, 64);
  EXPECT_EQ(kit::View(&e).numel(), 0);

  kit::Dims idx = {0, 0}, seen;
  do seen.push_back(kit::dot(idx, kit::Dims{10, 1}));
  while (kit::next_index(idx, kit::Dims{2, 3}));
  EXPECT_EQ(seen, (kit::Dims{0, 1, 2, 10, 11, 12}));
}

TEST(PluginKit, ReducedDimsFollowNumpyBroadcasting) {
  EXPECT_EQ(kit::reduced_dims({8, 5, 7}, {7}), (std::vector<int>{0, 1}));
  EXPECT_EQ(kit::reduced_dims({8, 5, 7}, {5, 1}), (std::vector<int>{0, 2}));
  EXPECT_EQ(kit::reduced_dims({8, 5, 7}, {8, 5, 7}), (std::vector<int>{}));
  EXPECT_EQ(kit::reduced_dims({1, 5}, {5}), (std::vector<int>{}));  // size-1 output dims sum nothing
}

dlfuse_status_t noop(void*, void*, const dlfuse_kernel_args_t*) { return DLFUSE_STATUS_OK; }

TEST(PluginKit, KernelTableFillsEveryEntry) {
  const kit::KernelTable table(kDLCPU, {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}}, 10,
                               {{DLFUSE_OP_MATMUL_ADD_RELU, noop}, {DLFUSE_OP_ADD_MUL_ACTIVATION, noop}});
  const dlfuse_kernel_t* k = nullptr;
  int32_t n = 0;
  char err[64];
  ASSERT_EQ(table.get(&k, &n, "p", err, sizeof err), DLFUSE_STATUS_OK);
  ASSERT_EQ(n, 2);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(k[i].struct_size, sizeof(dlfuse_kernel_t));
    EXPECT_EQ(k[i].device_type, kDLCPU);
    EXPECT_EQ(k[i].num_dtypes, 2);
    EXPECT_EQ(k[i].dtypes[1].bits, 64);
    EXPECT_EQ(k[i].priority, 10);
    EXPECT_EQ(k[i].fn, &noop);
  }
  EXPECT_STREQ(k[1].op, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_EQ(table.get(nullptr, &n, "p", err, sizeof err), DLFUSE_STATUS_INVALID_ARGUMENT);
}

}  // namespace

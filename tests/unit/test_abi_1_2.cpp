// ABI 1.2 on older plugins and callers: a 1.1 kernel table (without `schema` and
// `dtype_priorities`) and a 1.0 plugin load and serve; info structs of an older caller are
// filled only up to their struct_size; schema structs of a newer caller are accepted.
#include "unit_common.h"

namespace unit {
namespace {

TEST(Abi12, A11KernelTableLoadsAndServes) {
  Registry reg;
  int32_t index = -1;
  ASSERT_EQ(reg.load("unit_v11layout", &index), DLFUSE_STATUS_OK) << last_error();
  const PluginInfo info = plugin_info(reg, index);
  EXPECT_EQ(info.abi_minor, 1u);
  AmaCase c;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  for (int64_t i = 0; i < c.out.numel(); ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 1.0, true)) << i;
  // The 1.1 op and its appended-input flag still reach it.
  Tensor a({2, 3}), b({3, 4}), bias({4}), out({2, 4});
  EXPECT_EQ(dlfuse_matmul_add_residual(reg, a, b, bias, out, out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  for (int32_t k = 0; k < info.num_kernels; ++k) {
    dlfuse_kernel_info_t ki{};
    ki.struct_size = sizeof ki;
    ASSERT_EQ(dlfuse_registry_kernel_info(reg, index, k, &ki), DLFUSE_STATUS_OK) << last_error();
    ASSERT_NE(ki.dtype_priorities, nullptr);
    for (int32_t d = 0; d < ki.num_dtypes; ++d) EXPECT_EQ(ki.dtype_priorities[d], ki.priority) << ki.op;
    if (std::string(ki.op) == DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD)
      EXPECT_EQ(ki.flags, DLFUSE_KERNEL_TAKES_V1_1_INPUTS);
  }
  int32_t ops = -1;
  ASSERT_EQ(dlfuse_registry_op_count(reg, &ops), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(ops, DLFUSE_NUM_CORE_OPS);  // it declared nothing
}

TEST(Abi12, A10PluginServesItsOpsBesideA12One) {
  Registry reg;
  int32_t v10 = -1;
  ASSERT_EQ(reg.load("unit_v10", &v10), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_registry_load(reg, DLFUSE_UNIT_PLUGIN_DIR "/examples/libdlfuse_cxx_example.so", nullptr),
            DLFUSE_STATUS_OK)
      << last_error();
  Tensor a({2, 3}), b({3, 4}), bias({4}), out({2, 4});
  EXPECT_EQ(dlfuse_matmul_add_relu(reg, a, b, bias, out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &op), DLFUSE_STATUS_OK) << last_error();
  int32_t plugin = -1;
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &plugin), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin, v10);
}

TEST(Abi12, KernelInfoOfA11CallerEndsAtFlags) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_kernel_info_t ki;
  std::memset(&ki, 0xab, sizeof ki);
  ki.struct_size = offsetof(dlfuse_kernel_info_t, dtype_priorities);
  ASSERT_EQ(dlfuse_registry_kernel_info(reg, 0, 0, &ki), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(ki.priority, -10);
  unsigned char tail[sizeof(ki.dtype_priorities)];
  std::memcpy(tail, &ki.dtype_priorities, sizeof tail);
  for (unsigned char byte : tail) EXPECT_EQ(byte, 0xab);  // past its struct_size: untouched
}

TEST(Abi12, SchemaStructOfANewerCallerIsFilledUpToOurs) {
  Registry reg;
  struct Newer {
    dlfuse_op_schema_t s;
    int64_t appended_later;
  } n;
  std::memset(&n, 0, sizeof n);
  n.s.struct_size = sizeof n;
  n.appended_later = 42;
  ASSERT_EQ(dlfuse_registry_op_schema(reg, 0, &n.s), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(n.s.struct_size, sizeof n);
  EXPECT_STREQ(n.s.name, DLFUSE_OP_MATMUL_ADD_RELU);
  EXPECT_EQ(n.appended_later, 42);
  dlfuse_op_schema_t short_one;
  std::memset(&short_one, 0, sizeof short_one);
  short_one.struct_size = offsetof(dlfuse_op_schema_t, plugin);
  EXPECT_EQ(dlfuse_registry_op_schema(reg, 0, &short_one), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "struct_size is " + std::to_string(offsetof(dlfuse_op_schema_t, plugin)));
}

TEST(Abi12, VersionIs12) {
  uint32_t major = 0, minor = 0;
  dlfuse_abi_version(&major, &minor);
  EXPECT_EQ(major, 1u);
  EXPECT_EQ(minor, 2u);
}

}  // namespace
}  // namespace unit

// The status of each failed check: one test per row of docs/abi.md's table "Status of each
// failed check", in its order, then the order of the checks and what is not a failure.
// A row changed in the doc or in the code fails here.
#include "unit_common.h"

namespace unit {
namespace {

// Expects `expr` to give `status` with a message; prints both when it does not.
#define EXPECT_STATUS(expr, status)                                                                       \
  do {                                                                                                    \
    const dlfuse_status_t got_ = (expr);                                                                  \
    EXPECT_EQ(got_, (status)) << #expr << " gave " << dlfuse_status_string(got_) << ": " << last_error(); \
    if (got_ != DLFUSE_STATUS_OK) EXPECT_FALSE(last_error().empty()) << #expr;                            \
  } while (0)

const DLDevice kCpu0{kDLCPU, 0};

// The rows about calls and device services: a registry holding unit_echo.
class StatusTableCall : public EchoTest {};

dlfuse_plugin_info_t plugin_info_struct() {
  dlfuse_plugin_info_t i;
  std::memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  return i;
}

dlfuse_kernel_info_t kernel_info_struct() {
  dlfuse_kernel_info_t i;
  std::memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  return i;
}

dlfuse_op_t get_op(dlfuse_registry_t reg, const char* name) {
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, name, &op), DLFUSE_STATUS_OK) << last_error();
  return op;
}

// ---- the rows --------------------------------------------------------------------------

TEST(StatusTable, NullRegistryIsInvalidArgument) {
  int32_t n = 0;
  void* p = nullptr;
  dlfuse_op_t op = nullptr;
  dlfuse_plugin_info_t pi = plugin_info_struct();
  dlfuse_kernel_info_t ki = kernel_info_struct();
  char buf[8] = {};
  AmaCase c;
  EXPECT_STATUS(dlfuse_registry_plugin_count(nullptr, &n), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_load(nullptr, plugin_path("unit_echo").c_str(), nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_plugin_info(nullptr, 0, &pi), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_kernel_info(nullptr, 0, 0, &ki), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_prefer(nullptr, nullptr, "unit_echo"), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_get(nullptr, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_add_mul_activation(nullptr, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_count(nullptr, kDLCPU, &n), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_alloc(nullptr, kCpu0, 8, &p), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_free(nullptr, kCpu0, buf), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_copy(nullptr, kCpu0, DLFUSE_COPY_HOST_TO_DEVICE, buf, 0, buf, 0, 0, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_synchronize(nullptr, kCpu0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  dlfuse_registry_destroy(nullptr);  // ignored
}

TEST(StatusTable, NullResultPointerOrOpHandleIsInvalidArgument) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  const dlfuse_op_t op = get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION);
  int32_t plugin = -1;
  EXPECT_STATUS(dlfuse_registry_create(nullptr, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_plugin_count(reg, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_plugin_info(reg, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_kernel_info(reg, 0, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_resolve(op, kDLCPU, f32(), nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_resolve(nullptr, kDLCPU, f32(), &plugin), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_call(nullptr, nullptr, 0, nullptr, 0, nullptr, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_count(reg, kDLCPU, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_alloc(reg, kCpu0, 8, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  // The one result pointer that may be NULL.
  EXPECT_STATUS(dlfuse_registry_load(reg, plugin_path("unit_echo2").c_str(), nullptr), DLFUSE_STATUS_OK);
}

TEST(StatusTable, StructSizeShortOfAbi10IsInvalidArgument) {
  for (const size_t size : {size_t{0}, offsetof(dlfuse_registry_options_t, plugin_paths)}) {
    dlfuse_registry_options_t o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = size;
    dlfuse_registry_t r = nullptr;
    EXPECT_STATUS(dlfuse_registry_create(&o, &r), DLFUSE_STATUS_INVALID_ARGUMENT);
    EXPECT_MSG_HAS(last_error(), "dlfuse_registry_create: argument 'options': struct_size is " + std::to_string(size) +
                                     "; expected >= " + std::to_string(sizeof(dlfuse_registry_options_t)));
    EXPECT_EQ(r, nullptr);
  }
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_plugin_info_t pi = plugin_info_struct();
  pi.struct_size = 0;
  EXPECT_STATUS(dlfuse_registry_plugin_info(reg, 0, &pi), DLFUSE_STATUS_INVALID_ARGUMENT);
  dlfuse_kernel_info_t ki = kernel_info_struct();
  ki.struct_size = 0;
  EXPECT_STATUS(dlfuse_registry_kernel_info(reg, 0, 0, &ki), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST(StatusTable, UnknownDiscoveryBitIsInvalidArgument) {
  dlfuse_registry_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.discovery = 4;
  dlfuse_registry_t r = nullptr;
  EXPECT_STATUS(dlfuse_registry_create(&o, &r), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "argument 'options': discovery is 0x4");
}

TEST(StatusTable, LoadPathNullOrEmptyIsInvalidArgument) {
  Registry reg;
  EXPECT_STATUS(dlfuse_registry_load(reg, nullptr, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_registry_load(reg, "", nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(plugin_count(reg), 0) << "a refused argument was listed as a plugin";
}

// The row pointing at the loading table: its outcomes are checked in test_loading.cpp
// (a missing file, each broken plugin) and test_broken_corpus.cpp (broken files).

TEST(StatusTable, PluginIndexOutOfRangeIsNotFound) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_plugin_info_t pi = plugin_info_struct();
  dlfuse_kernel_info_t ki = kernel_info_struct();
  for (const int32_t plugin : {-1, 1}) {
    EXPECT_STATUS(dlfuse_registry_plugin_info(reg, plugin, &pi), DLFUSE_STATUS_NOT_FOUND);
    EXPECT_MSG_HAS(last_error(), "argument 'plugin' is " + std::to_string(plugin) + "; expected 0..0");
    EXPECT_STATUS(dlfuse_registry_kernel_info(reg, plugin, 0, &ki), DLFUSE_STATUS_NOT_FOUND);
  }
}

TEST(StatusTable, KernelIndexOutOfRangeIsNotFound) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_kernel_info_t ki = kernel_info_struct();
  for (const int32_t kernel : {-1, UNIT_NUM_KERNELS}) {
    EXPECT_STATUS(dlfuse_registry_kernel_info(reg, 0, kernel, &ki), DLFUSE_STATUS_NOT_FOUND);
    EXPECT_MSG_HAS(last_error(), "argument 'kernel' is " + std::to_string(kernel) + "; expected 0.." +
                                     std::to_string(UNIT_NUM_KERNELS - 1));
  }
}

TEST(StatusTable, PreferOfAnUnknownPluginIsNotFound) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  EXPECT_STATUS(dlfuse_registry_prefer(reg, nullptr, "no_such_plugin"), DLFUSE_STATUS_NOT_FOUND);
}

TEST(StatusTable, OpGetOfANullOrEmptyNameIsInvalidArgument) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  EXPECT_STATUS(dlfuse_op_get(reg, nullptr, &op), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_op_get(reg, "", &op), DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST(StatusTable, AnOpNoPluginOffersIsNotFound) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  dlfuse_op_t op = nullptr;
  EXPECT_STATUS(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL, &op), DLFUSE_STATUS_NOT_FOUND);
  // A plugin of ABI 1.0 naming an op of 1.1: the handle exists, the op has no candidate.
  ASSERT_EQ(reg.load("unit_v10"), DLFUSE_STATUS_OK) << last_error();
  op = get_op(reg, DLFUSE_OP_MATMUL_ADD_RESIDUAL);
  int32_t plugin = -1;
  EXPECT_STATUS(dlfuse_op_resolve(op, kDLCPU, f32(), &plugin), DLFUSE_STATUS_NOT_FOUND);
}

TEST(StatusTable, ResolveForAnotherDtypeIsUnsupported) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t plugin = -1;
  EXPECT_STATUS(dlfuse_op_resolve(get_op(reg, DLFUSE_OP_ADD_MUL_ACTIVATION), kDLCPU, f64(), &plugin),
                DLFUSE_STATUS_UNSUPPORTED);
}

TEST_F(StatusTableCall, CallFailingValidationIsInvalidArgument) {
  AmaCase c;
  Tensor wrong({3, 2});  // out of the wrong shape
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, wrong, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(
      dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, static_cast<dlfuse_activation_t>(99), c.out, nullptr),
      DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(calls(), 0);
}

TEST_F(StatusTableCall, CallWithoutAKernelIsUnsupported) {
  Tensor x({2, 3}, f64()), y({2, 3}, f64()), bias({3}, f64()), out({2, 3}, f64());
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr),
                DLFUSE_STATUS_UNSUPPORTED);
  // A typed function of an op that no loaded plugin offers: UNSUPPORTED, not NOT_FOUND.
  MmCase m;
  EXPECT_STATUS(dlfuse_matmul_add_residual(reg, m.a, m.b, m.bias, m.out, m.out, 0, nullptr), DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_MSG_HAS(last_error(), "no available plugin offers this op");
  EXPECT_EQ(calls(), 0);
}

TEST_F(StatusTableCall, CallOnADevicePastTheCountIsInvalidArgument) {
  AmaCase c;
  for (DLTensor* t : {c.x.dl(), c.y.dl(), c.bias.dl(), c.out.dl()}) t->device = DLDevice{kDLCPU, 1};
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "expected device_id 0..0");
  EXPECT_EQ(calls(), 0);
}

TEST_F(StatusTableCall, AppendedInputToAKernelWithoutTheFlagIsUnsupported) {
  Tensor g({2, 3}), o({2, 3}), gx({2, 3});
  EXPECT_STATUS(
      dlfuse_add_mul_activation_backward_from_out(reg, g, o, 1.0, DLFUSE_ACT_RELU, gx, nullptr, nullptr, nullptr),
      DLFUSE_STATUS_UNSUPPORTED);
  EXPECT_EQ(calls(), 0);
}

TEST_F(StatusTableCall, ServiceForAnUnservedDeviceTypeIsNotFound) {
  void* p = nullptr;
  char buf[8] = {};
  const DLDevice cuda{kDLCUDA, 0};
  EXPECT_STATUS(dlfuse_device_alloc(reg, cuda, 8, &p), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_STATUS(dlfuse_device_free(reg, cuda, buf), DLFUSE_STATUS_NOT_FOUND);
  EXPECT_STATUS(dlfuse_device_copy(reg, cuda, DLFUSE_COPY_HOST_TO_DEVICE, buf, 0, buf, 0, 8, nullptr),
                DLFUSE_STATUS_NOT_FOUND);
  EXPECT_STATUS(dlfuse_device_synchronize(reg, cuda, nullptr), DLFUSE_STATUS_NOT_FOUND);
}

TEST_F(StatusTableCall, ServiceOnADevicePastTheCountIsInvalidArgument) {
  void* p = nullptr;
  char buf[8] = {};
  for (const int32_t id : {-1, 1}) {
    const DLDevice cpu{kDLCPU, id};
    EXPECT_STATUS(dlfuse_device_alloc(reg, cpu, 8, &p), DLFUSE_STATUS_INVALID_ARGUMENT);
    EXPECT_MSG_HAS(last_error(), "expected device_id 0..0");
    EXPECT_STATUS(dlfuse_device_free(reg, cpu, buf), DLFUSE_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(dlfuse_device_copy(reg, cpu, DLFUSE_COPY_HOST_TO_DEVICE, buf, 0, buf, 0, 8, nullptr),
                  DLFUSE_STATUS_INVALID_ARGUMENT);
    EXPECT_STATUS(dlfuse_device_synchronize(reg, cpu, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  }
}

TEST_F(StatusTableCall, CopyOfABadKindOrNullBufferIsInvalidArgument) {
  char buf[8] = {};
  EXPECT_STATUS(dlfuse_device_copy(reg, kCpu0, static_cast<dlfuse_copy_kind_t>(0), buf, 0, buf, 0, 8, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_copy(reg, kCpu0, DLFUSE_COPY_HOST_TO_DEVICE, nullptr, 0, buf, 0, 8, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_STATUS(dlfuse_device_copy(reg, kCpu0, DLFUSE_COPY_DEVICE_TO_HOST, buf, 0, nullptr, 0, 8, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
}

TEST(StatusTable, APluginFailureKeepsItsStatusAndAThrowIsInternal) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_kernelerror"), DLFUSE_STATUS_OK) << last_error();
  AmaCase c;
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
                DLFUSE_STATUS_DEVICE_ERROR);
  Registry thrower;
  ASSERT_EQ(thrower.load("unit_throws"), DLFUSE_STATUS_OK) << last_error();
  EXPECT_STATUS(dlfuse_add_mul_activation(thrower, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
                DLFUSE_STATUS_INTERNAL);
}

// ---- the order of the checks ----------------------------------------------------------------

TEST_F(StatusTableCall, AnInvalidArgumentWinsOverAMissingKernel) {
  // float64 has no kernel, and out has the wrong shape: validation runs first.
  Tensor x({2, 3}, f64()), y({2, 3}, f64()), bias({3}, f64()), wrong({3, 2}, f64());
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, wrong, nullptr),
                DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'out'");
}

TEST_F(StatusTableCall, AMissingKernelWinsOverADevicePastTheCount) {
  // The device count is the serving plugin's, so it is checked once a kernel is found.
  Tensor x({2, 3}, f64()), y({2, 3}, f64()), bias({3}, f64()), out({2, 3}, f64());
  for (DLTensor* t : {x.dl(), y.dl(), bias.dl(), out.dl()}) t->device = DLDevice{kDLCPU, 5};
  EXPECT_STATUS(dlfuse_add_mul_activation(reg, x, y, bias, 1.0, DLFUSE_ACT_RELU, out, nullptr),
                DLFUSE_STATUS_UNSUPPORTED);
}

// ---- not failures ----------------------------------------------------------------------

TEST_F(StatusTableCall, DeviceCountOfAnUnservedTypeIsZero) {
  int32_t n = -1;
  EXPECT_STATUS(dlfuse_device_count(reg, kDLCUDA, &n), DLFUSE_STATUS_OK);
  EXPECT_EQ(n, 0);
}

TEST(StatusTable, FreeOfNullChecksNothing) {
  EXPECT_STATUS(dlfuse_device_free(nullptr, DLDevice{kDLCUDA, 7}, nullptr), DLFUSE_STATUS_OK);
}

TEST_F(StatusTableCall, ZeroByteCopyIsOkOnceTheDeviceIsChecked) {
  EXPECT_STATUS(dlfuse_device_copy(reg, kCpu0, DLFUSE_COPY_HOST_TO_DEVICE, nullptr, 0, nullptr, 0, 0, nullptr),
                DLFUSE_STATUS_OK);
  EXPECT_STATUS(
      dlfuse_device_copy(reg, DLDevice{kDLCUDA, 0}, DLFUSE_COPY_HOST_TO_DEVICE, nullptr, 0, nullptr, 0, 0, nullptr),
      DLFUSE_STATUS_NOT_FOUND);
  EXPECT_STATUS(
      dlfuse_device_copy(reg, DLDevice{kDLCPU, 1}, DLFUSE_COPY_HOST_TO_DEVICE, nullptr, 0, nullptr, 0, 0, nullptr),
      DLFUSE_STATUS_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace unit

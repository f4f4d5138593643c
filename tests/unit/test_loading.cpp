// Loading: a good plugin, the ways a plugin can be broken, and what the registry says.
#include "unit_common.h"

namespace unit {
namespace {

// Removes every occurrence of `what` from `s` (so that a file name does not satisfy a
// search for the cause).
std::string without(std::string s, const std::string& what) {
  if (what.empty()) return s;
  for (size_t p; (p = s.find(what)) != std::string::npos;) s.erase(p, what.size());
  return s;
}

// The record of a unit plugin now (zeros when it is not mapped yet).
unit_record_t baseline(const std::string& stem) { return Probe(stem).record(); }

// Runs add_mul_activation through `reg` and checks the result (relu, multiplier 2).
void expect_call_works(dlfuse_registry_t reg) {
  AmaCase c(3, 4);
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 2.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  for (int64_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 2.0, true)) << i;
}

TEST(Loading, GoodPluginLoadsAndIsDescribed) {
  Registry reg;
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_count(reg), 0);
  int32_t index = -1;
  ASSERT_EQ(reg.load("unit_echo", &index), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(index, 0);
  EXPECT_EQ(plugin_count(reg), 1);

  const PluginInfo p = plugin_info(reg, 0);
  ASSERT_EQ(p.status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(p.name, "unit_echo");
  EXPECT_EQ(p.version, "1.2.3-unit");
  EXPECT_EQ(p.path, plugin_path("unit_echo"));
  EXPECT_EQ(p.available, 1);
  EXPECT_EQ(p.reason, "");
  EXPECT_EQ(p.device_type, kDLCPU);
  EXPECT_EQ(p.device_count, 1);
  EXPECT_EQ(p.abi_major, 1u);
  EXPECT_EQ(p.abi_minor, uint32_t(DLFUSE_ABI_MINOR));
  EXPECT_EQ(p.num_kernels, UNIT_NUM_KERNELS);

  const char* ops[] = {DLFUSE_OP_ADD_MUL_ACTIVATION, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, DLFUSE_OP_MATMUL_ADD_RELU,
                       DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, UNIT_OP_SCALE};
  for (int32_t k = 0; k < UNIT_NUM_KERNELS; ++k) {
    dlfuse_kernel_info_t ki;
    std::memset(&ki, 0, sizeof ki);
    ki.struct_size = sizeof ki;
    ASSERT_EQ(dlfuse_registry_kernel_info(reg, 0, k, &ki), DLFUSE_STATUS_OK) << last_error();
    EXPECT_STREQ(ki.op, ops[k]) << "kernel " << k;
    EXPECT_EQ(ki.device_type, kDLCPU);
    ASSERT_EQ(ki.num_dtypes, 1);
    ASSERT_NE(ki.dtypes, nullptr);
    EXPECT_EQ(ki.dtypes[0].code, kDLFloat);
    EXPECT_EQ(ki.dtypes[0].bits, 32);
    EXPECT_EQ(ki.dtypes[0].lanes, 1);
    EXPECT_EQ(ki.priority, -10);
  }
  expect_call_works(reg);
}

TEST(Loading, OpenGetsHostInfoAndRunsOnce) {
  // Plugins stay mapped until the process ends (docs/abi.md), so counts are deltas.
  const unit_record_t before = baseline("unit_echo");
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  Probe probe("unit_echo");
  ASSERT_TRUE(probe.loaded());
  const unit_record_t r = probe.record();
  EXPECT_EQ(r.open_calls - before.open_calls, 1);
  EXPECT_EQ(r.get_kernels_calls - before.get_kernels_calls, 1);
  EXPECT_EQ(r.close_calls - before.close_calls, 0);
  EXPECT_GE(r.host_struct_size, offsetof(dlfuse_host_info_t, plugin_path) + sizeof(const char*));
  EXPECT_EQ(r.host_abi_major, static_cast<uint32_t>(DLFUSE_ABI_MAJOR));
  EXPECT_EQ(r.host_abi_minor, static_cast<uint32_t>(DLFUSE_ABI_MINOR));
  EXPECT_STREQ(r.host_plugin_path, plugin_path("unit_echo").c_str());
}

TEST(Loading, CloseRunsOnceAtDestroy) {
  const unit_record_t before = baseline("unit_echo");
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  Probe probe("unit_echo");  // our own reference keeps the file mapped after destroy
  ASSERT_TRUE(probe.loaded());
  EXPECT_EQ(probe.record().close_calls - before.close_calls, 0);
  reg.destroy();
  EXPECT_EQ(probe.record().close_calls - before.close_calls, 1);
  EXPECT_EQ(probe.record().open_calls - before.open_calls, 1);
}

TEST(Loading, CloseNotCalledForAPluginWhoseOpenFailed) {
  const unit_record_t before = baseline("unit_openfails");
  Registry reg;
  ASSERT_EQ(reg.load("unit_openfails"), DLFUSE_STATUS_UNAVAILABLE);
  Probe probe("unit_openfails");
  ASSERT_TRUE(probe.loaded());
  reg.destroy();
  EXPECT_EQ(probe.record().open_calls - before.open_calls, 1);
  EXPECT_EQ(probe.record().close_calls - before.close_calls, 0) << "close() without a state";
}

TEST(Loading, IndicesFollowLoadOrder) {
  Registry reg;
  int32_t i0 = -1, i1 = -1, i2 = -1;
  ASSERT_EQ(reg.load("unit_echo2", &i0), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(reg.load("unit_echo", &i1), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(reg.load("unit_echo3", &i2), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(i0, 0);
  EXPECT_EQ(i1, 1);
  EXPECT_EQ(i2, 2);
  EXPECT_EQ(plugin_names(reg), (std::vector<std::string>{"unit_echo2", "unit_echo", "unit_echo3"}));
}

TEST(Loading, NewerMinorWithLongerDescriptorLoads) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_newerminor"), DLFUSE_STATUS_OK) << last_error();
  const PluginInfo p = plugin_info(reg, 0);
  EXPECT_EQ(p.available, 1) << p.reason;
  EXPECT_EQ(p.abi_major, 1u);
  EXPECT_EQ(p.abi_minor, static_cast<uint32_t>(DLFUSE_ABI_MINOR + 1));
  EXPECT_EQ(p.num_kernels, UNIT_NUM_KERNELS);
  expect_call_works(reg);
}

TEST(Loading, MissingFileIsNotFoundAndListed) {
  // No file at the path: NOT_FOUND, which a caller tells from LOAD_FAILED (a file that is
  // there but does not load: BrokenPlugin below, test_broken_corpus.cpp).
  Registry reg;
  const std::string path = std::string(DLFUSE_UNIT_PLUGIN_DIR) + "/libdlfuse_unit_no_such_file.so";
  int32_t index = -1;
  const dlfuse_status_t s = dlfuse_registry_load(reg, path.c_str(), &index);
  EXPECT_EQ(s, DLFUSE_STATUS_NOT_FOUND) << dlfuse_status_string(s) << ": " << last_error();
  EXPECT_MSG_HAS(last_error(), "libdlfuse_unit_no_such_file.so");
  EXPECT_MSG_HAS(last_error(), "argument 'path' names no file");
  EXPECT_EQ(index, 0);
  const PluginInfo p = plugin_info(reg, 0);
  EXPECT_EQ(p.available, 0);
  EXPECT_EQ(p.path, path);
  EXPECT_FALSE(p.reason.empty());
}

TEST(Loading, SameFileTwiceIsLoadedOnce) {
  // docs/abi.md: "A file seen twice ... is loaded once". An explicit second load of the
  // same file is idempotent: OK, the first index, no second open().
  const unit_record_t before = baseline("unit_echo");
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t index = -1;
  EXPECT_EQ(reg.load("unit_echo", &index), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(index, 0);
  EXPECT_EQ(plugin_count(reg), 1);
  EXPECT_EQ(plugin_info(reg, 0).available, 1);
  Probe probe("unit_echo");
  EXPECT_EQ(probe.record().open_calls - before.open_calls, 1) << "the same file was opened again";
  expect_call_works(reg);
}

TEST(Loading, SameNameFromAnotherFileRefused) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t index = -1;
  EXPECT_EQ(reg.load("unit_echo_dup", &index), DLFUSE_STATUS_INVALID_ARGUMENT);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, "libdlfuse_unit_echo_dup.so");
  EXPECT_MSG_HAS(msg, "libdlfuse_unit_echo.so") << "the message should name the file that has the name";
  EXPECT_EQ(index, 1);
  EXPECT_EQ(plugin_info(reg, 0).available, 1) << "the first plugin must stay available";
  EXPECT_EQ(plugin_info(reg, 1).available, 0);
  expect_call_works(reg);
}

// ---- broken plugins ------------------------------------------------------------------

struct BrokenCase {
  const char* stem;                 // unit plugin file stem
  dlfuse_status_t status;           // what dlfuse_registry_load returns
  std::vector<std::string> causes;  // each must be in the message and in the reason
                                    // (any case; the file's path and name removed first)
  const char* declared_name;        // the descriptor's name, or nullptr if it never got that far
  bool must_not_open;               // open() must not run
};

void PrintTo(const BrokenCase& c, std::ostream* os) { *os << c.stem; }

class BrokenPlugin : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenPlugin, RefusedWithStatusAndReasonWhileOthersWork) {
  const BrokenCase& c = GetParam();
  const std::string path = plugin_path(c.stem);
  const std::string file = fs::path(path).filename().string();
  const std::string env_marker = std::string(UNIT_OPENED_ENV_PREFIX) + c.stem;
  ::unsetenv(env_marker.c_str());

  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t index = -1;
  const dlfuse_status_t s = dlfuse_registry_load(reg, path.c_str(), &index);
  const std::string msg = last_error();
  EXPECT_EQ(s, c.status) << "got " << dlfuse_status_string(s) << ", message: " << msg;
  EXPECT_MSG_HAS(msg, file);
  // The cause must be in the text itself, not only in the file's path or name.
  const std::string cause = without(without(without(msg, path), file), c.stem);
  for (const auto& needle : c.causes) EXPECT_MSG_IHAS(cause, needle);

  // Listed, unavailable, with a reason.
  EXPECT_EQ(index, 1);
  ASSERT_EQ(plugin_count(reg), 2);
  const PluginInfo p = plugin_info(reg, 1);
  ASSERT_EQ(p.status, DLFUSE_STATUS_OK);
  EXPECT_EQ(p.available, 0);
  EXPECT_EQ(p.path, path);
  EXPECT_FALSE(p.reason.empty());
  const std::string reason = without(without(without(p.reason, path), file), c.stem);
  for (const auto& needle : c.causes) EXPECT_MSG_IHAS(reason, needle);
  EXPECT_EQ(p.num_kernels, 0);
  EXPECT_EQ(p.device_count, 0);
  const std::string stem_names[] = {c.stem, std::string("libdlfuse_") + c.stem,
                                    c.declared_name ? c.declared_name : c.stem};
  EXPECT_TRUE(p.name == stem_names[0] || p.name == stem_names[1] || p.name == stem_names[2])
      << "name \"" << p.name << "\" is neither the plugin's name nor the file's stem";
  if (c.must_not_open) EXPECT_EQ(std::getenv(env_marker.c_str()), nullptr) << "open() ran";

  // The good plugin is untouched and still serves calls.
  EXPECT_EQ(plugin_info(reg, 0).available, 1);
  int32_t chosen = -1;
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, 0);
  expect_call_works(reg);
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, BrokenPlugin,
    ::testing::Values(
        BrokenCase{"unit_garbage", DLFUSE_STATUS_LOAD_FAILED, {"ELF"}, nullptr, true},
        BrokenCase{"unit_noentry", DLFUSE_STATUS_LOAD_FAILED, {DLFUSE_PLUGIN_ENTRY}, nullptr, true},
        // Only the entry of ABI 2: "says so when it finds dlfuse_plugin_v2 instead".
        BrokenCase{"unit_v2entry", DLFUSE_STATUS_ABI_MISMATCH, {"dlfuse_plugin_v2"}, nullptr, true},
        BrokenCase{"unit_nullentry", DLFUSE_STATUS_LOAD_FAILED, {DLFUSE_PLUGIN_ENTRY, "null"}, nullptr, true},
        // The message gives both majors: the plugin's 2 and the host's 1.
        BrokenCase{"unit_abi2", DLFUSE_STATUS_ABI_MISMATCH, {"2", "1", "abi"}, "unit_abi2", true},
        BrokenCase{"unit_short", DLFUSE_STATUS_INVALID_ARGUMENT, {"struct_size"}, nullptr, true},
        BrokenCase{"unit_nullrequired", DLFUSE_STATUS_INVALID_ARGUMENT, {"get_kernels"}, "unit_nullrequired", true},
        BrokenCase{"unit_openfails", DLFUSE_STATUS_UNAVAILABLE, {UNIT_OPEN_FAIL_REASON}, "unit_openfails", false},
        BrokenCase{
            "unit_kernelsfail", DLFUSE_STATUS_UNAVAILABLE, {UNIT_KERNELS_FAIL_REASON}, "unit_kernelsfail", false},
        BrokenCase{"unit_nullkernels", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel"}, "unit_nullkernels", false},
        BrokenCase{"unit_dupop", DLFUSE_STATUS_INVALID_ARGUMENT, {DLFUSE_OP_ADD_MUL_ACTIVATION}, "unit_dupop", false},
        BrokenCase{"unit_nullname", DLFUSE_STATUS_INVALID_ARGUMENT, {"name"}, nullptr, true},
        BrokenCase{"unit_nodevice", DLFUSE_STATUS_UNAVAILABLE, {"device"}, "unit_nodevice", false},
        // open() threw: a plugin bug, INTERNAL, with the exception's text.
        BrokenCase{"unit_openthrows", DLFUSE_STATUS_INTERNAL, {UNIT_OPEN_THROW_MESSAGE}, "unit_openthrows", false},
        // A second file whose descriptor is also named "unit_echo".
        BrokenCase{"unit_echo_dup", DLFUSE_STATUS_INVALID_ARGUMENT, {"unit_echo"}, "unit_echo", false}),
    [](const ::testing::TestParamInfo<BrokenCase>& i) { return std::string(i.param.stem); });

TEST(Loading, UnavailablePluginServesNothing) {
  Registry reg;
  EXPECT_EQ(reg.load("unit_openfails"), DLFUSE_STATUS_UNAVAILABLE);
  dlfuse_op_t op = nullptr;
  EXPECT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_NOT_FOUND);
  AmaCase c;
  EXPECT_NE(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK);
  Probe probe("unit_openfails");
  if (probe.loaded()) {
    EXPECT_EQ(probe.record().get_kernels_calls, 0) << "get_kernels after a failed open()";
    EXPECT_EQ(probe.calls(), 0);
  }
}

// ---- kernels that break the rules ------------------------------------------------------

TEST(Loading, ThrowingKernelGivesInternalAndRegistrySurvives) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_throws"), DLFUSE_STATUS_OK) << last_error();
  AmaCase c;
  EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
            DLFUSE_STATUS_INTERNAL);
  const std::string msg = last_error();
  EXPECT_TRUE(icontains(msg, "unit_throws") || contains(msg, UNIT_THROW_MESSAGE))
      << "the message names neither the plugin nor the exception: " << msg;

  // The generic path and a second time.
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK);
  const DLTensor* in[] = {c.x, c.y, c.bias};
  DLTensor* out[] = {c.out};
  const dlfuse_attr_t attrs[] = {attr_i64(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  EXPECT_EQ(dlfuse_op_call(op, in, 3, out, 1, attrs, 1, nullptr), DLFUSE_STATUS_INTERNAL);
  Probe probe("unit_throws");
  ASSERT_TRUE(probe.loaded());
  EXPECT_EQ(probe.calls(), 2);

  // Still usable: a good plugin loaded later and preferred serves the call.
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo"), DLFUSE_STATUS_OK) << last_error();
  expect_call_works(reg);
}

TEST(Loading, KernelErrorStatusAndMessageSurface) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_kernelerror"), DLFUSE_STATUS_OK) << last_error();
  AmaCase c;
  EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
            DLFUSE_STATUS_DEVICE_ERROR);
  EXPECT_MSG_HAS(last_error(), UNIT_KERNEL_ERROR_MESSAGE);
  MmCase m;
  EXPECT_EQ(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 0, nullptr), DLFUSE_STATUS_DEVICE_ERROR);
  EXPECT_MSG_HAS(last_error(), UNIT_KERNEL_ERROR_MESSAGE);
}

// ---- device services ------------------------------------------------------------------

TEST(DeviceServices, ServedByTheCpuPlugin) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t count = -1;
  ASSERT_EQ(dlfuse_device_count(reg, kDLCPU, &count), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(count, 1);
  const DLDevice cpu{kDLCPU, 0};
  void* p = nullptr;
  ASSERT_EQ(dlfuse_device_alloc(reg, cpu, 64, &p), DLFUSE_STATUS_OK) << last_error();
  ASSERT_NE(p, nullptr);
  const char src[8] = {'d', 'l', 'f', 'u', 's', 'e', '!', 0};
  ASSERT_EQ(dlfuse_device_copy(reg, cpu, DLFUSE_COPY_HOST_TO_DEVICE, p, 8, src, 0, 8, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  char back[8] = {};
  ASSERT_EQ(dlfuse_device_copy(reg, cpu, DLFUSE_COPY_DEVICE_TO_HOST, back, 0, p, 8, 8, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_STREQ(back, "dlfuse!");
  EXPECT_EQ(dlfuse_device_synchronize(reg, cpu, nullptr), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(dlfuse_device_free(reg, cpu, p), DLFUSE_STATUS_OK) << last_error();
}

}  // namespace
}  // namespace unit

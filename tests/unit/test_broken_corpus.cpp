// The broken-plugin corpus, second part (the first is in test_loading.cpp): bad kernel
// tables, bad descriptors, lifecycles that throw or lie, files that are not plugins, and
// kernels that answer badly. Each must be refused (or fail its call) with a status and
// a reason that names the cause, and the good plugin loaded next to it keeps working.
#include <elf.h>
#include <sys/stat.h>

#include <fstream>

#include "unit_common.h"

namespace unit {
namespace {

// Runs add_mul_activation through `reg` (relu, multiplier 2) and checks the result.
void expect_good_plugin_works(dlfuse_registry_t reg) {
  AmaCase c(3, 4);
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 2.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  for (int64_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(c.out.f()[i], c.expect(i, 2.0, true)) << i;
  MmCase m;
  ASSERT_EQ(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
  for (int64_t i = 0; i < m.M * m.N; ++i) EXPECT_FLOAT_EQ(m.out.f()[i], m.expect(i / m.N, i % m.N)) << i;
}

std::string strip(std::string s, const std::string& what) {
  if (what.empty()) return s;
  for (size_t p; (p = s.find(what)) != std::string::npos;) s.erase(p, what.size());
  return s;
}

struct Broken {
  const char* stem;
  dlfuse_status_t status;
  std::vector<std::string> causes;  // each in the message and the reason (any case), the path removed
  bool must_not_open;               // open() must not run
};

void PrintTo(const Broken& c, std::ostream* os) { *os << c.stem; }

// Loads `path` after unit_echo; checks status, message, listing, and that unit_echo works.
void check_refusal(const std::string& path, dlfuse_status_t status, const std::vector<std::string>& causes) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t index = -1;
  const dlfuse_status_t s = dlfuse_registry_load(reg, path.c_str(), &index);
  const std::string msg = last_error();
  EXPECT_EQ(s, status) << "got " << dlfuse_status_string(s) << ", message: " << msg;
  EXPECT_MSG_HAS(msg, path);
  const std::string file = fs::path(path).filename().string();
  const std::string cause = strip(strip(msg, path), file);
  for (const auto& needle : causes) EXPECT_MSG_IHAS(cause, needle);
  EXPECT_EQ(index, 1);
  ASSERT_EQ(plugin_count(reg), 2);
  const PluginInfo p = plugin_info(reg, 1);
  EXPECT_EQ(p.available, 0);
  EXPECT_EQ(p.num_kernels, 0);
  EXPECT_EQ(p.device_count, 0);
  const std::string reason = strip(strip(p.reason, path), file);
  EXPECT_FALSE(reason.empty());
  for (const auto& needle : causes) EXPECT_MSG_IHAS(reason, needle);
  EXPECT_EQ(plugin_info(reg, 0).available, 1);
  int32_t chosen = -1;
  dlfuse_op_t op = nullptr;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &op), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, 0) << "a refused plugin must never be dispatched to";
  expect_good_plugin_works(reg);
  // A second load of the same file gives the same outcome, and opens nothing again.
  int32_t again = -1;
  EXPECT_EQ(dlfuse_registry_load(reg, path.c_str(), &again), status);
  EXPECT_EQ(again, 1);
  EXPECT_EQ(plugin_count(reg), 2);
}

class BrokenCorpus : public ::testing::TestWithParam<Broken> {};

TEST_P(BrokenCorpus, RefusedWithReasonWhileTheGoodPluginWorks) {
  const Broken& c = GetParam();
  const std::string marker = std::string(UNIT_OPENED_ENV_PREFIX) + c.stem;
  ::unsetenv(marker.c_str());
  check_refusal(plugin_path(c.stem), c.status, c.causes);
  if (c.must_not_open) EXPECT_EQ(std::getenv(marker.c_str()), nullptr) << "open() ran";
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, BrokenCorpus,
    ::testing::Values(
        // Kernel tables: entry 1 has one bad field; the message names the entry and the field.
        Broken{"unit_k_nullop", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel 1", "op"}, false},
        Broken{"unit_k_nullfn", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel 1", "fn"}, false},
        Broken{"unit_k_nodtypes", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel 1", "dtypes"}, false},
        Broken{"unit_k_cuda", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel 1", "device_type", "cuda"}, false},
        Broken{"unit_k_mixedsize", DLFUSE_STATUS_INVALID_ARGUMENT, {"kernel 1", "struct_size"}, false},
        Broken{"unit_k_negative", DLFUSE_STATUS_INVALID_ARGUMENT, {"-1", "kernels"}, false},
        // Lifecycle: device_count lies or fails, entry or get_kernels throw.
        Broken{"unit_count_neg", DLFUSE_STATUS_UNAVAILABLE, {"device_count", "-1"}, false},
        Broken{"unit_count_fails", DLFUSE_STATUS_UNAVAILABLE, {"device_count", UNIT_COUNT_FAIL_REASON}, false},
        Broken{"unit_entrythrows", DLFUSE_STATUS_INTERNAL, {DLFUSE_PLUGIN_ENTRY, "threw"}, true},
        Broken{"unit_kthrow", DLFUSE_STATUS_INTERNAL, {UNIT_KERNELS_THROW_MESSAGE}, false},
        // Descriptors.
        Broken{"unit_badname", DLFUSE_STATUS_INVALID_ARGUMENT, {"name", "[a-z0-9_]"}, true},
        Broken{"unit_nullfree", DLFUSE_STATUS_INVALID_ARGUMENT, {"'free'", "NULL"}, true}),
    [](const ::testing::TestParamInfo<Broken>& i) { return std::string(i.param.stem); });

// ---- a plugin on a device type nobody knows -------------------------------------------

TEST(BrokenCorpus, UnknownDeviceTypeIsListedAndServesOnlyItsOwnType) {
  // A plugin may serve a device type this libdlfuse has no name for (a newer DLPack);
  // it loads, and dispatch never sends it a CPU call.
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  const dlfuse_status_t s = reg.load("unit_k_device4242");
  const PluginInfo p = plugin_info(reg, 1);
  if (s == DLFUSE_STATUS_OK) {
    EXPECT_EQ(p.available, 1);
    EXPECT_EQ(p.device_type, 4242);
  } else {
    EXPECT_EQ(p.available, 0);
    EXPECT_FALSE(p.reason.empty());
    EXPECT_FALSE(last_error().empty());
  }
  dlfuse_op_t op = nullptr;
  int32_t chosen = -1;
  ASSERT_EQ(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &op), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_op_resolve(op, kDLCPU, f32(), &chosen), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(chosen, 0);
  expect_good_plugin_works(reg);
}

// ---- files that are not plugins ------------------------------------------------------------

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const char* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(data, static_cast<std::streamsize>(n));
}

TEST(BrokenFiles, EmptyFile) {
  TempDir tmp;
  const std::string path = (tmp.dir("p") / "libdlfuse_empty.so").string();
  write_bytes(path, "", 0);
  check_refusal(path, DLFUSE_STATUS_LOAD_FAILED, {"dlopen"});
}

TEST(BrokenFiles, TruncatedElfAtSeveralLengths) {
  // Shorter than an ELF header: dlopen refuses it. Cut inside the program headers or the
  // loaded segments: refused before dlopen, which would fault (SIGBUS) on missing pages.
  TempDir tmp;
  const std::vector<char> elf = read_bytes(plugin_path("unit_echo"));
  ASSERT_GT(elf.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  size_t loaded_end = 0;  // the end of the farthest segment's file bytes
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    ASSERT_LE(eh.e_phoff + (i + 1) * sizeof ph, elf.size());
    std::memcpy(&ph, elf.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    loaded_end = std::max<size_t>(loaded_end, ph.p_offset + ph.p_filesz);
  }
  ASSERT_GT(loaded_end, 8192u);
  const struct {
    size_t n;
    const char* cause;
  } cases[] = {{4, "dlopen"},
               {52, "dlopen"},
               {sizeof(Elf64_Ehdr), "truncated"},
               {eh.e_phoff + sizeof(Elf64_Phdr), "truncated"},
               {loaded_end / 2, "truncated"},
               {loaded_end - 4096, "truncated"},
               {loaded_end - 1, "truncated"}};
  int i = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE("length " + std::to_string(c.n));
    const std::string path = (tmp.dir("p") / ("libdlfuse_trunc" + std::to_string(i++) + ".so")).string();
    write_bytes(path, elf.data(), c.n);
    check_refusal(path, DLFUSE_STATUS_LOAD_FAILED, {c.cause});
  }
}

TEST(BrokenFiles, ElfOfAnotherMachine) {
  TempDir tmp;
  std::vector<char> elf = read_bytes(plugin_path("unit_echo"));
  ASSERT_GT(elf.size(), 64u);
  elf[18] = 40;  // e_machine = EM_ARM (little-endian low byte; high byte 0)
  elf[19] = 0;
  const std::string path = (tmp.dir("p") / "libdlfuse_arm.so").string();
  write_bytes(path, elf.data(), elf.size());
  check_refusal(path, DLFUSE_STATUS_LOAD_FAILED, {"dlopen"});
}

TEST(BrokenFiles, DirectoryNamedLikeAPlugin) {
  TempDir tmp;
  const std::string path = tmp.dir("p/libdlfuse_folder.so").string();
  check_refusal(path, DLFUSE_STATUS_LOAD_FAILED, {"dlopen"});
}

TEST(BrokenFiles, DirectoryNamedLikeAPluginDuringDiscovery) {
  // A folder holding a good plugin, a directory and a text file under plugin names:
  // discovery lists all three, loads the good one, and creation succeeds.
  TempDir tmp;
  const fs::path dir = tmp.dir("disc");
  tmp.copy_plugin("unit_echo", "disc", "libdlfuse_b_echo.so");
  fs::create_directories(dir / "libdlfuse_a_folder.so");
  write_bytes((dir / "libdlfuse_c_text.so").string(), "not an ELF\n", 11);
  Registry reg(DLFUSE_DISCOVER_NONE, dir.c_str());
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  const auto v = plugins(reg);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].available, 0);
  EXPECT_MSG_IHAS(v[0].reason, "dlopen");
  EXPECT_EQ(v[1].available, 1) << v[1].reason;
  EXPECT_EQ(v[1].name, "unit_echo");
  EXPECT_EQ(v[2].available, 0);
  EXPECT_FALSE(v[2].reason.empty());
  expect_good_plugin_works(reg);
}

TEST(BrokenFiles, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads a file of mode 000: nothing to test";
  TempDir tmp;
  const std::string path = tmp.copy_plugin("unit_echo3", "p", "libdlfuse_unreadable.so");
  ASSERT_EQ(::chmod(path.c_str(), 0), 0);
  check_refusal(path, DLFUSE_STATUS_LOAD_FAILED, {"dlopen"});
}

TEST(BrokenFiles, DanglingSymlink) {
  TempDir tmp;
  const fs::path link = tmp.dir("p") / "libdlfuse_dangling.so";
  fs::create_symlink(tmp.path() / "no_such_target.so", link);
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  int32_t index = -1;
  const dlfuse_status_t s = dlfuse_registry_load(reg, link.c_str(), &index);
  EXPECT_EQ(s, DLFUSE_STATUS_NOT_FOUND) << dlfuse_status_string(s);  // the link names no file
  EXPECT_FALSE(last_error().empty());
  EXPECT_EQ(plugin_info(reg, index).available, 0);
  EXPECT_FALSE(plugin_info(reg, index).reason.empty());
  expect_good_plugin_works(reg);
}

// ---- kernels that answer badly -------------------------------------------------------------

TEST(BrokenKernels, StatusThatIsNotAStatusBecomesInternal) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_badstatus"), DLFUSE_STATUS_OK) << last_error();
  AmaCase c;
  EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
            DLFUSE_STATUS_INTERNAL);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, std::to_string(UNIT_BAD_STATUS));
  EXPECT_MSG_HAS(msg, "unit_badstatus");
}

TEST(BrokenKernels, FailureWithoutAMessageStillHasOne) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_silent"), DLFUSE_STATUS_OK) << last_error();
  MmCase m;
  EXPECT_EQ(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 0, nullptr), DLFUSE_STATUS_DEVICE_ERROR);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, "unit_silent");
  EXPECT_MSG_HAS(msg, DLFUSE_OP_MATMUL_ADD_RELU);
}

TEST(BrokenKernels, UnterminatedMessageIsCut) {
  // The kernel fills the whole error buffer without a NUL: the registry's copy ends
  // inside the buffer (ASan would see a read past it).
  Registry reg;
  ASSERT_EQ(reg.load("unit_unterminated"), DLFUSE_STATUS_OK) << last_error();
  AmaCase c;
  EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
            DLFUSE_STATUS_DEVICE_ERROR);
  const std::string msg = last_error();
  EXPECT_MSG_HAS(msg, "uuuuuuuu");
  EXPECT_LT(msg.size(), 4096u);
}

TEST(BrokenKernels, BrokenKernelsDoNotDisturbAGoodPlugin) {
  // A throwing plugin, preferred for one op only: that op fails, the other op still runs
  // on the good plugin; after the preference is cleared both work.
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(reg.load("unit_throws"), DLFUSE_STATUS_OK) << last_error();
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, "unit_throws"), DLFUSE_STATUS_OK);
  for (int rep = 0; rep < 3; ++rep) {
    AmaCase c;
    EXPECT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr),
              DLFUSE_STATUS_INTERNAL);
    MmCase m;
    ASSERT_EQ(dlfuse_matmul_add_relu(reg, m.a, m.b, m.bias, m.out, 0, nullptr), DLFUSE_STATUS_OK) << last_error();
    EXPECT_FLOAT_EQ(m.out.f()[0], m.expect(0, 0));
  }
  ASSERT_EQ(dlfuse_registry_prefer(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, nullptr), DLFUSE_STATUS_OK);
  ASSERT_EQ(dlfuse_registry_prefer(reg, nullptr, "unit_echo"), DLFUSE_STATUS_OK);
  expect_good_plugin_works(reg);
}

}  // namespace
}  // namespace unit

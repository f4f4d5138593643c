// ABI basics: version, DLFUSE_HAS_FIELD, status strings, size-tagged structs honored.
#include <set>

#include "unit_common.h"

namespace unit {
namespace {

TEST(Abi, VersionMatchesMacros) {
  uint32_t major = 99, minor = 99;
  dlfuse_abi_version(&major, &minor);
  EXPECT_EQ(major, static_cast<uint32_t>(DLFUSE_ABI_MAJOR));
  EXPECT_EQ(minor, static_cast<uint32_t>(DLFUSE_ABI_MINOR));
  EXPECT_EQ(std::string(DLFUSE_PLUGIN_ENTRY), "dlfuse_plugin_v" + std::to_string(DLFUSE_ABI_MAJOR));
}

TEST(Abi, VersionToleratesNullPointers) {
  // "Nothing throws, nothing aborts": one of the two may be wanted alone.
  uint32_t major = 0, minor = 99;
  dlfuse_abi_version(&major, nullptr);
  EXPECT_EQ(major, static_cast<uint32_t>(DLFUSE_ABI_MAJOR));
  dlfuse_abi_version(nullptr, &minor);
  EXPECT_EQ(minor, static_cast<uint32_t>(DLFUSE_ABI_MINOR));
  dlfuse_abi_version(nullptr, nullptr);
}

TEST(Abi, HasFieldFollowsStructSize) {
  dlfuse_plugin_info_t info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  EXPECT_TRUE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, name));
  EXPECT_TRUE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, num_kernels));

  // Exactly up to the end of `name`: name yes, version no.
  info.struct_size = offsetof(dlfuse_plugin_info_t, name) + sizeof(info.name);
  EXPECT_TRUE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, name));
  EXPECT_FALSE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, version));
  // One byte short of `name`.
  info.struct_size = offsetof(dlfuse_plugin_info_t, name) + sizeof(info.name) - 1;
  EXPECT_FALSE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, name));
  info.struct_size = 0;
  EXPECT_FALSE(DLFUSE_HAS_FIELD(&info, dlfuse_plugin_info_t, name));

  dlfuse_plugin_t p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = offsetof(dlfuse_plugin_t, open);
  EXPECT_TRUE(DLFUSE_HAS_FIELD(&p, dlfuse_plugin_t, device_type));
  EXPECT_FALSE(DLFUSE_HAS_FIELD(&p, dlfuse_plugin_t, open));
  p.struct_size = sizeof p;
  EXPECT_TRUE(DLFUSE_HAS_FIELD(&p, dlfuse_plugin_t, synchronize));
}

TEST(Abi, AttrLayoutIsFrozen) {
  // dlfuse_attr_t is an array element without struct_size: its layout is ABI.
  EXPECT_EQ(sizeof(dlfuse_attr_t), 16u);
  EXPECT_EQ(offsetof(dlfuse_attr_t, key), 0u);
  EXPECT_EQ(offsetof(dlfuse_attr_t, type), 4u);
  EXPECT_EQ(offsetof(dlfuse_attr_t, value), 8u);
}

TEST(StatusString, CoversEveryStatus) {
  std::set<std::string> seen;
  for (int s = DLFUSE_STATUS_OK; s <= DLFUSE_STATUS_INTERNAL; ++s) {
    const char* str = dlfuse_status_string(static_cast<dlfuse_status_t>(s));
    ASSERT_NE(str, nullptr) << "status " << s;
    EXPECT_GT(std::strlen(str), 0u) << "status " << s;
    EXPECT_TRUE(seen.insert(str).second) << "status " << s << " repeats \"" << str << "\"";
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(StatusString, NamesTheStatus) {
  // Each string says which status it is (in any case and spelling of the separator).
  const std::pair<dlfuse_status_t, const char*> names[] = {
      {DLFUSE_STATUS_OK, "ok"},
      {DLFUSE_STATUS_INVALID_ARGUMENT, "invalid"},
      {DLFUSE_STATUS_UNSUPPORTED, "unsupported"},
      {DLFUSE_STATUS_NOT_FOUND, "not"},
      {DLFUSE_STATUS_ABI_MISMATCH, "abi"},
      {DLFUSE_STATUS_LOAD_FAILED, "load"},
      {DLFUSE_STATUS_UNAVAILABLE, "unavailable"},
      {DLFUSE_STATUS_OUT_OF_MEMORY, "memory"},
      {DLFUSE_STATUS_DEVICE_ERROR, "device"},
      {DLFUSE_STATUS_INTERNAL, "internal"},
  };
  for (const auto& [s, word] : names) EXPECT_MSG_IHAS(std::string(dlfuse_status_string(s)), word);
}

TEST(StatusString, UnknownValueIsNotNull) {
  const char* s = dlfuse_status_string(static_cast<dlfuse_status_t>(1234));
  ASSERT_NE(s, nullptr);
  EXPECT_GT(std::strlen(s), 0u);
  ASSERT_NE(dlfuse_status_string(static_cast<dlfuse_status_t>(-1)), nullptr);
}

// Caller-filled structs. ABI 1.0 is the oldest ABI, so a struct shorter than its 1.0
// size is refused (docs/abi.md: "Every field of ABI 1.0 must be present"); a longer one
// (a caller built against a newer minor) is accepted, and the registry touches nothing
// past the fields it knows.
TEST(StructSize, PluginInfoShorterThanAbi10Refused) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  unsigned char buf[sizeof(dlfuse_plugin_info_t)];
  std::memset(buf, 0xAB, sizeof buf);
  auto* info = reinterpret_cast<dlfuse_plugin_info_t*>(buf);
  const size_t short_size = offsetof(dlfuse_plugin_info_t, path) + sizeof(info->path);
  info->struct_size = short_size;
  EXPECT_EQ(dlfuse_registry_plugin_info(reg, 0, info), DLFUSE_STATUS_INVALID_ARGUMENT);
  // the argument, the actual and the expected value
  EXPECT_MSG_HAS(last_error(), "'info': struct_size is " + std::to_string(short_size) + "; expected >= ");
  for (size_t i = short_size; i < sizeof buf; ++i)
    ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " past struct_size " << short_size << " was written";
}

TEST(StructSize, PluginInfoFromANewerCallerFilledUpToKnownFields) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  unsigned char buf[sizeof(dlfuse_plugin_info_t) + 16];
  std::memset(buf, 0xAB, sizeof buf);
  auto* info = reinterpret_cast<dlfuse_plugin_info_t*>(buf);
  info->struct_size = sizeof buf;  // fields this host does not know follow
  ASSERT_EQ(dlfuse_registry_plugin_info(reg, 0, info), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(info->struct_size, sizeof buf) << "the caller's struct_size was overwritten";
  EXPECT_STREQ(info->name, "unit_echo");
  EXPECT_EQ(info->num_kernels, UNIT_NUM_KERNELS);
  for (size_t i = sizeof(dlfuse_plugin_info_t); i < sizeof buf; ++i)
    ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " (unknown to this host) was written";
}

TEST(StructSize, KernelInfoShortRefusedLongAccepted) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  unsigned char buf[sizeof(dlfuse_kernel_info_t) + 16];
  std::memset(buf, 0xCD, sizeof buf);
  auto* info = reinterpret_cast<dlfuse_kernel_info_t*>(buf);
  const size_t short_size = offsetof(dlfuse_kernel_info_t, device_type) + sizeof(info->device_type);
  info->struct_size = short_size;
  EXPECT_EQ(dlfuse_registry_kernel_info(reg, 0, 0, info), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'info': struct_size is " + std::to_string(short_size) + "; expected >= ");
  for (size_t i = short_size; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xCD) << "byte " << i;
  EXPECT_EQ(dlfuse_registry_kernel_info(reg, 0, 0, nullptr), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "'info' is NULL");

  info->struct_size = sizeof buf;
  ASSERT_EQ(dlfuse_registry_kernel_info(reg, 0, 0, info), DLFUSE_STATUS_OK) << last_error();
  EXPECT_STREQ(info->op, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_EQ(info->device_type, kDLCPU);
  EXPECT_EQ(info->priority, -10);
  for (size_t i = sizeof(dlfuse_kernel_info_t); i < sizeof buf; ++i)
    ASSERT_EQ(buf[i], 0xCD) << "byte " << i << " (unknown to this host) was written";
}

// A caller of ABI 1.0 passes the 1.0 size: everything up to the last 1.0 field is
// written, nothing past it (kernel_info's `flags` came with 1.1).
TEST(StructSize, KernelInfoOfAbi10SizeFilledWithoutFlags) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  unsigned char buf[sizeof(dlfuse_kernel_info_t)];
  std::memset(buf, 0xCD, sizeof buf);
  auto* info = reinterpret_cast<dlfuse_kernel_info_t*>(buf);
  const size_t v10 = offsetof(dlfuse_kernel_info_t, priority) + sizeof(int32_t);
  info->struct_size = v10;
  ASSERT_EQ(dlfuse_registry_kernel_info(reg, 0, 0, info), DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(info->struct_size, v10);
  EXPECT_STREQ(info->op, DLFUSE_OP_ADD_MUL_ACTIVATION);
  EXPECT_EQ(info->priority, -10);
  for (size_t i = v10; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xCD) << "byte " << i << " past struct_size";
}

TEST(StructSize, PluginInfoOfAbi10SizeFilledUpToNumKernels) {
  Registry reg;
  ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
  unsigned char buf[sizeof(dlfuse_plugin_info_t)];
  std::memset(buf, 0xAB, sizeof buf);
  auto* info = reinterpret_cast<dlfuse_plugin_info_t*>(buf);
  const size_t v10 = offsetof(dlfuse_plugin_info_t, num_kernels) + sizeof(int32_t);
  info->struct_size = v10;
  ASSERT_EQ(dlfuse_registry_plugin_info(reg, 0, info), DLFUSE_STATUS_OK) << last_error();
  EXPECT_STREQ(info->name, "unit_echo");
  EXPECT_EQ(info->num_kernels, UNIT_NUM_KERNELS);
  for (size_t i = v10; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " past struct_size";
}

TEST(StructSize, OptionsShorterThanAbi10Refused) {
  dlfuse_registry_options_t o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = offsetof(dlfuse_registry_options_t, plugin_paths);
  o.discovery = DLFUSE_DISCOVER_NONE;
  dlfuse_registry_t reg = nullptr;
  EXPECT_EQ(dlfuse_registry_create(&o, &reg), DLFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_MSG_HAS(last_error(), "struct_size");
  dlfuse_registry_destroy(reg);
}

TEST(StructSize, OptionsFromANewerCallerAccepted) {
  struct {
    dlfuse_registry_options_t o;
    uint64_t future_field;
  } s;
  std::memset(&s, 0, sizeof s);
  const std::string path = plugin_path("unit_echo");
  s.o.struct_size = sizeof s;
  s.o.discovery = DLFUSE_DISCOVER_NONE;
  s.o.plugin_paths = path.c_str();
  s.future_field = ~0ull;
  dlfuse_registry_t reg = nullptr;
  ASSERT_EQ(dlfuse_registry_create(&s.o, &reg), DLFUSE_STATUS_OK) << last_error();
  int32_t n = -1;
  EXPECT_EQ(dlfuse_registry_plugin_count(reg, &n), DLFUSE_STATUS_OK);
  EXPECT_EQ(n, 1);
  dlfuse_registry_destroy(reg);
}

}  // namespace
}  // namespace unit

// What dlfuse_device_alloc gives on a CPU plugin (docs/abi.md, "Device services"): host
// memory aligned to at least 64 bytes, a unique pointer for 0 bytes. Checked on the CPU
// plugins this project builds (DLFUSE_UNIT_CPU_PLUGINS) and on the unit test plugin.
#include "unit_common.h"

#include <set>
#include <sstream>

namespace unit {
namespace {

std::vector<std::string> cpu_plugin_files() {
  std::vector<std::string> files = {plugin_path("unit_echo")};
  std::stringstream list(DLFUSE_UNIT_CPU_PLUGINS);
  for (std::string f; std::getline(list, f, ':');)
    if (!f.empty()) files.push_back(f);
  return files;
}

class CpuAlloc : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuAlloc, AlignedTo64BytesAndUniqueForZeroBytes) {
  Registry reg;
  ASSERT_EQ(dlfuse_registry_load(reg, GetParam().c_str(), nullptr), DLFUSE_STATUS_OK) << last_error();
  const DLDevice cpu{kDLCPU, 0};
  std::set<void*> seen;
  std::vector<void*> held;
  for (const size_t n : {size_t{0}, size_t{0}, size_t{1}, size_t{3}, size_t{63}, size_t{64}, size_t{65}, size_t{1000},
                         size_t{4097}, size_t{1} << 20}) {
    void* p = nullptr;
    ASSERT_EQ(dlfuse_device_alloc(reg, cpu, n, &p), DLFUSE_STATUS_OK) << n << " bytes: " << last_error();
    ASSERT_NE(p, nullptr) << n << " bytes";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n << " bytes at " << p;
    EXPECT_TRUE(seen.insert(p).second) << n << " bytes: " << p << " given twice while held";
    if (n > 0) std::memset(p, 0x5A, n);  // the whole range is usable host memory
    held.push_back(p);
  }
  for (void* p : held) EXPECT_EQ(dlfuse_device_free(reg, cpu, p), DLFUSE_STATUS_OK) << last_error();
}

INSTANTIATE_TEST_SUITE_P(Plugins, CpuAlloc, ::testing::ValuesIn(cpu_plugin_files()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string stem = fs::path(i.param).stem().string();  // libdlfuse_<name>
                           stem = stem.substr(stem.find('_') + 1);
                           for (char& c : stem)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return stem;
                         });

}  // namespace
}  // namespace unit

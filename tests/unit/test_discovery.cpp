// Discovery: DLFUSE_PLUGIN_PATH, the plugin_paths option, the install folder, and never
// the current directory.
#include <fstream>

#include "unit_common.h"

namespace unit {
namespace {

std::vector<std::string> plugin_paths_of(dlfuse_registry_t reg) {
  std::vector<std::string> v;
  for (const auto& p : plugins(reg)) v.push_back(p.path);
  return v;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? ":" : "") + parts[i];
  return s;
}

bool is_under(const std::string& path, const fs::path& dir) {
  const std::string d = dir.string() + "/";
  return path.compare(0, d.size(), d) == 0;
}

TEST(Discovery, EnvFoldersAndFilesInOrder) {
  TempDir tmp;
  const std::string a_b = tmp.copy_plugin("unit_echo", "A", "libdlfuse_b.so");
  const std::string a_a = tmp.copy_plugin("unit_echo3", "A", "libdlfuse_a.so");
  const std::string b_x = tmp.copy_plugin("unit_echo2", "B", "libdlfuse_x.so");
  const std::string file = tmp.copy_plugin("unit_newerminor", "C", "libdlfuse_newer.so");
  const std::string env = join({tmp.dir("B").string(), file, tmp.dir("A").string()});
  ScopedEnv e("DLFUSE_PLUGIN_PATH", env.c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_names(reg), (std::vector<std::string>{"unit_echo2", "unit_newerminor", "unit_echo3", "unit_echo"}))
      << "DLFUSE_PLUGIN_PATH=" << env;
  EXPECT_EQ(plugin_paths_of(reg), (std::vector<std::string>{b_x, file, a_a, a_b}));
  for (const auto& p : plugins(reg)) EXPECT_EQ(p.available, 1) << p.name << ": " << p.reason;
}

TEST(Discovery, FilesWithinAFolderInNameOrder) {
  TempDir tmp;
  // Created in another order than their names.
  tmp.copy_plugin("unit_echo", "P", "libdlfuse_c.so");
  tmp.copy_plugin("unit_echo2", "P", "libdlfuse_a.so");
  tmp.copy_plugin("unit_echo3", "P", "libdlfuse_b.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("P").c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_names(reg), (std::vector<std::string>{"unit_echo2", "unit_echo3", "unit_echo"}));
}

TEST(Discovery, NonMatchingFileNamesIgnored) {
  TempDir tmp;
  for (const char* name : {"dlfuse_x.so", "libdlfuse_y.so.1", "libdlfuse_z.txt", "libother.so", "libdlfuse_w.so.bak",
                           "xlibdlfuse_v.so", "LIBDLFUSE_U.SO", "libdlfuse_t.so~"})
    tmp.copy_plugin("unit_echo2", "P", name);
  const std::string ok = tmp.copy_plugin("unit_echo", "P", "libdlfuse_ok.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("P").c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_paths_of(reg), (std::vector<std::string>{ok}));
}

TEST(Discovery, CurrentDirectoryNeverSearched) {
  TempDir tmp;
  const fs::path cwd = tmp.dir("cwd");
  tmp.copy_plugin("unit_echo", "cwd", "libdlfuse_cwd.so");
  // A cwd that looks like an install prefix, too.
  tmp.copy_plugin("unit_echo3", "cwd/dlfuse/plugins", "libdlfuse_cwd3.so");
  tmp.copy_plugin("unit_echo3", "cwd/lib/dlfuse/plugins", "libdlfuse_cwd3.so");
  const std::string other = tmp.copy_plugin("unit_echo2", "other", "libdlfuse_other.so");
  ScopedCwd in(cwd);

  auto check = [&](const char* env_value, std::vector<std::string> expect_paths_from_env) {
    ScopedEnv e("DLFUSE_PLUGIN_PATH", env_value);
    Registry reg(DLFUSE_DISCOVER_DEFAULT);
    ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
    for (const auto& p : plugins(reg)) {
      EXPECT_FALSE(is_under(p.path, cwd)) << "loaded from the current directory: " << p.path
                                          << " (DLFUSE_PLUGIN_PATH=" << (env_value ? env_value : "unset") << ")";
      EXPECT_EQ(p.path.find("libdlfuse_cwd"), std::string::npos) << "loaded from the cwd: " << p.path;
      EXPECT_NE(p.name, "unit_echo");
      EXPECT_NE(p.name, "unit_echo3");
    }
    for (const auto& want : expect_paths_from_env) {
      bool found = false;
      for (const auto& p : plugins(reg)) found |= p.path == want;
      EXPECT_TRUE(found) << want << " not loaded";
    }
  };
  check(nullptr, {});
  check("", {});
  // Empty entries (which some path conventions read as ".") are skipped.
  const std::string with_empties = ":" + tmp.dir("other").string() + "::";
  check(with_empties.c_str(), {other});
}

TEST(Discovery, NoneLoadsNothing) {
  TempDir tmp;
  tmp.copy_plugin("unit_echo", "P", "libdlfuse_a.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("P").c_str());
  Registry reg(DLFUSE_DISCOVER_NONE);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_count(reg), 0);
}

TEST(Discovery, EnvIgnoredWithoutTheEnvFlag) {
  TempDir tmp;
  const std::string p = tmp.copy_plugin("unit_echo", "P", "libdlfuse_a.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("P").c_str());
  Registry reg(DLFUSE_DISCOVER_INSTALL_DIR);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  for (const auto& path : plugin_paths_of(reg)) EXPECT_NE(path, p);
}

TEST(Discovery, PluginPathsOptionLoadedFirst) {
  TempDir tmp;
  const std::string env_p = tmp.copy_plugin("unit_echo", "ENV", "libdlfuse_a.so");
  const std::string opt_dir_p = tmp.copy_plugin("unit_echo3", "OPT", "libdlfuse_z.so");
  const std::string opt_file = tmp.copy_plugin("unit_echo2", "F", "libdlfuse_f.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("ENV").c_str());
  const std::string opt = join({tmp.dir("OPT").string(), opt_file});
  Registry reg(DLFUSE_DISCOVER_ENV, opt.c_str());
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_paths_of(reg), (std::vector<std::string>{opt_dir_p, opt_file, env_p}));
}

TEST(Discovery, PluginPathsOptionHonoredWithDiscoverNone) {
  // plugin_paths are explicit: the discovery bits choose only the implicit places.
  TempDir tmp;
  const std::string opt_file = tmp.copy_plugin("unit_echo2", "F", "libdlfuse_f.so");
  tmp.copy_plugin("unit_echo", "ENV", "libdlfuse_a.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("ENV").c_str());
  Registry reg(DLFUSE_DISCOVER_NONE, opt_file.c_str());
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_paths_of(reg), (std::vector<std::string>{opt_file}));
}

TEST(Discovery, NullOptionsMeansDefault) {
  TempDir tmp;
  const std::string p = tmp.copy_plugin("unit_echo", "P", "libdlfuse_a.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("P").c_str());
  dlfuse_registry_t reg = nullptr;
  ASSERT_EQ(dlfuse_registry_create(nullptr, &reg), DLFUSE_STATUS_OK) << last_error();
  const auto paths = plugin_paths_of(reg);
  EXPECT_NE(std::find(paths.begin(), paths.end(), p), paths.end()) << "env plugin not loaded";
  dlfuse_registry_destroy(reg);
}

TEST(Discovery, MissingFoldersAndFilesDoNotFailCreation) {
  TempDir tmp;
  const std::string p = tmp.copy_plugin("unit_echo", "P", "libdlfuse_a.so");
  const std::string env = join({(tmp.path() / "no_such_dir").string(), tmp.dir("P").string()});
  ScopedEnv e("DLFUSE_PLUGIN_PATH", env.c_str());
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  const auto paths = plugin_paths_of(reg);
  EXPECT_NE(std::find(paths.begin(), paths.end(), p), paths.end());
  const int32_t idx = find_plugin(reg, "unit_echo");
  ASSERT_GE(idx, 0);
  EXPECT_EQ(plugin_info(reg, idx).available, 1);
}

TEST(Discovery, WholeCorpusIncludingBrokenPlugins) {
  // Every libdlfuse_*.so of the unit corpus, broken ones included: creation succeeds,
  // each file is listed, the broken ones unavailable with a reason, and calls dispatch
  // to the best good plugin.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(DLFUSE_UNIT_PLUGIN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libdlfuse_", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".so")
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  ScopedEnv e("DLFUSE_PLUGIN_PATH", DLFUSE_UNIT_PLUGIN_DIR);
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_paths_of(reg), files);
  // Plugins that load (their kernels misbehave, or they serve another device type).
  const std::vector<std::string> good = {
      "unit_echo",      "unit_echo2",  "unit_echo3",        "unit_newerminor",   "unit_throws",   "unit_kernelerror",
      "unit_badstatus", "unit_silent", "unit_unterminated", "unit_k_device4242", "unit_v10",      "unit_v11",
      "unit_prio_a",    "unit_prio_b", "unit_v11layout",    "unit_decl",         "unit_decl_bwd", "unit_decl_cased"};
  for (const auto& p : plugins(reg)) {
    const std::string stem = fs::path(p.path).stem().string().substr(std::strlen("libdlfuse_"));
    const bool should_work = std::find(good.begin(), good.end(), stem) != good.end();
    EXPECT_EQ(p.available, should_work ? 1 : 0) << p.path << ": " << p.reason;
    if (!should_work) EXPECT_FALSE(p.reason.empty()) << p.path;
  }
  // unit_echo2 (priority -5) beats every other (-10; unit_prio_b's -5 for float32 loads later).
  Probe echo2("unit_echo2");
  ASSERT_TRUE(echo2.loaded());
  const int64_t before = echo2.calls();
  AmaCase c;
  ASSERT_EQ(dlfuse_add_mul_activation(reg, c.x, c.y, c.bias, 1.0, DLFUSE_ACT_RELU, c.out, nullptr), DLFUSE_STATUS_OK)
      << last_error();
  EXPECT_EQ(echo2.calls(), before + 1);
}

TEST(Discovery, InstallDirRelativeToLibdlfuse) {
  const fs::path dir = fs::path(DLFUSE_UNIT_LIB_DIR) / "dlfuse" / "plugins";
  const fs::path testref = dir / "libdlfuse_testref.so";
  if (!fs::exists(testref)) GTEST_SKIP() << testref << " is not built";
  Registry reg(DLFUSE_DISCOVER_INSTALL_DIR);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  const int32_t idx = find_plugin(reg, "testref");
  ASSERT_GE(idx, 0) << "testref not discovered in " << dir;
  const PluginInfo p = plugin_info(reg, idx);
  EXPECT_EQ(fs::path(p.path).lexically_normal(), testref.lexically_normal());
  EXPECT_EQ(p.available, 1) << p.reason;
  for (const auto& path : plugin_paths_of(reg))
    EXPECT_TRUE(is_under(fs::path(path).lexically_normal().string(), dir.lexically_normal()))
        << path << " is not in " << dir;
}

TEST(Discovery, InstallDirAfterEnv) {
  const fs::path dir = fs::path(DLFUSE_UNIT_LIB_DIR) / "dlfuse" / "plugins";
  if (!fs::exists(dir / "libdlfuse_testref.so")) GTEST_SKIP() << "testref is not built";
  TempDir tmp;
  const std::string env_p = tmp.copy_plugin("unit_echo", "ENV", "libdlfuse_a.so");
  ScopedEnv e("DLFUSE_PLUGIN_PATH", tmp.dir("ENV").c_str());
  Registry reg(DLFUSE_DISCOVER_DEFAULT);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  const auto paths = plugin_paths_of(reg);
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths[0], env_p);
  EXPECT_GE(find_plugin(reg, "testref"), 1);
}

TEST(Discovery, RelativeEntryNotLoadedAndListedAsRefused) {
  // docs/abi.md: "an empty or relative entry in a path list is not loaded and is listed
  // as refused, with the reason" (a relative entry would depend on the cwd).
  TempDir tmp;
  const fs::path cwd = tmp.dir("cwd");
  tmp.copy_plugin("unit_echo", "cwd/rel", "libdlfuse_rel.so");
  ScopedCwd in(cwd);
  ScopedEnv e("DLFUSE_PLUGIN_PATH", "rel");
  Registry reg(DLFUSE_DISCOVER_ENV);
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(find_plugin(reg, "unit_echo"), -1) << "a relative entry was loaded";
  const auto list = plugins(reg);
  ASSERT_EQ(list.size(), 1u) << "the refused entry is not listed";
  EXPECT_EQ(list[0].available, 0);
  EXPECT_FALSE(list[0].reason.empty());
  EXPECT_MSG_IHAS(list[0].reason, "relative");
}

TEST(Discovery, FileSeenTwiceLoadedOnce) {
  TempDir tmp;
  const std::string p = tmp.copy_plugin("unit_echo", "P", "libdlfuse_a.so");
  const std::string env = join({tmp.dir("P").string(), p});
  ScopedEnv e("DLFUSE_PLUGIN_PATH", env.c_str());
  Registry reg(DLFUSE_DISCOVER_ENV, p.c_str());  // in plugin_paths, the folder and the file
  ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
  EXPECT_EQ(plugin_paths_of(reg), (std::vector<std::string>{p}));
  EXPECT_EQ(plugin_info(reg, 0).available, 1);
}

}  // namespace
}  // namespace unit

// unit_common.h: helpers shared by the registry's unit tests.
//
// Everything goes through the public C API (dlfuse/dlfuse.h). The test plugins are
// built into DLFUSE_UNIT_PLUGIN_DIR; their records are read with dlopen(RTLD_NOLOAD)
// on the file the registry loaded (see plugins/unit_record.h).
#ifndef DLFUSE_UNIT_COMMON_H_
#define DLFUSE_UNIT_COMMON_H_

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dlfuse/dlfuse.h"
#include "dlfuse/plugin.h"
#include "unit_record.h"

namespace unit {

namespace fs = std::filesystem;

// ---- paths ----------------------------------------------------------------------------

// The file of a unit plugin, e.g. plugin_path("unit_echo") -> .../libdlfuse_unit_echo.so
inline std::string plugin_path(const std::string& stem) {
  return std::string(DLFUSE_UNIT_PLUGIN_DIR) + "/libdlfuse_" + stem + ".so";
}

// ---- messages -------------------------------------------------------------------------

inline std::string last_error() {
  const char* e = dlfuse_last_error();
  return e ? std::string(e) : std::string("<dlfuse_last_error returned NULL>");
}

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline std::string squash(const std::string& s) {
  std::string r;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) r += c;
  return r;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}
inline bool icontains(const std::string& hay, const std::string& needle) { return contains(lower(hay), lower(needle)); }

// True when `msg` spells `shape` as [a, b] or (a, b) (spaces ignored; "(a,)" for 1-D).
inline bool has_shape(const std::string& msg, const std::vector<int64_t>& shape) {
  std::string inner;
  for (size_t i = 0; i < shape.size(); ++i) inner += (i ? "," : "") + std::to_string(shape[i]);
  const std::string m = squash(msg);
  return contains(m, "[" + inner + "]") || contains(m, "(" + inner + ")") ||
         (shape.size() == 1 && contains(m, "(" + inner + ",)"));
}

// gtest predicates that print the message when they fail.
#define EXPECT_MSG_HAS(msg, needle) \
  EXPECT_TRUE(::unit::contains((msg), (needle))) << "message: \"" << (msg) << "\"\nlacks: \"" << (needle) << "\""
#define EXPECT_MSG_IHAS(msg, needle)              \
  EXPECT_TRUE(::unit::icontains((msg), (needle))) \
      << "message: \"" << (msg) << "\"\nlacks (any case): \"" << (needle) << "\""
#define EXPECT_MSG_SHAPE(msg, ...)                                         \
  EXPECT_TRUE(::unit::has_shape((msg), std::vector<int64_t>{__VA_ARGS__})) \
      << "message: \"" << (msg) << "\"\nlacks the shape [" #__VA_ARGS__ "]"

// ---- environment, folders ---------------------------------------------------------------

// Sets (value != nullptr) or unsets an environment variable; restores it when destroyed.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A fresh folder under DLFUSE_UNIT_TMP_DIR, named after the running test; removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "tmp";
    std::replace(name.begin(), name.end(), '/', '_');
    root_ = fs::path(DLFUSE_UNIT_TMP_DIR) / (name + "-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return root_; }
  // Creates (if needed) and returns the subfolder `sub`.
  fs::path dir(const std::string& sub) const {
    fs::path d = root_ / sub;
    fs::create_directories(d);
    return d;
  }
  // Copies the unit plugin `stem` to <sub>/<file_name>; returns the new path.
  std::string copy_plugin(const std::string& stem, const std::string& sub, const std::string& file_name) const {
    fs::path dst = dir(sub) / file_name;
    fs::copy_file(plugin_path(stem), dst, fs::copy_options::overwrite_existing);
    return dst.string();
  }

 private:
  fs::path root_;
};

// chdir() for the lifetime of the object.
class ScopedCwd {
 public:
  explicit ScopedCwd(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedCwd() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }

 private:
  fs::path old_;
};

// ---- registry ------------------------------------------------------------------------

// A registry that owns itself. The default discovers nothing, so a test sees exactly
// the plugins it loads.
class Registry {
 public:
  explicit Registry(uint32_t discovery = DLFUSE_DISCOVER_NONE, const char* plugin_paths = nullptr) {
    dlfuse_registry_options_t o;
    std::memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.discovery = discovery;
    o.plugin_paths = plugin_paths;
    create_status = dlfuse_registry_create(&o, &reg_);
  }
  ~Registry() { dlfuse_registry_destroy(reg_); }
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  operator dlfuse_registry_t() const { return reg_; }
  dlfuse_registry_t get() const { return reg_; }
  // Loads a unit plugin by stem ("unit_echo"); returns the status.
  dlfuse_status_t load(const std::string& stem, int32_t* index = nullptr) {
    return dlfuse_registry_load(reg_, plugin_path(stem).c_str(), index);
  }
  // Destroys now (for tests of close()); the destructor then does nothing.
  void destroy() {
    dlfuse_registry_destroy(reg_);
    reg_ = nullptr;
  }

  dlfuse_status_t create_status = DLFUSE_STATUS_INTERNAL;

 private:
  dlfuse_registry_t reg_ = nullptr;
};

struct PluginInfo {
  dlfuse_status_t status = DLFUSE_STATUS_INTERNAL;
  std::string name, version, path, reason;
  int32_t available = -1, device_type = -1, device_count = -1, num_kernels = -1;
  uint32_t abi_major = 0, abi_minor = 0;
};

inline std::string str(const char* s) { return s ? std::string(s) : std::string("<NULL>"); }

inline PluginInfo plugin_info(dlfuse_registry_t reg, int32_t i) {
  dlfuse_plugin_info_t pi;
  std::memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  PluginInfo r;
  r.status = dlfuse_registry_plugin_info(reg, i, &pi);
  if (r.status != DLFUSE_STATUS_OK) return r;
  r.name = str(pi.name);
  r.version = str(pi.version);
  r.path = str(pi.path);
  r.reason = str(pi.reason);
  r.available = pi.available;
  r.device_type = pi.device_type;
  r.device_count = pi.device_count;
  r.num_kernels = pi.num_kernels;
  r.abi_major = pi.abi_major;
  r.abi_minor = pi.abi_minor;
  return r;
}

inline int32_t plugin_count(dlfuse_registry_t reg) {
  int32_t n = -1;
  EXPECT_EQ(dlfuse_registry_plugin_count(reg, &n), DLFUSE_STATUS_OK) << last_error();
  return n;
}

inline std::vector<PluginInfo> plugins(dlfuse_registry_t reg) {
  std::vector<PluginInfo> v;
  const int32_t n = plugin_count(reg);
  for (int32_t i = 0; i < n; ++i) v.push_back(plugin_info(reg, i));
  return v;
}

// Names of the plugins, in index (load) order.
inline std::vector<std::string> plugin_names(dlfuse_registry_t reg) {
  std::vector<std::string> v;
  for (const auto& p : plugins(reg)) v.push_back(p.name);
  return v;
}

// Index of the plugin called `name`, or -1.
inline int32_t find_plugin(dlfuse_registry_t reg, const std::string& name) {
  const auto v = plugins(reg);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) return static_cast<int32_t>(i);
  return -1;
}

// ---- plugin records ------------------------------------------------------------------

// Reads the record of a unit plugin that the registry has loaded (by stem).
class Probe {
 public:
  explicit Probe(const std::string& stem) : Probe(stem, true) {}
  static Probe at_path(const std::string& path) { return Probe(path, false); }
  ~Probe() {
    if (h_) ::dlclose(h_);
  }
  Probe(Probe&& o) noexcept : h_(o.h_), rec_(o.rec_), reset_(o.reset_) { o.h_ = nullptr; }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // False when the file is not loaded in this process (the registry never loaded it,
  // or unloaded it).
  bool loaded() const { return h_ != nullptr && rec_ != nullptr; }
  unit_record_t record() const {
    unit_record_t r;
    std::memset(&r, 0, sizeof r);
    if (rec_) rec_(&r);
    return r;
  }
  int64_t calls() const { return record().kernel_calls; }
  void reset() const {
    if (reset_) reset_();
  }

 private:
  Probe(const std::string& s, bool is_stem) {
    const std::string path = is_stem ? plugin_path(s) : s;
    h_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h_) {
      rec_ = reinterpret_cast<unit_plugin_record_fn_t>(::dlsym(h_, UNIT_RECORD_SYMBOL));
      reset_ = reinterpret_cast<unit_plugin_reset_fn_t>(::dlsym(h_, UNIT_RESET_SYMBOL));
    }
  }
  void* h_ = nullptr;
  unit_plugin_record_fn_t rec_ = nullptr;
  unit_plugin_reset_fn_t reset_ = nullptr;
};

// ---- tensors -------------------------------------------------------------------------

inline DLDataType f32() { return DLDataType{kDLFloat, 32, 1}; }
inline DLDataType f64() { return DLDataType{kDLFloat, 64, 1}; }
inline DLDataType f16() { return DLDataType{kDLFloat, 16, 1}; }

// A host tensor that owns its shape, strides and storage. Movable, not copyable; the
// DLTensor it exposes stays valid across moves (vectors keep their buffers).
class Tensor {
 public:
  // Compact row-major; storage for numel elements (at least one) of `dtype`, zeroed.
  explicit Tensor(std::vector<int64_t> shape, DLDataType dtype = f32(), DLDevice device = DLDevice{kDLCPU, 0})
      : shape_(std::move(shape)) {
    int64_t n = 1;
    bool huge = false;
    for (int64_t d : shape_) {
      if (d > (int64_t{1} << 24))
        huge = true;  // fake sizes for overflow tests: no storage
      else
        n *= d;
    }
    if (huge) n = 1;
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * ((dtype.bits * dtype.lanes + 7) / 8);
    storage_.assign((bytes + 7) / 8 + 1, 0.0);
    std::memset(&t_, 0, sizeof t_);
    t_.data = storage_.data();
    t_.device = device;
    t_.ndim = static_cast<int32_t>(shape_.size());
    t_.dtype = dtype;
    t_.shape = shape_.data();
    t_.strides = nullptr;
    t_.byte_offset = 0;
  }
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  DLTensor* dl() { return &t_; }
  const DLTensor* dl() const { return &t_; }
  operator DLTensor*() { return &t_; }

  Tensor& strides(std::vector<int64_t> s) {
    strides_ = std::move(s);
    t_.strides = strides_.data();
    return *this;
  }
  float* f() { return reinterpret_cast<float*>(static_cast<char*>(t_.data) + t_.byte_offset); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  // Fills a compact float32 tensor with gen(i).
  Tensor& fill(const std::function<float(int64_t)>& gen) {
    for (int64_t i = 0; i < numel(); ++i) f()[i] = gen(i);
    return *this;
  }
  Tensor& fill(float v) {
    return fill([v](int64_t) { return v; });
  }
  void* storage() { return storage_.data(); }

 private:
  std::vector<int64_t> shape_, strides_;
  std::vector<double> storage_;  // 8-byte aligned
  DLTensor t_;
};

// Inputs of add_mul_activation with x, y: [M, N], bias: [N], out: [M, N] and distinct,
// exactly representable values.
struct AmaCase {
  Tensor x, y, bias, out;
  AmaCase(int64_t M = 2, int64_t N = 3, float x0 = 0.0f) : x({M, N}), y({M, N}), bias({N}), out({M, N}) {
    x.fill([x0](int64_t i) { return x0 + 0.5f * static_cast<float>(i) - 1.0f; });
    y.fill([](int64_t i) { return 0.25f * static_cast<float>(i % 5) - 0.5f; });
    bias.fill([](int64_t i) { return 0.125f * static_cast<float>(i); });
    out.fill(-777.0f);
  }
  // out[m, n] for identity / relu
  float expect(int64_t i, double multiplier, bool relu) {
    const int64_t N = bias.numel();
    const double p = static_cast<double>(x.f()[i]) + static_cast<double>(bias.f()[i % N]) +
                     multiplier * static_cast<double>(y.f()[i]);
    return static_cast<float>(relu ? (p > 0 ? p : 0.0) : p);
  }
};

// Inputs of matmul_add_relu with a: [M, K], b: [K, N], bias: [N], out: [M, N].
struct MmCase {
  Tensor a, b, bias, out;
  int64_t M, K, N;
  MmCase(int64_t M_ = 2, int64_t K_ = 3, int64_t N_ = 4)
      : a({M_, K_}), b({K_, N_}), bias({N_}), out({M_, N_}), M(M_), K(K_), N(N_) {
    a.fill([](int64_t i) { return 0.5f * static_cast<float>(i % 7) - 1.0f; });
    b.fill([](int64_t i) { return 0.25f * static_cast<float>(i % 5) - 0.5f; });
    bias.fill([](int64_t i) { return 0.5f - 0.25f * static_cast<float>(i); });
    out.fill(-777.0f);
  }
  float expect(int64_t m, int64_t n) {
    double acc = bias.f()[n];
    for (int64_t k = 0; k < K; ++k) acc += double(a.f()[m * K + k]) * double(b.f()[k * N + n]);
    return static_cast<float>(acc > 0 ? acc : 0.0);
  }
};

inline dlfuse_attr_t attr_i64(int32_t key, int64_t v) {
  dlfuse_attr_t a;
  std::memset(&a, 0, sizeof a);
  a.key = key;
  a.type = DLFUSE_ATTR_INT64;
  a.value.i64 = v;
  return a;
}
inline dlfuse_attr_t attr_f64(int32_t key, double v) {
  dlfuse_attr_t a;
  std::memset(&a, 0, sizeof a);
  a.key = key;
  a.type = DLFUSE_ATTR_FLOAT64;
  a.value.f64 = v;
  return a;
}

// A fixture with one registry holding only the unit_echo plugin (priority -10).
class EchoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(reg.create_status, DLFUSE_STATUS_OK) << last_error();
    ASSERT_EQ(reg.load("unit_echo"), DLFUSE_STATUS_OK) << last_error();
    probe = std::make_unique<Probe>("unit_echo");
    ASSERT_TRUE(probe->loaded()) << "cannot reach the record of " << plugin_path("unit_echo");
    probe->reset();
  }
  int64_t calls() const { return probe->calls(); }

  Registry reg;
  std::unique_ptr<Probe> probe;
};

}  // namespace unit

#endif  // DLFUSE_UNIT_COMMON_H_

// dlfuse_bench: times plugins through the public C API. One JSON object per line on
// stdout (read by bench/run.py); progress on stderr.
//
//   dlfuse_bench list                         plugins that default discovery finds
//   dlfuse_bench ops PLUGIN.so [--device-id I] [--dtypes float32,bfloat16] [--mode smoke|quick|full]
//                    [--large]                both ops, forward and backward, over the anchor shapes
//                                             (--large adds matmul 8192x4096x4096, the GPU anchor)
//   dlfuse_bench dispatch NOOP.so [--mode smoke|quick|full]
//                                             ns per call of a kernel that does nothing
//   dlfuse_bench copy-bw [--mode ...]         host memcpy bandwidth (the CPU copy ceiling)
//
// Timing of a case: one warm-up call, then `rounds` batches of `batch` back-to-back calls,
// each batch closed by a device synchronize and timed by the host's steady clock; the
// per-call time of a batch is its time / batch. Medians and the 10th/90th percentiles are
// over the batches. Batches keep small GPU calls from being timed as launch + sync latency
// (like CUDA events around back-to-back calls); a CPU plugin returns when done, so a batch
// of a slow CPU case is one call. Inputs rotate over several buffer sets when a set is
// smaller than the last-level cache, so that repeated calls do not just measure the cache.
#include <dlfuse/dlfuse.h>
#include <dlfuse/plugin.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;

enum class Mode { smoke, quick, full };
Mode g_mode = Mode::full;
std::string g_only;  // dispatch --only SUBSTR: the cases whose name contains it

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dlfuse_bench: %s\n", what.c_str());
  std::exit(1);
}

void ck(dlfuse_status_t st, const char* what) {
  if (st != DLFUSE_STATUS_OK) die(std::string(what) + ": " + dlfuse_status_string(st) + ": " + dlfuse_last_error());
}

double now_s() { return std::chrono::duration<double>(clk::now().time_since_epoch()).count(); }

struct Stats {
  double median, p10, p90, min;
  int n;
};

Stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double f) {  // linear interpolation between order statistics
    const double pos = f * double(v.size() - 1);
    const size_t lo = size_t(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  return {q(0.5), q(0.1), q(0.9), v.front(), int(v.size())};
}

std::string json_escape(const char* s) {
  std::string o;
  for (; s && *s; ++s) {
    if (*s == '"' || *s == '\\') o += '\\';
    if (static_cast<unsigned char>(*s) < 0x20) continue;
    o += *s;
  }
  return o;
}

// ---- data on the plugin's device --------------------------------------------------------

struct Dtype {
  const char* name;
  DLDataType dl;
  int size;
};
const Dtype kDtypes[] = {{"float32", {kDLFloat, 32, 1}, 4}, {"bfloat16", {kDLBfloat, 16, 1}, 2},
                         {"float64", {kDLFloat, 64, 1}, 8}};

const Dtype* find_dtype(const std::string& n) {
  for (const Dtype& d : kDtypes)
    if (n == d.name) return &d;
  die("unknown dtype '" + n + "' (expected float32, bfloat16 or float64)");
}

// Host values uniform in [-1, 1), converted to the dtype's bytes (never zeros: zeros can
// run faster than real data and hide unwritten outputs).
std::vector<unsigned char> host_values(size_t n, const Dtype& dt, uint64_t seed) {
  std::vector<unsigned char> h(n * size_t(dt.size));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const float v = float(int64_t(x >> 40) - (1ll << 23)) / float(1 << 23);
    if (dt.size == 4) {
      std::memcpy(&h[i * 4], &v, 4);
    } else if (dt.size == 8) {
      const double d = v;
      std::memcpy(&h[i * 8], &d, 8);
    } else {  // bfloat16, round to nearest even
      uint32_t u;
      std::memcpy(&u, &v, 4);
      u += 0x7fff + ((u >> 16) & 1);
      const uint16_t b = uint16_t(u >> 16);
      std::memcpy(&h[i * 2], &b, 2);
    }
  }
  return h;
}

struct DevTensor {
  dlfuse_registry_t reg = nullptr;
  DLDevice dev{};
  void* ptr = nullptr;
  std::vector<int64_t> shape;
  DLTensor t{};
  DevTensor(dlfuse_registry_t r, DLDevice d, const Dtype& dt, std::vector<int64_t> s, uint64_t seed)
      : reg(r), dev(d), shape(std::move(s)) {
    size_t n = 1;
    for (int64_t e : shape) n *= size_t(e);
    ck(dlfuse_device_alloc(reg, dev, n * size_t(dt.size), &ptr), "device_alloc");
    const std::vector<unsigned char> h = host_values(n, dt, seed);
    ck(dlfuse_device_copy(reg, dev, DLFUSE_COPY_HOST_TO_DEVICE, ptr, 0, h.data(), 0, h.size(), nullptr),
       "device_copy");
    t.data = ptr;
    t.device = dev;
    t.ndim = int32_t(shape.size());
    t.dtype = dt.dl;
    t.shape = shape.data();
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  ~DevTensor() {
    if (ptr) dlfuse_device_free(reg, dev, ptr);
  }
};

// ---- timing ----------------------------------------------------------------------------

struct Budget {
  double seconds;
  int min_rounds, max_rounds;
};
Budget budget() {
  switch (g_mode) {
    case Mode::smoke: return {0.0, 3, 3};
    case Mode::quick: return {0.3, 3, 30};
    default: return {2.0, 7, 300};
  }
}

// call(i) enqueues repetition i; sync() waits for the device.
Stats time_calls(const std::function<void(int)>& call, const std::function<void()>& sync, int* batch_out) {
  call(0);  // warm-up (first-call costs: compilation, plans, workspaces)
  sync();
  double t0 = now_s();
  call(1);
  sync();
  double one = now_s() - t0;
  if (g_mode != Mode::smoke && one < 0.05) {  // a second warm-up for the fast cases
    call(2);
    sync();
    t0 = now_s();
    call(3);
    sync();
    one = std::min(one, now_s() - t0);
  }
  const Budget b = budget();
  // Batches of about 2 ms (at most 100 calls); slow calls run one per batch.
  const int batch = g_mode == Mode::smoke ? 1 : int(std::clamp(0.002 / std::max(one, 1e-7), 1.0, 100.0));
  // Calls slower than half a second (CPU backward at 16384x8192 on 2 cores) get 3 rounds.
  const int min_rounds = one > 0.5 ? std::min(3, b.min_rounds) : b.min_rounds;
  const int rounds = int(std::clamp(b.seconds / std::max(one * batch, 1e-7), double(min_rounds), double(b.max_rounds)));
  std::vector<double> per_call;
  int rep = 0;
  for (int r = 0; r < rounds; ++r) {
    t0 = now_s();
    for (int i = 0; i < batch; ++i) call(rep++);
    sync();
    per_call.push_back((now_s() - t0) / batch);
  }
  *batch_out = batch;
  return stats_of(per_call);
}

void row(const std::string& op, const std::string& dir, const std::string& dtype, const std::string& shape,
         const std::string& impl, const std::string& device, const Stats& s, int batch, const std::string& extra = "") {
  std::printf("{\"op\": \"%s\", \"dir\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"impl\": \"%s\", "
              "\"device\": \"%s\", \"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, \"min_ms\": %.6g, "
              "\"rounds\": %d, \"batch\": %d%s}\n",
              op.c_str(), dir.c_str(), dtype.c_str(), shape.c_str(), impl.c_str(), device.c_str(), s.median * 1e3,
              s.p10 * 1e3, s.p90 * 1e3, s.min * 1e3, s.n, batch, extra.c_str());
  std::fflush(stdout);
}

void progress(const std::string& what, const Stats& s) {
  std::fprintf(stderr, "  %-58s median %10.4f ms  [p10 %.4f, p90 %.4f] x%d\n", what.c_str(), s.median * 1e3,
               s.p10 * 1e3, s.p90 * 1e3, s.n);
}

int sets_for(size_t set_bytes) {
  // Enough sets to exceed 2x a 64 MiB last-level cache, at most 8 and 1 GiB in all.
  const size_t want = (size_t(128) << 20) / std::max<size_t>(set_bytes, 1) + 1;
  const size_t cap = std::max<size_t>(1, (size_t(1) << 30) / std::max<size_t>(set_bytes, 1));
  return int(std::clamp<size_t>(want, 1, std::min<size_t>(8, cap)));
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t e : d) s += (s.empty() ? "" : "x") + std::to_string(e);
  return s;
}

// ---- ops ---------------------------------------------------------------------------------

struct Ctx {
  dlfuse_registry_t reg;
  DLDevice dev;
  std::string impl, device;
  dlfuse_op_t mf, mb, af, ab;
  std::function<void()> sync;
};

void bench_matmul(Ctx& c, const Dtype& dt, int64_t M, int64_t K, int64_t N) {
  const std::string shape = dims({M, K, N});
  const size_t set_bytes = size_t(M * K + K * N + 2 * M * N + N) * size_t(dt.size);
  const int sets = sets_for(set_bytes);
  std::vector<std::unique_ptr<DevTensor>> A, B, Bi, O, G;
  for (int s = 0; s < sets; ++s) {
    A.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 100 + s));
    B.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 200 + s));
    Bi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 300 + s));
    O.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 400 + s));
    G.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 500 + s));
  }
  auto fwd = [&](int i) {
    const int s = i % sets;
    const DLTensor* in[3] = {&A[s]->t, &B[s]->t, &Bi[s]->t};
    DLTensor* out[1] = {&O[s]->t};
    ck(dlfuse_op_call(c.mf, in, 3, out, 1, nullptr, 0, nullptr), "matmul_add_relu");
  };
  int batch = 0;
  Stats s = time_calls(fwd, c.sync, &batch);
  row("matmul_add_relu", "fwd", dt.name, shape, c.impl, c.device, s, batch, ", \"sets\": " + std::to_string(sets));
  progress(c.impl + " matmul_add_relu fwd " + dt.name + " " + shape, s);
  // Backward from the forward's own outputs (a realistic relu mask).
  for (int i = 0; i < sets; ++i) fwd(i);
  c.sync();
  std::vector<std::unique_ptr<DevTensor>> GA, GB, GBi;
  const int bsets = std::max(1, sets / 2);
  for (int i = 0; i < bsets; ++i) {
    GA.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, K}, 600 + i));
    GB.emplace_back(new DevTensor(c.reg, c.dev, dt, {K, N}, 700 + i));
    GBi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 800 + i));
  }
  auto bwd = [&](int i) {
    const int si = i % sets, so = i % bsets;
    const DLTensor* in[4] = {&G[si]->t, &A[si]->t, &B[si]->t, &O[si]->t};
    DLTensor* out[3] = {&GA[so]->t, &GB[so]->t, &GBi[so]->t};
    ck(dlfuse_op_call(c.mb, in, 4, out, 3, nullptr, 0, nullptr), "matmul_add_relu_backward");
  };
  s = time_calls(bwd, c.sync, &batch);
  row("matmul_add_relu", "bwd", dt.name, shape, c.impl, c.device, s, batch, ", \"sets\": " + std::to_string(sets));
  progress(c.impl + " matmul_add_relu bwd " + dt.name + " " + shape, s);
}

void bench_add_mul(Ctx& c, const Dtype& dt, int64_t M, int64_t N) {
  const std::string shape = dims({M, N});
  const size_t set_bytes = size_t(7 * M * N + 2 * N) * size_t(dt.size);
  const int sets = sets_for(set_bytes);
  std::vector<std::unique_ptr<DevTensor>> X, Y, Bi, O, G, GX, GY, GB;
  for (int s = 0; s < sets; ++s) {
    X.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1000 + s));
    Y.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1100 + s));
    Bi.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 1200 + s));
    O.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1300 + s));
    G.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1400 + s));
    GX.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1500 + s));
    GY.emplace_back(new DevTensor(c.reg, c.dev, dt, {M, N}, 1600 + s));
    GB.emplace_back(new DevTensor(c.reg, c.dev, dt, {N}, 1700 + s));
  }
  dlfuse_attr_t attrs[2] = {};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION;
  attrs[0].type = DLFUSE_ATTR_INT64;
  attrs[0].value.i64 = DLFUSE_ACT_RELU;
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
  attrs[1].type = DLFUSE_ATTR_FLOAT64;
  attrs[1].value.f64 = 0.5;
  const std::string extra = ", \"activation\": \"relu\", \"sets\": " + std::to_string(sets);
  int batch = 0;
  Stats s = time_calls(
      [&](int i) {
        const int k = i % sets;
        const DLTensor* in[3] = {&X[k]->t, &Y[k]->t, &Bi[k]->t};
        DLTensor* out[1] = {&O[k]->t};
        ck(dlfuse_op_call(c.af, in, 3, out, 1, attrs, 2, nullptr), "add_mul_activation");
      },
      c.sync, &batch);
  row("add_mul_activation", "fwd", dt.name, shape, c.impl, c.device, s, batch, extra);
  progress(c.impl + " add_mul_relu fwd " + dt.name + " " + shape, s);
  s = time_calls(
      [&](int i) {
        const int k = i % sets;
        const DLTensor* in[4] = {&G[k]->t, &X[k]->t, &Y[k]->t, &Bi[k]->t};
        DLTensor* out[3] = {&GX[k]->t, &GY[k]->t, &GB[k]->t};
        ck(dlfuse_op_call(c.ab, in, 4, out, 3, attrs, 2, nullptr), "add_mul_activation_backward");
      },
      c.sync, &batch);
  row("add_mul_activation", "bwd", dt.name, shape, c.impl, c.device, s, batch, extra);
  progress(c.impl + " add_mul_relu bwd " + dt.name + " " + shape, s);
}

bool has_kernel(dlfuse_op_t op, int32_t device_type, const Dtype& dt) {
  int32_t p = -1;
  return dlfuse_op_resolve(op, device_type, dt.dl, &p) == DLFUSE_STATUS_OK;
}

int cmd_ops(const std::string& path, int32_t device_id, const std::vector<std::string>& dtypes, bool large) {
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, path.c_str()};
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(&opt, &reg), "registry_create");
  int32_t count = 0;
  ck(dlfuse_registry_plugin_count(reg, &count), "plugin_count");
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  if (count < 1 || dlfuse_registry_plugin_info(reg, 0, &info) != DLFUSE_STATUS_OK)
    die("could not load " + path + ": " + dlfuse_last_error());
  if (!info.available || device_id >= info.device_count) {
    std::printf("{\"skip\": \"%s\", \"path\": \"%s\", \"reason\": \"%s\"}\n", json_escape(info.name).c_str(),
                json_escape(info.path).c_str(),
                info.available ? ("no device_id " + std::to_string(device_id)).c_str() : json_escape(info.reason).c_str());
    dlfuse_registry_destroy(reg);
    return 0;
  }
  Ctx c;
  c.reg = reg;
  c.dev = DLDevice{static_cast<DLDeviceType>(info.device_type), device_id};
  c.impl = std::string("dlfuse_") + info.name;
  const char* dev_names[] = {"", "cpu", "cuda", "cuda_host", "opencl"};
  c.device = (info.device_type >= 1 && info.device_type <= 4 ? dev_names[info.device_type] : "dev") + std::string(":") +
             std::to_string(device_id);
  if (info.device_count > 1 || info.device_type == kDLOpenCL) c.impl += ":" + std::to_string(device_id);
  std::printf("{\"plugin\": \"%s\", \"version\": \"%s\", \"path\": \"%s\", \"device\": \"%s\", \"device_count\": %d}\n",
              json_escape(info.name).c_str(), json_escape(info.version).c_str(), json_escape(info.path).c_str(),
              c.device.c_str(), info.device_count);
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &c.mf), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, &c.mb), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &c.af), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, &c.ab), "op_get");
  c.sync = [&c] { ck(dlfuse_device_synchronize(c.reg, c.dev, nullptr), "device_synchronize"); };

  std::vector<std::array<int64_t, 3>> mm;
  std::vector<std::array<int64_t, 2>> am;
  if (g_mode == Mode::smoke) {
    mm = {{64, 32, 16}};
    am = {{64, 32}};
  } else {
    mm = {{2048, 512, 256}, {4096, 1024, 1024}};
    if (large) mm.push_back({8192, 4096, 4096});
    am = {{2048, 512}, {16384, 8192}};
  }
  for (const std::string& dn : dtypes) {
    const Dtype& dt = *find_dtype(dn);
    if (!has_kernel(c.mf, info.device_type, dt) || !has_kernel(c.af, info.device_type, dt)) {
      std::printf("{\"skip\": \"%s\", \"dtype\": \"%s\", \"reason\": \"no kernel for this dtype\"}\n", info.name,
                  dt.name);
      continue;
    }
    for (auto& s : mm) bench_matmul(c, dt, s[0], s[1], s[2]);
    for (auto& s : am) bench_add_mul(c, dt, s[0], s[1]);
  }
  dlfuse_registry_destroy(reg);
  return 0;
}

// ---- dispatch overhead ------------------------------------------------------------------

int cmd_dispatch(const std::string& path) {
  dlfuse_registry_options_t opt{sizeof(opt), DLFUSE_DISCOVER_NONE, path.c_str()};
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(&opt, &reg), "registry_create");
  dlfuse_plugin_info_t info{};
  info.struct_size = sizeof info;
  ck(dlfuse_registry_plugin_info(reg, 0, &info), "plugin_info");
  if (!info.available || std::strcmp(info.name, "noop") != 0)
    die(path + " is not an available no-op plugin: " + (info.available ? info.name : info.reason));

  // Host tensors of the anchors' shapes, in real (untouched) memory: validation does the
  // work a real call needs, which does not depend on the sizes; the kernels read nothing.
  std::vector<int64_t> s_mn{2048, 512}, s_n{512}, s_mk{2048, 256}, s_kn{256, 512};
  std::vector<std::vector<float>> mem;
  auto mk = [&mem](std::vector<int64_t>& shape) {
    mem.emplace_back(size_t(shape[0]) * size_t(shape.size() > 1 ? shape[1] : 1));
    DLTensor t{};
    t.data = mem.back().data();
    t.device = {kDLCPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = {kDLFloat, 32, 1};
    t.shape = shape.data();
    return t;
  };
  std::vector<int64_t> s_half{1024, 512};
  mem.reserve(12);
  DLTensor x = mk(s_mn), y = mk(s_mn), bias = mk(s_n), out = mk(s_mn), a = mk(s_mk), b = mk(s_kn);
  // The registry remembers each thread's last 8 valid layouts per op and then checks only
  // pointers: `_new_data` alternates two sets of buffers of one layout (a training step's
  // fresh allocations), `_2_layouts` alternates two layouts (both remembered),
  // `_9_layouts` cycles through nine [128 k, 512] views of x, y, out: each call misses.
  DLTensor x2 = mk(s_mn), y2 = mk(s_mn), out2 = mk(s_mn), xh = mk(s_half), yh = mk(s_half), outh = mk(s_half);
  constexpr int kCycle = 9;
  int64_t s_cycle[kCycle][2];
  DLTensor xc[kCycle], yc[kCycle], outc[kCycle];
  const DLTensor* am_inc[kCycle][3];
  DLTensor* am_outc[kCycle][1];
  for (int k = 0; k < kCycle; ++k) {
    s_cycle[k][0] = 128 * (k + 1);
    s_cycle[k][1] = 512;
    xc[k] = x, yc[k] = y, outc[k] = out;
    xc[k].shape = yc[k].shape = outc[k].shape = s_cycle[k];
    am_inc[k][0] = &xc[k], am_inc[k][1] = &yc[k], am_inc[k][2] = &bias;
    am_outc[k][0] = &outc[k];
  }
  dlfuse_op_t am, mm, noop;
  ck(dlfuse_op_get(reg, DLFUSE_OP_ADD_MUL_ACTIVATION, &am), "op_get");
  ck(dlfuse_op_get(reg, DLFUSE_OP_MATMUL_ADD_RELU, &mm), "op_get");
  ck(dlfuse_op_get(reg, "noop", &noop), "op_get");
  dlfuse_attr_t attrs[2] = {};
  attrs[0].key = DLFUSE_ATTR_ACTIVATION;
  attrs[0].type = DLFUSE_ATTR_INT64;
  attrs[0].value.i64 = DLFUSE_ACT_RELU;
  attrs[1].key = DLFUSE_ATTR_MULTIPLIER;
  attrs[1].type = DLFUSE_ATTR_FLOAT64;
  attrs[1].value.f64 = 0.5;
  const DLTensor* am_in[3] = {&x, &y, &bias};
  DLTensor* am_out[1] = {&out};
  const DLTensor* am_in2[3] = {&x2, &y2, &bias};
  DLTensor* am_out2[1] = {&out2};
  const DLTensor* am_inh[3] = {&xh, &yh, &bias};
  DLTensor* am_outh[1] = {&outh};
  const DLTensor* mm_in[3] = {&a, &b, &bias};
  DLTensor* mm_out[1] = {&out};
  const DLTensor* n_in[1] = {&x};
  DLTensor* n_out[1] = {&out};

  // The floor: the same kernel called straight through its function pointer (own dlopen).
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) die(std::string("dlopen: ") + dlerror());
  auto entry = reinterpret_cast<dlfuse_plugin_entry_fn_t>(dlsym(h, DLFUSE_PLUGIN_ENTRY));
  if (!entry) die("no entry symbol in " + path);
  const dlfuse_plugin_t* api = entry();
  void* state = nullptr;
  char err[256];
  if (api->open(nullptr, &state, err, sizeof err) != DLFUSE_STATUS_OK) die(err);
  const dlfuse_kernel_t* ks = nullptr;
  int32_t nk = 0;
  api->get_kernels(state, &ks, &nk, err, sizeof err);
  dlfuse_kernel_t direct = ks[2];  // add_mul_activation
  dlfuse_kernel_args_t args{};
  args.struct_size = sizeof args;
  args.op = DLFUSE_OP_ADD_MUL_ACTIVATION;
  args.inputs = am_in;
  args.num_inputs = 3;
  args.outputs = am_out;
  args.num_outputs = 1;
  args.attrs = attrs;
  args.num_attrs = 2;
  args.err = err;
  args.err_size = sizeof err;
  dlfuse_kernel_fn_t volatile fn = direct.fn;  // volatile: a real indirect call every time

  const int n = g_mode == Mode::smoke ? 1000 : g_mode == Mode::quick ? 100000 : 1000000;
  const int rounds = g_mode == Mode::smoke ? 3 : 15;
  struct Case {
    const char* name;
    std::function<int()> fn;  // returns the OR of the statuses of n calls
  };
  const std::vector<Case> cases = {
      {"direct_kernel_call",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= fn(state, direct.kernel_data, &args);
         return st;
       }},
      {"op_call_generic_op",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(noop, n_in, 1, n_out, 1, nullptr, 0, nullptr);
         return st;
       }},
      {"op_call_add_mul_activation",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
         return st;
       }},
      {"op_call_add_mul_activation_new_data",
       [&] {
         int st = 0;
         for (int i = 0; i < n; i += 2) {
           st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
           st |= dlfuse_op_call(am, am_in2, 3, am_out2, 1, attrs, 2, nullptr);
         }
         return st;
       }},
      {"op_call_add_mul_activation_2_layouts",
       [&] {
         int st = 0;
         for (int i = 0; i < n; i += 2) {
           st |= dlfuse_op_call(am, am_in, 3, am_out, 1, attrs, 2, nullptr);
           st |= dlfuse_op_call(am, am_inh, 3, am_outh, 1, attrs, 2, nullptr);
         }
         return st;
       }},
      {"op_call_add_mul_activation_9_layouts",
       [&] {
         int st = 0;
         for (int i = 0, k = 0; i < n; ++i, k = k + 1 == kCycle ? 0 : k + 1)
           st |= dlfuse_op_call(am, am_inc[k], 3, am_outc[k], 1, attrs, 2, nullptr);
         return st;
       }},
      {"typed_add_mul_activation",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i)
           st |= dlfuse_add_mul_activation(reg, &x, &y, &bias, 0.5, DLFUSE_ACT_RELU, &out, nullptr);
         return st;
       }},
      {"op_call_matmul_add_relu",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_op_call(mm, mm_in, 3, mm_out, 1, nullptr, 0, nullptr);
         return st;
       }},
      {"typed_matmul_add_relu",
       [&] {
         int st = 0;
         for (int i = 0; i < n; ++i) st |= dlfuse_matmul_add_relu(reg, &a, &b, &bias, &out, 0, nullptr);
         return st;
       }},
  };
  for (const Case& cs : cases) {
    if (!g_only.empty() && std::string(cs.name).find(g_only) == std::string::npos) continue;
    if (cs.fn() != 0) die(std::string(cs.name) + ": a call failed: " + dlfuse_last_error());
    std::vector<double> ns;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = now_s();
      const int st = cs.fn();
      ns.push_back((now_s() - t0) / n * 1e9);
      if (st != 0) die(std::string(cs.name) + ": a call failed: " + dlfuse_last_error());
    }
    const Stats s = stats_of(ns);
    std::printf("{\"dispatch\": \"%s\", \"median_ns\": %.2f, \"p10_ns\": %.2f, \"p90_ns\": %.2f, \"min_ns\": %.2f, "
                "\"calls_per_round\": %d, \"rounds\": %d}\n",
                cs.name, s.median, s.p10, s.p90, s.min, n, s.n);
    std::fflush(stdout);
    std::fprintf(stderr, "  dispatch %-30s median %8.1f ns/call [p10 %.1f, p90 %.1f]\n", cs.name, s.median, s.p10,
                 s.p90);
  }
  api->close(state);
  dlclose(h);
  dlfuse_registry_destroy(reg);
  return 0;
}

// ---- CPU copy ceiling ----------------------------------------------------------------------

int cmd_copy_bw() {
  const size_t bytes = g_mode == Mode::smoke ? (size_t(4) << 20) : (size_t(512) << 20);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<char> src(bytes, 1), dst(bytes, 2);  // touched: pages are mapped before timing
  const int rounds = g_mode == Mode::smoke ? 3 : g_mode == Mode::quick ? 5 : 15;
  auto copy_all = [&](unsigned nt) {
    std::vector<std::thread> pool;
    const size_t chunk = bytes / nt;
    for (unsigned t = 0; t < nt; ++t)
      pool.emplace_back([&, t] {
        const size_t off = t * chunk, len = t + 1 == nt ? bytes - off : chunk;
        std::memcpy(dst.data() + off, src.data() + off, len);
      });
    for (auto& th : pool) th.join();
  };
  for (unsigned nt : {1u, threads}) {
    copy_all(nt);
    std::vector<double> v;
    for (int r = 0; r < rounds; ++r) {
      const double t0 = now_s();
      copy_all(nt);
      v.push_back(now_s() - t0);
    }
    const Stats s = stats_of(v);
    // Bytes moved = read + written (2 x bytes), as for the GPU's device-to-device copy.
    std::printf("{\"ceiling\": \"copy_bw\", \"device\": \"cpu:0\", \"impl\": \"memcpy_%u_threads\", \"bytes\": %zu, "
                "\"median_ms\": %.6g, \"p10_ms\": %.6g, \"p90_ms\": %.6g, \"GBps\": %.3f, \"GBps_p10\": %.3f, "
                "\"GBps_p90\": %.3f}\n",
                nt, 2 * bytes, s.median * 1e3, s.p10 * 1e3, s.p90 * 1e3, 2.0 * double(bytes) / s.median / 1e9,
                2.0 * double(bytes) / s.p90 / 1e9, 2.0 * double(bytes) / s.p10 / 1e9);
    std::fflush(stdout);
    std::fprintf(stderr, "  memcpy %u thread(s): %.2f GB/s (read + written)\n", nt, 2.0 * double(bytes) / s.median / 1e9);
    if (threads == 1) break;
  }
  return 0;
}

int cmd_list() {
  dlfuse_registry_t reg = nullptr;
  ck(dlfuse_registry_create(nullptr, &reg), "registry_create");
  int32_t count = 0;
  ck(dlfuse_registry_plugin_count(reg, &count), "plugin_count");
  for (int32_t i = 0; i < count; ++i) {
    dlfuse_plugin_info_t info{};
    info.struct_size = sizeof info;
    ck(dlfuse_registry_plugin_info(reg, i, &info), "plugin_info");
    std::printf("{\"name\": \"%s\", \"path\": \"%s\", \"available\": %d, \"reason\": \"%s\", \"device_type\": %d, "
                "\"device_count\": %d, \"version\": \"%s\"}\n",
                json_escape(info.name).c_str(), json_escape(info.path).c_str(), info.available,
                json_escape(info.reason).c_str(), info.device_type, info.device_count,
                json_escape(info.version).c_str());
  }
  dlfuse_registry_destroy(reg);
  return 0;
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: dlfuse_bench list\n"
               "       dlfuse_bench ops PLUGIN.so [--device-id I] [--dtypes float32,bfloat16] [--large] [--mode M]\n"
               "       dlfuse_bench dispatch NOOP.so [--mode M] [--only SUBSTR]\n"
               "       dlfuse_bench copy-bw [--mode M]\n"
               "M is smoke (tiny shapes, 3 rounds: for the test suite), quick or full (default)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string cmd = argv[1];
  std::string path;
  int32_t device_id = 0;
  bool large = false;
  std::vector<std::string> dtypes = {"float32", "bfloat16"};
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m == "smoke") g_mode = Mode::smoke;
      else if (m == "quick") g_mode = Mode::quick;
      else if (m == "full") g_mode = Mode::full;
      else usage();
    } else if (a == "--device-id" && i + 1 < argc) {
      device_id = int32_t(std::atoi(argv[++i]));
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes.clear();
      std::string s = argv[++i];
      for (size_t p = 0; p <= s.size();) {
        const size_t q = std::min(s.find(',', p), s.size());
        if (q > p) dtypes.push_back(s.substr(p, q - p));
        p = q + 1;
      }
    } else if (a == "--only" && i + 1 < argc) {
      g_only = argv[++i];
    } else if (a == "--large") {
      large = true;
    } else if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
    } else {
      usage();
    }
  }
  if (!path.empty()) {  // the registry takes absolute paths only (it never searches the cwd)
    char* abs = realpath(path.c_str(), nullptr);
    if (!abs) die("no such plugin file: " + path);
    path = abs;
    std::free(abs);
  }
  if (cmd == "list") return cmd_list();
  if (cmd == "copy-bw") return cmd_copy_bw();
  if (cmd == "ops" && !path.empty()) return cmd_ops(path, device_id, dtypes, large);
  if (cmd == "dispatch" && !path.empty()) return cmd_dispatch(path);
  usage();
}

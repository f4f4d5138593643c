#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "call_checks.hpp"
#include "dlfuse_webgpu_kernels.h"
#include "ops.h"

namespace dlfuse_webgpu {

namespace {
constexpr int64_t kIndexLimit = int64_t(INT32_MAX);  // the kernels index elements in int32

// What only the plugin knows of a call's tensors (call_checks.hpp): each WGPUBuffer is one it
// allocated on the device and holds the view, within the kernels' int32 element indices and
// the device's largest storage binding; the stream is NULL or the device's one queue.
struct CallChecks {
  static constexpr int32_t kDeviceType = kDLWebGPU;
  static constexpr const char* kDeviceTypeName = "kDLWebGPU";
  static constexpr const char* kBufferName = "WGPUBuffer";
  static constexpr const char* kFp16Missing = "lacks shader-f16";
  using Call = dlfuse_webgpu::Call;

  void check_tensor(Call& c, const DLTensor* t, const std::string& arg, int) {
    const auto bad = [](const std::string& m) { throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, m); };
    const int64_t ext = extent(t);
    if (ext == 0) return;
    if (t->byte_offset % uint64_t(c.esize))
      bad(arg + ": byte_offset: expected a multiple of " + std::to_string(c.esize) + ", got " +
          std::to_string(t->byte_offset));
    const uint64_t size = c.dev->buffer_size(buf_of(t));
    if (size == 0)
      bad(arg + ": data: expected a WGPUBuffer allocated on " + c.dev->label() +
          " (dlfuse_device_alloc), got another pointer");
    const uint64_t need = t->byte_offset + uint64_t(ext) * uint64_t(c.esize);
    if (need > size)
      bad(arg + ": the view ends at byte " + std::to_string(need) + " (byte_offset " + std::to_string(t->byte_offset) +
          "); expected at most the buffer's size " + std::to_string(size));
    if (elem_offset(t) + ext > kIndexLimit)
      throw Error(DLFUSE_STATUS_UNSUPPORTED, arg + ": the view reaches element " +
                                                 std::to_string(elem_offset(t) + ext) +
                                                 "; this plugin indexes below 2^31 elements");
    const uint64_t max_binding = c.dev->limits.maxStorageBufferBindingSize;
    if (size > max_binding)
      throw Error(DLFUSE_STATUS_UNSUPPORTED, arg + ": its buffer of " + std::to_string(size) + " bytes exceeds " +
                                                 c.dev->label() + "'s maxStorageBufferBindingSize " +
                                                 std::to_string(max_binding));
  }

  void finish(Call& c, const dlfuse_kernel_args_t* args, const char* const*) {
    if (args->stream && args->stream != static_cast<void*>(c.dev->queue))
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "stream: expected NULL or the WGPUQueue of " + c.dev->label() +
                                                      " (WebGPU has one queue per device), got another");
  }
};

}  // namespace

Call prepare_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, const char* const* names,
                  uint32_t optional_inputs) {
  return dlfuse_plugin::prepare_device_call<CallChecks>(s, args, num_inputs, num_outputs, names, optional_inputs);
}

int32_t float_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}

void push_view(std::vector<int32_t>& p, const ClView& v) {
  p.insert(p.end(), {int32_t(v.off), int32_t(v.s0), int32_t(v.s1), int32_t(v.s2)});
}

const Pipeline& pointwise(const Call& c, const char* entry) {
  return c.dev->pipeline(std::string("pw:") + entry, c.prec, kPointwise, entry, 9, Params::kUniform);
}

void pointwise_dispatch(Launch& l, const Pipeline& p, const std::vector<WGPUBuffer>& bufs, std::vector<int32_t> prm,
                        int64_t n0, int64_t n1, int64_t n2) {
  const int64_t n = n0 * n1 * n2;
  if (n == 0) return;
  if (n >= kIndexLimit)
    throw Error(DLFUSE_STATUS_UNSUPPORTED,
                "a grid of " + std::to_string(n) + " elements; this plugin takes below 2^31");
  const int64_t cap = l.dev.limits.maxComputeWorkgroupsPerDimension;
  const int64_t gx = (n2 + 255) / 256;
  if (gx <= cap && n1 <= cap && n0 <= cap) {
    prm[0] = int32_t(n0), prm[1] = int32_t(n1), prm[2] = int32_t(n2);
    l.dispatch(p, bufs, prm, uint32_t(gx), uint32_t(n1), uint32_t(n0));
    return;
  }
  const int64_t groups = (n + 255) / 256;
  const int64_t x = std::min<int64_t>(groups, cap);
  prm[0] = -int32_t(n0), prm[1] = int32_t(n1), prm[2] = int32_t(n2);  // -n0: the linear form
  l.dispatch(p, bufs, prm, uint32_t(x), uint32_t((groups + x - 1) / x), 1);
}

namespace {
// kernels/gemm.wgsl with its accumulators, multiply-adds and stores written out for the tile:
// TM x TN/4 vec4 registers, no arrays (a shader compiler may keep a private array in
// memory when it does not unroll the loops that index it).
std::string unrolled_gemm(const Tile& t) {
  std::string decl, mma, epi;
  const char* comp = "xyzw";
  for (int i = 0; i < t.tm; ++i)
    for (int j = 0; j < t.tn / 4; ++j)
      decl += "var acc_" + std::to_string(i) + "_" + std::to_string(j) + " = vec4<f32>(0.0);\n  ";
  for (int i = 0; i < t.tm / 4; ++i)
    mma += "let a" + std::to_string(i) + " = As[ak + " + std::to_string(i) + " * NTY];\n        ";
  for (int j = 0; j < t.tn / 4; ++j)
    mma += "let b" + std::to_string(j) + " = Bs[bk + " + std::to_string(j) + " * NTX];\n        ";
  for (int i = 0; i < t.tm; ++i)
    for (int j = 0; j < t.tn / 4; ++j) {
      const std::string acc = "acc_" + std::to_string(i) + "_" + std::to_string(j);
      mma += acc + " = fma(vec4<f32>(a" + std::to_string(i / 4) + "." + comp[i % 4] + "), b" + std::to_string(j) +
             ", " + acc + ");\n        ";
    }
  for (int i = 0; i < t.tm; ++i)
    for (int j = 0; j < t.tn / 4; ++j)
      epi += "store4(m0 + (" + std::to_string(i / 4) + " * NTY + ty) * 4 + " + std::to_string(i % 4) + ", n0 + (" +
             std::to_string(j) + " * NTX + tx) * 4, acc_" + std::to_string(i) + "_" + std::to_string(j) +
             ", offs);\n  ";
  std::string src = kGemm;
  const auto put = [&](const char* mark, const std::string& text) {
    const size_t at = src.find(mark);
    if (at == std::string::npos) throw Error(DLFUSE_STATUS_INTERNAL, std::string("gemm.wgsl lacks ") + mark);
    src.replace(at, std::strlen(mark), text);
  };
  put("//@ACC_DECL@", decl);
  put("//@MMA@", mma);
  put("//@EPILOGUE@", epi);
  return src;
}
}  // namespace

void gemm(Launch& l, const Call& c, const MatRef& A, const MatRef& B, const MatRef& C, const Epilogue& ep, int64_t M,
          int64_t N, int64_t K, int64_t nbatch, int64_t R, const std::vector<int64_t>& table) {
  if (M == 0 || N == 0 || nbatch == 0) return;
  const Tile& t = c.dev->tile;
  // vec4 operand reads where every row the kernel loads starts 16-byte aligned (batch
  // offsets from the table included) and the contiguous dim is whole vec4s.
  bool va = A.cs == 1 && A.off % 4 == 0 && A.rs % 4 == 0 && K % 4 == 0 && t.bk % 4 == 0;
  bool vb = B.cs == 1 && B.off % 4 == 0 && B.rs % 4 == 0 && N % 4 == 0;
  const size_t row = kTableHeader + size_t(2 * R);
  for (size_t i = 0; i + row <= table.size(); i += row)
    for (size_t j = kTableHeader; j < row; j += 2) {
      va = va && table[i + j] % 4 == 0;
      vb = vb && table[i + j + 1] % 4 == 0;
    }
  if (const char* e = std::getenv("DLFUSE_WEBGPU_GEMM_VEC4"); e && std::string(e) == "off") va = vb = false;
  const std::string consts =
      "const BM: i32 = " + std::to_string(t.bm) + ";\nconst BN: i32 = " + std::to_string(t.bn) +
      ";\nconst BK: i32 = " + std::to_string(t.bk) + ";\nconst TM: i32 = " + std::to_string(t.tm) +
      ";\nconst TN: i32 = " + std::to_string(t.tn) + ";\nconst GROUP: i32 = " + std::to_string(t.group) +
      ";\nconst VEC_A: bool = " + (va ? "true" : "false") + ";\nconst VEC_B: bool = " + (vb ? "true" : "false") + ";\n";
  const Pipeline& p = c.dev->pipeline("gemm:" + t.str() + (va ? ":va" : "") + (vb ? ":vb" : ""), c.prec,
                                      consts + unrolled_gemm(t), "gemm", 9, Params::kStorage);
  std::vector<int32_t> prm(32, 0);
  const int flags = (ep.bias.buf ? 1 : 0) | (ep.residual.buf ? 2 : 0) | (ep.pre.buf ? 4 : 0);
  const int64_t head[] = {M,
                          N,
                          K,
                          R,
                          flags,
                          ep.act,
                          A.off,
                          A.rs,
                          A.cs,
                          0,
                          B.off,
                          B.rs,
                          B.cs,
                          0,
                          C.off,
                          C.rs,
                          C.cs,
                          ep.bias.off,
                          ep.bias.rs,
                          ep.bias.cs,
                          ep.residual.off,
                          ep.residual.rs,
                          ep.residual.cs,
                          ep.pre.off,
                          ep.pre.rs,
                          ep.pre.cs,
                          table.empty() ? 0 : 1};
  for (size_t i = 0; i < sizeof head / sizeof head[0]; ++i) prm[i] = int32_t(head[i]);
  if (table.size() + 32 > size_t(kIndexLimit / 4))
    throw Error(DLFUSE_STATUS_UNSUPPORTED, "a batch table of " + std::to_string(table.size()) + " offsets");
  for (int64_t v : table) prm.push_back(int32_t(v));
  const int64_t gx = (N + t.bn - 1) / t.bn, gy = (M + t.bm - 1) / t.bm;
  l.dispatch(
      p, {A.buf, va ? A.buf : nullptr, B.buf, vb ? B.buf : nullptr, C.buf, ep.bias.buf, ep.residual.buf, ep.pre.buf},
      prm, uint32_t(gx), uint32_t(gy), uint32_t(nbatch));
}

namespace {
// About as many invocations as an H200 keeps resident (132 multiprocessors x 2048): a
// reduction with fewer kept elements than this splits its reduced elements into runs, each
// summed by one invocation, then sums the runs' partial sums. Runs are at least kMinRun
// long, so a short reduction stays one pass.
constexpr int64_t kReduceInvocations = 262144;
constexpr int64_t kMinRun = 64;

struct Runs {
  int64_t count = 1, len = 0;
};
Runs runs_for(int64_t kept, int64_t total) {
  Runs r;
  const int64_t want = std::min((kReduceInvocations + kept - 1) / kept, total / kMinRun);
  if (want <= 1) return r;
  r.len = (total + want - 1) / want;
  r.count = (total + r.len - 1) / r.len;
  return r;
}

std::vector<int32_t> reduce_params(int64_t n0, int64_t n1, int64_t n2, float scale, bool src_is_float,
                                   const ClReduced& red, const ClView& vs, const ClView& vd, const Runs& runs) {
  std::vector<int32_t> prm = {int32_t(n0), int32_t(n1), int32_t(n2), float_bits(scale), src_is_float ? 1 : 0, red.nr};
  for (int i = 0; i < 8; ++i) prm.push_back(int32_t(red.n[i]));
  for (int i = 0; i < 8; ++i) prm.push_back(int32_t(red.s[i]));
  push_view(prm, vs);
  push_view(prm, vd);
  prm.push_back(int32_t(runs.count));
  prm.push_back(int32_t(runs.len));
  return prm;
}

// The first level of a two-level reduction: runs.count * kept partial sums (run-major)
// into the float scratch `part`.
void reduce_runs(Launch& l, const Call& c, WGPUBuffer src, bool src_is_float, std::vector<int32_t> prm, int64_t kept,
                 const Runs& runs, WGPUBuffer part) {
  const Pipeline& p = c.dev->pipeline("pw:reduce_part", c.prec, kPointwise, "reduce_part", 10, Params::kUniform);
  const int64_t groups = (kept * runs.count + 255) / 256;
  const int64_t cap = l.dev.limits.maxComputeWorkgroupsPerDimension;
  const int64_t gx = std::min(groups, cap), gy = (groups + gx - 1) / gx;
  if (gy > cap) throw Error(DLFUSE_STATUS_UNSUPPORTED, "a reduction of " + std::to_string(kept * runs.count) + " runs");
  // bindings: t1 = src (typed), tf = src (float), tp = the partial sums
  l.dispatch(p,
             {src_is_float ? nullptr : src, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
              src_is_float ? src : nullptr, part},
             prm, uint32_t(gx), uint32_t(gy), 1);
}
}  // namespace

void reduce_into(Launch& l, const Call& c, const Dims& shape, WGPUBuffer src, int64_t src_off, const Dims& src_strides,
                 bool src_is_float, const DLTensor* dst, float scale) {
  const int rank = int(shape.size());
  std::string err;
  const Pipeline& p = pointwise(c, "reduce");
  // One partial-sum scratch serves every block: the queue runs a block's two levels before
  // the next block's first.
  WGPUBuffer part = nullptr;
  uint64_t part_bytes = 0;
  const bool ok = for_each_reduction(
      shape, src_strides, src_off, aligned_shape(dst, rank), aligned_strides(dst, rank), elem_offset(dst), &err,
      [&](const ClView& vs, const ClReduced& red, const ClView& vd, int64_t n0, int64_t n1, int64_t n2) {
        int64_t total = 1;
        for (int i = 0; i < red.nr; ++i) total *= red.n[i];
        const int64_t kept = n0 * n1 * n2;
        const Runs runs = runs_for(kept, total);
        if (runs.count == 1) {
          // bindings: t1 = src (typed), t2 = dst, tf = src (float)
          pointwise_dispatch(l, p,
                             {src_is_float ? nullptr : src, buf_of(dst), nullptr, nullptr, nullptr, nullptr, nullptr,
                              src_is_float ? src : nullptr},
                             reduce_params(n0, n1, n2, scale, src_is_float, red, vs, vd, runs), n0, n1, n2);
          return true;
        }
        const uint64_t bytes = uint64_t(kept * runs.count) * sizeof(float);
        if (bytes > part_bytes) {
          part = l.scratch(bytes);
          part_bytes = bytes;
        }
        reduce_runs(l, c, src, src_is_float, reduce_params(n0, n1, n2, scale, src_is_float, red, vs, vd, runs), kept,
                    runs, part);
        // The second level: the runs' sums as a float source over the kept grid, one
        // reduced dim (the run) of stride `kept`.
        ClReduced over_runs{};
        over_runs.nr = 1;
        over_runs.n[0] = runs.count;
        over_runs.s[0] = kept;
        pointwise_dispatch(l, p, {nullptr, buf_of(dst), nullptr, nullptr, nullptr, nullptr, nullptr, part},
                           reduce_params(n0, n1, n2, scale, true, over_runs, ClView{0, n1 * n2, n2, 1}, vd, Runs{}), n0,
                           n1, n2);
        return true;
      });
  if (!ok) throw Error(DLFUSE_STATUS_UNSUPPORTED, err);
}

}  // namespace dlfuse_webgpu

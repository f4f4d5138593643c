// Shared pieces of the oneDNN plugin: errors and the exception wall, strided views of
// DLTensors in float32, the plugin state (engine + primitive cache) and helpers to build
// oneDNN memory descriptors and run primitives.
#ifndef DLFUSE_ONEDNN_COMMON_H_
#define DLFUSE_ONEDNN_COMMON_H_

#include <dlfuse/plugin_kit.hpp>

#include <oneapi/dnnl/dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dlfuse_onednn {

namespace kit = dlfuse::kit;
using kit::Error;

// The plugin kit's exception wall, with oneDNN's own exception mapped to a status.
template <class F>
dlfuse_status_t guarded(char* err, size_t err_size, F&& body) noexcept {
  return kit::guarded("onednn", err, err_size, [&]() -> dlfuse_status_t {
    try {
      return body();
    } catch (const dnnl::error& e) {
      throw Error(e.status == dnnl_out_of_memory ? DLFUSE_STATUS_OUT_OF_MEMORY : DLFUSE_STATUS_INTERNAL,
                  std::string("oneDNN error: ") + e.what());
    }
  });
}

// Runs a kernel body behind the exception wall. In sanitizer builds (DLFUSE_ONEDNN_SERIAL,
// set by CMake when DLFUSE_SANITIZE is) the body runs inside a one-thread OpenMP team
// whose thread count is 1: oneDNN and the plugin's loops then run on the calling thread
// and libgomp never starts worker threads. TSan cannot see libgomp's (uninstrumented)
// barriers, and GCC 12's LSan crashes at exit reading the TLS of libgomp's workers, so in
// those builds the sanitizers check every call on the calling thread instead, and
// concurrency between calling threads, which is what the plugin itself must get right.
// The ICV change is local to the one-thread region: the caller's OpenMP settings are
// untouched. Normal builds run multi-threaded as usual.
template <class F>
dlfuse_status_t run_kernel(const dlfuse_kernel_args_t* args, F&& body) noexcept {
#if defined(DLFUSE_ONEDNN_SERIAL) && DLFUSE_ONEDNN_SERIAL
  dlfuse_status_t st = DLFUSE_STATUS_INTERNAL;
#pragma omp parallel num_threads(1)
  {
    omp_set_num_threads(1);
    st = guarded(args->err, args->err_size, body);
  }
  return st;
#else
  return guarded(args->err, args->err_size, body);
#endif
}

// ---------------------------------------------------------------------------------------
// Strided float32 views. Every kernel works on these; bf16/f16 calls are converted to
// compact float32 views first (convert.cpp) because oneDNN 2.6.3 has no bf16/f16
// primitives on an AVX2-only CPU (see docs/onednn.md).
struct View {
  float* data = nullptr;
  std::vector<int64_t> shape;    // sizes
  std::vector<int64_t> strides;  // in elements, explicit (never NULL)
  int rank() const { return int(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

using kit::compact_strides;

// The float32 view of a float32 DLTensor (honors byte_offset; NULL strides = compact).
inline View view_of(const DLTensor* t) {
  View v;
  // In integers: an empty tensor may have NULL data, and NULL + offset is undefined.
  v.data = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
  v.shape.assign(t->shape, t->shape + t->ndim);
  if (t->strides)
    v.strides.assign(t->strides, t->strides + t->ndim);
  else
    v.strides = compact_strides(v.shape);
  return v;
}

// The same view padded on the left to `rank` dims of size 1 (NumPy alignment).
inline View aligned(const View& v, int rank) {
  View o;
  o.data = v.data;
  const int pad = rank - v.rank();
  o.shape.assign(size_t(pad), 1);
  o.strides.assign(size_t(pad), 0);
  o.shape.insert(o.shape.end(), v.shape.begin(), v.shape.end());
  o.strides.insert(o.strides.end(), v.strides.begin(), v.strides.end());
  return o;
}

// True when the view is compact row-major (size-1 dims' strides do not matter).
inline bool is_compact(const View& v) {
  int64_t expect = 1;
  for (int i = v.rank() - 1; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != expect) return false;
    expect *= v.shape[i];
  }
  return true;
}

// Element strides usable in a oneDNN memory descriptor: oneDNN wants strides that look
// like a real layout, so size-1 dims get the extent of the dims inside them.
inline dnnl::memory::dims dnnl_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  const int r = int(shape.size());
  dnnl::memory::dims s(strides.begin(), strides.end());
  for (int i = r - 1; i >= 0; --i) {
    if (shape[i] != 1) continue;
    int64_t extent = 1;
    for (int j = i + 1; j < r; ++j) extent = std::max<int64_t>(extent, shape[j] * s[size_t(j)]);
    s[size_t(i)] = extent;
  }
  return s;
}

inline dnnl::memory::desc md_of(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                                dnnl::memory::data_type dt = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), dt, dnnl_strides(shape, strides));
}
inline dnnl::memory::desc md_of(const View& v, dnnl::memory::data_type dt = dnnl::memory::data_type::f32) {
  return md_of(v.shape, v.strides, dt);
}

// A float buffer the plugin owns (compact temporaries), 64-byte aligned.
struct Buffer {
  std::unique_ptr<float, void (*)(void*)> p{nullptr, std::free};
  size_t n = 0;
  explicit Buffer(size_t count = 0) { resize(count); }
  void resize(size_t count) {
    if (count <= n && p) return;
    const size_t bytes = ((count ? count : 1) * sizeof(float) + 63) / 64 * 64;
    void* q = std::aligned_alloc(64, bytes);
    if (!q) throw std::bad_alloc();
    p.reset(static_cast<float*>(q));
    n = count;
  }
  float* get() const { return p.get(); }
};

inline View compact_view(Buffer& buf, const std::vector<int64_t>& shape) {
  View v;
  v.shape = shape;
  v.strides = compact_strides(shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  buf.resize(size_t(n));
  v.data = buf.get();
  return v;
}

// ---------------------------------------------------------------------------------------
// The primitive cache: a key of integers (op kind, dims, strides, attributes) maps to a
// built primitive. A repeated call with the same shapes and layouts builds nothing.
struct CachedPrimitive {
  dnnl::primitive prim;
  size_t scratchpad_bytes = 0;
  std::string impl;  // oneDNN's implementation name, for traces
};

using Key = std::vector<int64_t>;
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};

struct State {
  dnnl::engine engine;
  std::mutex mu;
  std::unordered_map<Key, std::shared_ptr<const CachedPrimitive>, KeyHash> cache;
  std::atomic<long long> built{0}, hits{0};
  bool trace = false;

  // The cached primitive for `key`, built by `make` (returning a primitive_desc) on a miss.
  template <class Prim, class F>
  std::shared_ptr<const CachedPrimitive> get(const Key& key, F&& make) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = cache.find(key);
      if (it != cache.end()) {
        hits.fetch_add(1, std::memory_order_relaxed);
        return it->second;
      }
    }
    // Built outside the lock: two threads may build the same primitive once each; the
    // first one stored wins. Builds of other shapes are not serialized behind a slow one.
    const auto pd = make();
    auto c = std::make_shared<CachedPrimitive>();
    c->prim = Prim(pd);
    c->scratchpad_bytes = pd.scratchpad_desc().get_size();
    c->impl = pd.impl_info_str();
    built.fetch_add(1, std::memory_order_relaxed);
    if (trace) {
      std::string k;
      for (int64_t v : key) k += " " + std::to_string(v);
      std::fprintf(stderr, "dlfuse_onednn: built %s for key%s\n", c->impl.c_str(), k.c_str());
    }
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() >= kCapacity) cache.clear();  // bounded: many distinct shapes start over
    auto ins = cache.emplace(key, std::move(c));
    return ins.first->second;
  }
  static constexpr size_t kCapacity = 4096;
};

// Appends a memory descriptor's shape and strides to a key.
inline void key_add(Key& k, const View& v) {
  k.push_back(v.rank());
  k.insert(k.end(), v.shape.begin(), v.shape.end());
  k.insert(k.end(), v.strides.begin(), v.strides.end());
}
inline void key_add_f(Key& k, double d) {
  int64_t bits;
  static_assert(sizeof(bits) == sizeof(d), "double is 64-bit");
  std::memcpy(&bits, &d, sizeof(d));
  k.push_back(bits);
}

// Runs a cached primitive with a user scratchpad owned by the calling thread, on a stream
// of the calling thread: concurrent calls share no mutable oneDNN state.
void execute(State& st, const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args);

inline dnnl::memory mem(State& st, const dnnl::memory::desc& md, const void* data) {
  return dnnl::memory(md, st.engine, const_cast<void*>(data));
}

// The attributes every primitive of the plugin uses: a user scratchpad (oneDNN's library
// scratchpad is shared between primitives and not safe for concurrent calls from many
// threads) and strict fp32 math (no implicit down-conversion; ALLOW_TF32 is ignored on CPU).
inline dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  a.set_fpmath_mode(dnnl::fpmath_mode::strict);
  return a;
}

// Post-ops giving relu with NaN kept: oneDNN's relu (and clip, binary max) turn NaN into 0,
// elu with alpha = 0 gives x for x > 0, NaN for NaN and 0 * (exp(x) - 1) = -0 for x <= 0;
// the linear step x * 1 + 0 turns -0 into +0.
inline void append_relu_keep_nan(dnnl::post_ops& po) {
  po.append_eltwise(1.f, dnnl::algorithm::eltwise_elu, 0.f, 0.f);
  po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 1.f, 0.f);
}

// Kernel entry points (matmul.cpp, add_mul.cpp).
dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual(void* state, void*, const dlfuse_kernel_args_t* args);
dlfuse_status_t matmul_add_residual_backward(void* state, void*, const dlfuse_kernel_args_t* args);

// Argument sanity the registry already checked; kept so a bypassing host cannot crash us.
// Bit i of `optional_inputs`: inputs[i] may be NULL (ABI 1.1 ops); input 0 never is.
void check_call(const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, bool first_output_required,
                uint32_t optional_inputs = 0);
// Throws INVALID_ARGUMENT unless act's derivative is a function of its output (IDENTITY,
// RELU, SIGMOID, TANH); `instead` says what to pass.
void check_act_from_out(int act, const char* instead);

// ---------------------------------------------------------------------------------------
// dtype handling (convert.cpp). Kind of storage of a call's tensors.
enum class Storage { kF32, kBF16, kF16 };
Storage storage_of(DLDataType dt);  // throws UNSUPPORTED for anything else

// Float32 view of an input: the tensor itself for float32, else a compact float32 copy.
View input_f32(const DLTensor* t, Storage s, Buffer& buf);
// Float32 view to write an output into: the tensor itself for float32, else a compact
// temporary that store_output() converts back.
View output_f32(const DLTensor* t, Storage s, Buffer& buf);
void store_output(const View& f32, DLTensor* t, Storage s);

// Copies any strided float view into another of the same shape (parallel).
void copy_view(const View& src, const View& dst);
// Fills a view with a value.
void fill_view(const View& dst, float value);

}  // namespace dlfuse_onednn

#endif

// dlfuse's XLA FFI handlers (-> dlfuse/libdlfuse_jax.so), for dlfuse.jax.
//
// One handler per platform, `dlfuse_jax_cpu` and `dlfuse_jax_cuda`, runs any libdlfuse op by
// name through the generic API (dlfuse_op_get once per name, then dlfuse_op_call), so a new
// op, or a plugin's own op, needs no code here. Its FFI attributes:
//   op         string   the op's name
//   inputs     i64[n]   per op input: the index of the FFI argument that is it, -1 for NULL
//   outputs    i64[m]   per op output: the index of the FFI result that is it, -1 for NULL
//   i64_attrs  i64[2k]  key, value, key, value, ...   (dlfuse_attr_t of type INT64)
//   f64_keys   i64[j]   keys of the FLOAT64 attributes, their values in f64_values
//   f64_values f64[j]
// Every array attribute carries one leading element that is skipped: an FFI array attribute
// cannot be empty.
//
// Buffers become DLTensors without copies: XLA's buffers are dense row-major (strides NULL),
// on the device XLA runs the handler for, and a CUDA call runs on XLA's stream. The handler
// allocates nothing and never waits for the device. libdlfuse is the one the Python package
// loaded: dlfuse_jax_bind hands over its registry and functions before the first call.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "dlfuse/dlfuse.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kMaxTensors = 16;  // the registry's bound on an op's inputs and outputs

// An op handle per name, looked up once: an append-only list read without a lock.
struct OpEntry {
  std::string name;
  dlfuse_op_t op;
  const OpEntry* next;
};

struct Binding {
  dlfuse_registry_t registry;
  decltype(&dlfuse_op_get) op_get;
  decltype(&dlfuse_op_call) op_call;
  decltype(&dlfuse_last_error) last_error;
  decltype(&dlfuse_status_string) status_string;
  std::atomic<const OpEntry*> ops{nullptr};
  std::mutex lookup_mutex;
};

// Never freed: an executable compiled earlier may still run a handler after a rebind.
std::atomic<Binding*> g_binding{nullptr};

ffi::ErrorCode code_of(dlfuse_status_t st) {
  switch (st) {
    case DLFUSE_STATUS_INVALID_ARGUMENT: return ffi::ErrorCode::kInvalidArgument;
    case DLFUSE_STATUS_UNSUPPORTED: return ffi::ErrorCode::kUnimplemented;
    case DLFUSE_STATUS_NOT_FOUND: return ffi::ErrorCode::kNotFound;
    case DLFUSE_STATUS_OUT_OF_MEMORY: return ffi::ErrorCode::kResourceExhausted;
    case DLFUSE_STATUS_UNAVAILABLE: return ffi::ErrorCode::kUnavailable;
    default: return ffi::ErrorCode::kInternal;
  }
}

ffi::Error refused(const Binding& b, std::string_view op, dlfuse_status_t st) {
  std::string msg = "dlfuse ";
  msg.append(op).append(": [").append(b.status_string(st)).append("] ").append(b.last_error());
  return ffi::Error(code_of(st), std::move(msg));
}

ffi::Error invalid(std::string_view op, const std::string& what) {
  std::string msg = "dlfuse ";
  msg.append(op).append(": ").append(what);
  return ffi::Error::InvalidArgument(std::move(msg));
}

dlfuse_status_t look_up(Binding& b, std::string_view name, dlfuse_op_t* op) {
  for (const OpEntry* e = b.ops.load(std::memory_order_acquire); e; e = e->next) {
    if (e->name == name) {
      *op = e->op;
      return DLFUSE_STATUS_OK;
    }
  }
  std::lock_guard<std::mutex> lock(b.lookup_mutex);
  const OpEntry* head = b.ops.load(std::memory_order_acquire);
  for (const OpEntry* e = head; e; e = e->next) {
    if (e->name == name) {
      *op = e->op;
      return DLFUSE_STATUS_OK;
    }
  }
  std::string key(name);
  dlfuse_status_t st = b.op_get(b.registry, key.c_str(), op);
  if (st == DLFUSE_STATUS_OK) {
    b.ops.store(new OpEntry{std::move(key), *op, head}, std::memory_order_release);
  }
  return st;
}

bool dl_type_of(ffi::DataType t, DLDataType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = {kDLFloat, 32, 1}; return true;
    case ffi::DataType::F16: *out = {kDLFloat, 16, 1}; return true;
    case ffi::DataType::BF16: *out = {kDLBfloat, 16, 1}; return true;
    case ffi::DataType::F64: *out = {kDLFloat, 64, 1}; return true;
    default: return false;
  }
}

bool to_dl_tensor(const ffi::AnyBuffer& buf, DLDevice dev, DLTensor* t) {
  auto dims = buf.dimensions();
  t->data = buf.untyped_data();
  t->device = dev;
  t->ndim = static_cast<int32_t>(dims.size());
  t->shape = const_cast<int64_t*>(dims.begin());
  t->strides = nullptr;  // XLA hands the FFI dense row-major buffers
  t->byte_offset = 0;
  return dl_type_of(buf.element_type(), &t->dtype);
}

ffi::Error call(DLDevice dev, void* stream, std::string_view op_name, ffi::Span<const int64_t> in_map,
                ffi::Span<const int64_t> out_map, ffi::Span<const int64_t> i64_attrs, ffi::Span<const int64_t> f64_keys,
                ffi::Span<const double> f64_values, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  Binding* b = g_binding.load(std::memory_order_acquire);
  if (b == nullptr) {
    return invalid(op_name, "libdlfuse is not bound (import dlfuse.jax registers and binds it)");
  }
  const int64_t n_in = static_cast<int64_t>(in_map.size()) - 1;
  const int64_t n_out = static_cast<int64_t>(out_map.size()) - 1;
  const int64_t n_i64 = (static_cast<int64_t>(i64_attrs.size()) - 1) / 2;
  const int64_t n_f64 = static_cast<int64_t>(f64_keys.size()) - 1;
  if (n_in < 0 || n_in > kMaxTensors || n_out < 0 || n_out > kMaxTensors || n_i64 < 0 || i64_attrs.size() % 2 != 1 ||
      n_f64 < 0 || f64_values.size() != f64_keys.size() || n_i64 + n_f64 > 2 * kMaxTensors) {
    return invalid(op_name,
                   "malformed attributes (inputs, outputs, i64_attrs, f64_keys, "
                   "f64_values) from dlfuse.jax");
  }
  DLTensor in_t[kMaxTensors], out_t[kMaxTensors];
  const DLTensor* ins[kMaxTensors];
  DLTensor* outs[kMaxTensors];
  for (int64_t i = 0; i < n_in; ++i) {
    int64_t k = in_map[i + 1];
    ins[i] = nullptr;
    if (k < 0) continue;
    if (k >= static_cast<int64_t>(args.size())) return invalid(op_name, "input index out of range");
    auto buf = args.get<ffi::AnyBuffer>(k);
    if (!buf.has_value()) return buf.error();
    if (!to_dl_tensor(*buf, dev, &in_t[i])) {
      return invalid(op_name, "input " + std::to_string(i) + ": dtype must be float32, float16, bfloat16 or float64");
    }
    ins[i] = &in_t[i];
  }
  for (int64_t i = 0; i < n_out; ++i) {
    int64_t k = out_map[i + 1];
    outs[i] = nullptr;
    if (k < 0) continue;
    if (k >= static_cast<int64_t>(rets.size())) return invalid(op_name, "output index out of range");
    auto buf = rets.get<ffi::AnyBuffer>(k);
    if (!buf.has_value()) return buf.error();
    if (!to_dl_tensor(**buf, dev, &out_t[i])) {
      return invalid(op_name, "output " + std::to_string(i) + ": dtype must be float32, float16, bfloat16 or float64");
    }
    outs[i] = &out_t[i];
  }
  dlfuse_attr_t attrs[2 * kMaxTensors];
  int32_t n_attrs = 0;
  for (int64_t i = 0; i < n_i64; ++i) {
    attrs[n_attrs].key = static_cast<int32_t>(i64_attrs[1 + 2 * i]);
    attrs[n_attrs].type = DLFUSE_ATTR_INT64;
    attrs[n_attrs++].value.i64 = i64_attrs[2 + 2 * i];
  }
  for (int64_t i = 0; i < n_f64; ++i) {
    attrs[n_attrs].key = static_cast<int32_t>(f64_keys[i + 1]);
    attrs[n_attrs].type = DLFUSE_ATTR_FLOAT64;
    attrs[n_attrs++].value.f64 = f64_values[i + 1];
  }
  dlfuse_op_t op = nullptr;
  dlfuse_status_t st = look_up(*b, op_name, &op);
  if (st == DLFUSE_STATUS_OK) {
    st = b->op_call(op, ins, static_cast<int32_t>(n_in), outs, static_cast<int32_t>(n_out), n_attrs ? attrs : nullptr,
                    n_attrs, stream);
  }
  return st == DLFUSE_STATUS_OK ? ffi::Error::Success() : refused(*b, op_name, st);
}

ffi::Error call_cpu(std::string_view op, ffi::Span<const int64_t> in_map, ffi::Span<const int64_t> out_map,
                    ffi::Span<const int64_t> i64_attrs, ffi::Span<const int64_t> f64_keys,
                    ffi::Span<const double> f64_values, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  return call(DLDevice{kDLCPU, 0}, nullptr, op, in_map, out_map, i64_attrs, f64_keys, f64_values, args, rets);
}

ffi::Error call_cuda(void* stream, int32_t device_ordinal, std::string_view op, ffi::Span<const int64_t> in_map,
                     ffi::Span<const int64_t> out_map, ffi::Span<const int64_t> i64_attrs,
                     ffi::Span<const int64_t> f64_keys, ffi::Span<const double> f64_values, ffi::RemainingArgs args,
                     ffi::RemainingRets rets) {
  return call(DLDevice{kDLCUDA, device_ordinal}, stream, op, in_map, out_map, i64_attrs, f64_keys, f64_values, args,
              rets);
}

}  // namespace

#define DLFUSE_JAX_EXPORT extern "C" __attribute__((visibility("default")))
DLFUSE_JAX_EXPORT XLA_FFI_Error* dlfuse_jax_cpu(XLA_FFI_CallFrame* call_frame);
DLFUSE_JAX_EXPORT XLA_FFI_Error* dlfuse_jax_cuda(XLA_FFI_CallFrame* call_frame);

#define DLFUSE_JAX_ATTRS                           \
  .Attr<std::string_view>("op")                    \
      .Attr<ffi::Span<const int64_t>>("inputs")    \
      .Attr<ffi::Span<const int64_t>>("outputs")   \
      .Attr<ffi::Span<const int64_t>>("i64_attrs") \
      .Attr<ffi::Span<const int64_t>>("f64_keys")  \
      .Attr<ffi::Span<const double>>("f64_values") \
      .RemainingArgs()                             \
      .RemainingRets()

XLA_FFI_DEFINE_HANDLER_SYMBOL(dlfuse_jax_cpu, call_cpu, ffi::Ffi::Bind() DLFUSE_JAX_ATTRS);

// Not declared command-buffer compatible: the CUDA plugin takes its temporaries from a
// stream-ordered pool, so a captured call records memory-allocation nodes, and CUDA refuses
// those in the child graphs XLA builds its command buffers from (CUDA_ERROR_NOT_SUPPORTED,
// measured on an H200 with JAX 0.11). XLA runs these calls between its command buffers.
XLA_FFI_DEFINE_HANDLER_SYMBOL(dlfuse_jax_cuda, call_cuda,
                              ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::DeviceOrdinal>()
                                  DLFUSE_JAX_ATTRS);

// The jaxlib release whose FFI headers this library was compiled against: dlfuse.jax refuses
// an older running jaxlib (its call frames may lack what these handlers read).
DLFUSE_JAX_EXPORT const char* dlfuse_jax_built_against() { return DLFUSE_JAXLIB_VERSION; }

// Hands the package's libdlfuse to the handlers. Returns 0, or -1 if a pointer is NULL.
DLFUSE_JAX_EXPORT int dlfuse_jax_bind(void* registry, void* op_get, void* op_call, void* last_error,
                                      void* status_string) {
  if (!registry || !op_get || !op_call || !last_error || !status_string) return -1;
  auto* b = new Binding;
  b->registry = static_cast<dlfuse_registry_t>(registry);
  b->op_get = reinterpret_cast<decltype(&dlfuse_op_get)>(op_get);
  b->op_call = reinterpret_cast<decltype(&dlfuse_op_call)>(op_call);
  b->last_error = reinterpret_cast<decltype(&dlfuse_last_error)>(last_error);
  b->status_string = reinterpret_cast<decltype(&dlfuse_status_string)>(status_string);
  g_binding.store(b, std::memory_order_release);
  return 0;
}

/* dlfuse plugin kit: a header-only C++17 layer over plugin.h for plugin authors.
 *
 * What every C++ plugin otherwise writes again: an error type and the exception wall that
 * turns anything thrown into a status + message at the C boundary, typed reads of a call's
 * attributes, a light view of a DLTensor (shape, element strides, byte_offset, NumPy
 * alignment to a wider shape, contiguity and transposition tests, index walking, the dims a
 * gradient is summed over), and a kernel-table builder. It adds no link dependency and no
 * exported symbol (everything is inline). Plain C plugins need only plugin.h.
 *
 *   namespace kit = dlfuse::kit;
 *   dlfuse_status_t my_kernel(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
 *     return kit::guarded("myplugin", args, [&] {
 *       kit::View x(args->inputs[0]);
 *       const int act = kit::activation(args);     // throws kit::Error naming the attribute
 *       ...
 *     });
 *   }
 */
#ifndef DLFUSE_PLUGIN_KIT_HPP_
#define DLFUSE_PLUGIN_KIT_HPP_

#include <dlfuse/plugin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace dlfuse {
namespace kit {

/* ---- errors ------------------------------------------------------------------------- */

/* Thrown inside a plugin; guarded() turns it into its status and message. */
struct Error : std::runtime_error {
  dlfuse_status_t status;
  Error(dlfuse_status_t s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

/* An INVALID_ARGUMENT naming what was expected and what was given. */
[[noreturn]] inline void invalid(const std::string& what, const std::string& expected, const std::string& actual) {
  throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, what + ": expected " + expected + ", got " + actual);
}

/* Writes "<prefix>: <msg>" into err (truncated, always NUL-terminated) and returns status. */
inline dlfuse_status_t write_error(const char* prefix, char* err, size_t err_size, dlfuse_status_t status,
                                   const std::string& msg) noexcept {
  if (err && err_size > 0) std::snprintf(err, err_size, "%s: %s", prefix, msg.c_str());
  return status;
}

/* The exception wall: runs body (returning dlfuse_status_t, or void for OK) and maps what
 * it throws: Error to its status, std::bad_alloc to OUT_OF_MEMORY, anything else to
 * INTERNAL. Every C entry of a C++ plugin runs its body through this. A library with its
 * own exception type catches it inside body and rethrows an Error with the right status. */
template <class F>
dlfuse_status_t guarded(const char* prefix, char* err, size_t err_size, F&& body) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      return DLFUSE_STATUS_OK;
    } else {
      return body();
    }
  } catch (const Error& e) {
    return write_error(prefix, err, err_size, e.status, e.what());
  } catch (const std::bad_alloc&) {
    return write_error(prefix, err, err_size, DLFUSE_STATUS_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return write_error(prefix, err, err_size, DLFUSE_STATUS_INTERNAL, std::string("exception: ") + e.what());
  } catch (...) {
    return write_error(prefix, err, err_size, DLFUSE_STATUS_INTERNAL, "unknown exception");
  }
}

/* The same for a kernel call: the message goes to args->err. */
template <class F>
dlfuse_status_t guarded(const char* prefix, const dlfuse_kernel_args_t* args, F&& body) noexcept {
  return guarded(prefix, args ? args->err : nullptr, args ? args->err_size : 0, std::forward<F>(body));
}

/* ---- attributes --------------------------------------------------------------------- */

inline const char* attr_name(int32_t key) {
  /* ops.def's KEY of each attribute of the core ops (a key several ops share matches at its
   * first); a key no core op has, such as a plugin's own op's, is "attribute". */
  /* clang-format off */
#define DLFUSE_OP(op, since)
#define DLFUSE_IN(op, name, flags, since)
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias)
#define DLFUSE_ATTR(op, KEY, type, flags, def, lo, hi) if (key == DLFUSE_ATTR_##KEY) return #KEY;
#define DLFUSE_END(op)
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
  /* clang-format on */
  return "attribute";
}

/* Each core op's argument names, its inputs then its outputs as ops.def lists them, for
 * messages that name an argument: kit::arg_names::matmul_add_relu is {"a", "b", "bias", "out"}. */
namespace arg_names {
/* clang-format off */
#define DLFUSE_OP(op, since) inline constexpr const char* op[] = {
#define DLFUSE_IN(op, name, flags, since) #name,
#define DLFUSE_OUT(op, name, flags, rule, s0, s1, s2, alias) #name,
#define DLFUSE_ATTR(op, KEY, type, flags, def, lo, hi)
#define DLFUSE_END(op) };
#include "dlfuse/ops.def"
#undef DLFUSE_OP
#undef DLFUSE_IN
#undef DLFUSE_OUT
#undef DLFUSE_ATTR
#undef DLFUSE_END
/* clang-format on */
}  // namespace arg_names

/* An INT64 attribute, or `fallback` when absent; a wrong type is an error. */
inline int64_t attr_int(const dlfuse_kernel_args_t* args, int32_t key, int64_t fallback) {
  const dlfuse_attr_t* a = dlfuse_find_attr(args, key);
  if (!a) return fallback;
  if (a->type != DLFUSE_ATTR_INT64) invalid(attr_name(key), "type INT64", "type " + std::to_string(a->type));
  return a->value.i64;
}

/* A FLOAT64 attribute, or `fallback` when absent; a wrong type is an error. */
inline double attr_float(const dlfuse_kernel_args_t* args, int32_t key, double fallback) {
  const dlfuse_attr_t* a = dlfuse_find_attr(args, key);
  if (!a) return fallback;
  if (a->type != DLFUSE_ATTR_FLOAT64) invalid(attr_name(key), "type FLOAT64", "type " + std::to_string(a->type));
  return a->value.f64;
}

/* add_mul_activation's activation: required, one of DLFUSE_ACT_*. */
inline int activation(const dlfuse_kernel_args_t* args) {
  const int64_t a = attr_int(args, DLFUSE_ATTR_ACTIVATION, -1);
  if (a < 0 || a >= DLFUSE_ACT_COUNT)
    invalid("ACTIVATION", "0.." + std::to_string(DLFUSE_ACT_COUNT - 1), a == -1 ? "none" : std::to_string(a));
  return int(a);
}

/* add_mul_activation's multiplier (default 1). */
inline double multiplier(const dlfuse_kernel_args_t* args) { return attr_float(args, DLFUSE_ATTR_MULTIPLIER, 1.0); }

/* ---- call sanity --------------------------------------------------------------------- */

/* What a kernel checks although the registry validated the call, so that a host calling it
 * directly cannot crash the plugin: the tensor counts, inputs present (but those whose bit
 * is set in `optional_inputs`, ABI 1.1; input 0 never), output 0 when
 * `first_output_required`, one dtype for every tensor, every tensor on `device_type`.
 * For a core op the counts and mask come from dlfuse/ops.def: DLFUSE_NUM_INPUTS(op),
 * DLFUSE_NUM_OUTPUTS(op), DLFUSE_OPTIONAL_INPUTS(op) (dlfuse/ops.h). */
inline void check_call(const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, bool first_output_required,
                       int32_t device_type, uint32_t optional_inputs = 0) {
  const std::string op = args->op ? args->op : "?";
  if (args->num_inputs != num_inputs || args->num_outputs != num_outputs || !args->inputs || !args->outputs)
    invalid(op, std::to_string(num_inputs) + " inputs and " + std::to_string(num_outputs) + " outputs",
            std::to_string(args->num_inputs) + " and " + std::to_string(args->num_outputs));
  if (num_inputs > 0 && !args->inputs[0]) invalid(op + " input 0", "a tensor", "NULL");  // never optional
  if (first_output_required && !args->outputs[0]) invalid(op + " output 0", "a tensor", "NULL");
  for (int i = 0; i < num_inputs + num_outputs; ++i) {
    const DLTensor* t = i < num_inputs ? args->inputs[i] : args->outputs[i - num_inputs];
    const std::string name =
        op + (i < num_inputs ? " input " + std::to_string(i) : " output " + std::to_string(i - num_inputs));
    if (!t) {
      if (i < num_inputs && !(optional_inputs >> i & 1u)) invalid(name, "a tensor", "NULL");
      continue;
    }
    if (t->device.device_type != device_type)
      invalid(name, "device type " + std::to_string(device_type), std::to_string(int(t->device.device_type)));
    const DLDataType a = t->dtype, b = args->inputs[0]->dtype;
    if (a.code != b.code || a.bits != b.bits || a.lanes != b.lanes) invalid(name, "the dtype of input 0", "another");
  }
}

/* ---- tensor views ------------------------------------------------------------------- */

using Dims = std::vector<int64_t>;

inline int64_t numel(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/* Row-major element strides of a shape. */
inline Dims compact_strides(const Dims& shape) {
  Dims s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) s[size_t(i)] = s[size_t(i) + 1] * shape[size_t(i) + 1];
  return s;
}

/* Advances a row-major multi-index over `shape`; false after the last one. */
inline bool next_index(Dims& idx, const Dims& shape) {
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    if (++idx[size_t(i)] < shape[size_t(i)]) return true;
    idx[size_t(i)] = 0;
  }
  return false;
}

inline int64_t dot(const Dims& idx, const Dims& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

/* A non-owning view of a DLTensor: its shape, explicit element strides (NULL strides
 * become row-major ones) and the base address with byte_offset applied. */
struct View {
  const DLTensor* t = nullptr;
  Dims shape, strides;

  View() = default;
  explicit View(const DLTensor* tensor) : t(tensor) {
    shape.assign(t->shape, t->shape + t->ndim);
    strides = t->strides ? Dims(t->strides, t->strides + t->ndim) : compact_strides(shape);
  }
  int rank() const { return int(shape.size()); }
  int64_t numel() const { return kit::numel(shape); }
  /* Computed in integers: an empty tensor's data may be NULL, and NULL + offset is UB. */
  template <class T = char>
  T* base() const {
    return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
  }
  /* byte_offset in elements (for devices whose data is a handle, as OpenCL's cl_mem). */
  int64_t elem_offset() const { return int64_t(t->byte_offset / ((t->dtype.bits * t->dtype.lanes + 7) / 8)); }

  /* Shape aligned to the last dims of `r` (NumPy broadcasting): 1 where missing. */
  Dims aligned_shape(int r) const {
    Dims out(size_t(r), 1);
    for (int j = 0; j < rank(); ++j) out[size_t(r - rank() + j)] = shape[size_t(j)];
    return out;
  }
  /* Strides aligned likewise; a broadcast dim (missing or of size 1) gets stride 0, so
   * walking the wider shape reads (or accumulates into) the same element again. */
  Dims aligned_strides(int r) const {
    Dims out(size_t(r), 0);
    for (int j = 0; j < rank(); ++j)
      if (shape[size_t(j)] != 1 && r - rank() + j >= 0) out[size_t(r - rank() + j)] = strides[size_t(j)];
    return out;
  }
  /* Row-major without gaps (strides of size-1 dims do not matter). */
  bool is_compact() const {
    int64_t expect = 1;
    for (int i = rank() - 1; i >= 0; --i) {
      if (shape[size_t(i)] != 1 && strides[size_t(i)] != expect) return false;
      expect *= shape[size_t(i)];
    }
    return true;
  }
  /* The last two dims are a compact column-major matrix (a transposed row-major one). */
  bool is_transposed() const {
    if (rank() < 2) return false;
    const size_t r = size_t(rank());
    return (shape[r - 2] == 1 || strides[r - 2] == 1) && (shape[r - 1] == 1 || strides[r - 1] == shape[r - 2]) &&
           !is_compact();
  }
};

/* The dims of `out_shape` a gradient of shape `target` is summed over when reduced to it
 * (NumPy broadcasting backwards): dims `target` lacks, and dims where it has size 1 and the
 * output does not. */
inline std::vector<int> reduced_dims(const Dims& out_shape, const Dims& target) {
  std::vector<int> dims;
  const int r = int(out_shape.size()), tr = int(target.size());
  for (int i = 0; i < r; ++i) {
    const int j = i - (r - tr);
    if (out_shape[size_t(i)] != 1 && (j < 0 || target[size_t(j)] == 1)) dims.push_back(i);
  }
  return dims;
}

/* ---- the kernel table ---------------------------------------------------------------- */

/* Builds a plugin's kernel table: one entry per op, all for the plugin's device type.
 * Kept alive (e.g. in the plugin state or a static) until close(). */
class KernelTable {
 public:
  struct Entry {
    const char* op;
    dlfuse_kernel_fn_t fn;
    void* kernel_data = nullptr;
    uint32_t flags = 0;                          // DLFUSE_KERNEL_* bits
    const dlfuse_op_schema_t* schema = nullptr;  // ABI 1.2: an op of the plugin's own
    std::vector<int32_t> dtype_priorities = {};  // ABI 1.2: one per dtype of the table; empty: the table's priority
  };
  KernelTable(int32_t device_type, std::vector<DLDataType> dtypes, int32_t priority, std::vector<Entry> ops = {})
      : device_type_(device_type), dtypes_(std::move(dtypes)), priority_(priority) {
    for (Entry& e : ops) add(e.op, e.fn, e.kernel_data, nullptr, e.flags, e.schema, std::move(e.dtype_priorities));
  }
  KernelTable(const KernelTable&) = delete;  // entries point into dtypes_ and priorities_
  KernelTable& operator=(const KernelTable&) = delete;
  /* Adds an op served by fn for every dtype of the table (or `dtypes` when given), with the
   * op's schema when it is the plugin's own op, and a priority per dtype when given (one
   * per dtype; a size mismatch throws std::invalid_argument). */
  KernelTable& add(const char* op, dlfuse_kernel_fn_t fn, void* kernel_data = nullptr,
                   const std::vector<DLDataType>* dtypes = nullptr, uint32_t flags = 0,
                   const dlfuse_op_schema_t* schema = nullptr, std::vector<int32_t> dtype_priorities = {}) {
    const std::vector<DLDataType>& d = dtypes ? *dtypes : dtypes_;
    if (!dtype_priorities.empty() && dtype_priorities.size() != d.size())
      throw std::invalid_argument(std::string(op) + ": one priority per dtype expected");
    priorities_.push_back(std::move(dtype_priorities));  // a moved vector keeps its buffer
    entries_.push_back(dlfuse_kernel_t{/* .struct_size = */ sizeof(dlfuse_kernel_t),
                                       /* .op = */ op,
                                       /* .device_type = */ device_type_,
                                       /* .num_dtypes = */ int32_t(d.size()),
                                       /* .dtypes = */ d.data(),
                                       /* .priority = */ priority_,
                                       /* .fn = */ fn,
                                       /* .kernel_data = */ kernel_data,
                                       /* .flags = */ flags,
                                       /* .schema = */ schema,
                                       /* .dtype_priorities = */
                                       priorities_.back().empty() ? nullptr : priorities_.back().data()});
    return *this;
  }
  const dlfuse_kernel_t* data() const { return entries_.data(); }
  int32_t size() const { return int32_t(entries_.size()); }
  /* What get_kernels() answers. */
  dlfuse_status_t get(const dlfuse_kernel_t** kernels, int32_t* num, const char* prefix, char* err,
                      size_t err_size) const noexcept {
    if (!kernels || !num)
      return write_error(prefix, err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                         "get_kernels: expected out-pointers, got NULL");
    *kernels = entries_.data();
    *num = size();
    return DLFUSE_STATUS_OK;
  }

 private:
  int32_t device_type_;
  std::vector<DLDataType> dtypes_;
  int32_t priority_;
  std::vector<std::vector<int32_t>> priorities_;
  std::vector<dlfuse_kernel_t> entries_;
};

}  // namespace kit
}  // namespace dlfuse

#endif /* DLFUSE_PLUGIN_KIT_HPP_ */

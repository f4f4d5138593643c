// Checks of one DLTensor and of pairs of them, without heap allocation: these run on
// every call, before a plugin sees it.
#pragma once
#include <cstdint>

#include "dlfuse/types.h"

namespace dlfuse {

// Deeper tensors are refused; the limit keeps validation allocation-free.
constexpr int32_t kMaxNdim = 16;

// What check_tensor learned about a valid tensor. No member is initialized by default:
// check_tensor sets every one (strides only in [0, ndim)), and validation keeps 32 views
// on the stack per call, whose zeroing cost more than half of a no-op call's dispatch
// (bench/driver, `dlfuse_bench dispatch`). A view that no tensor filled must have its
// `t` set to NULL (and numel to 0) by whoever holds it.
struct TensorView {
  const DLTensor* t;
  int64_t numel;
  int64_t itemsize;
  int64_t strides[kMaxNdim];  // in elements; compact row-major when t->strides is NULL
  int64_t bytes;              // from the first element's byte to past the farthest one's; 0 if empty
  // The bytes the view can touch, [lo, hi), in the address space named by `space`:
  // 0 for directly addressed memory, the handle itself where data is one (data_is_handle).
  uintptr_t space;
  uint64_t lo, hi;
};

// A tensor's checks come in two parts so that a call repeating a remembered layout
// (layout_cache.hpp) reruns only the second: check_layout reads everything but `data`
// and `byte_offset`, check_placement reads only those two (and what the first stored).

// Validates the layout of `t` as argument `arg` of `op`: non-NULL, 0 <= ndim <= kMaxNdim,
// sizes >= 0, lanes 1, whole-byte items, strides >= 0, no int64 overflow in sizes or
// element extents. Outputs must also not overlap themselves.
dlfuse_status_t check_layout(const char* op, const char* arg, const DLTensor* t, bool is_output, TensorView* view);
// Validates where the laid-out tensor `view->t` lies: byte_offset and the byte extent fit,
// data present (when not empty) and item-aligned, the extent inside the address space.
// Sets space, lo and hi.
dlfuse_status_t check_placement_slow(const char* op, const char* arg, TensorView* view);

// The common case inline (it runs for every tensor of every call): a non-empty tensor in
// directly addressed memory, with a power-of-two item size, that passes. Anything else,
// failures included, goes through check_placement_slow, which gives the message.
// Devices whose DLTensor.data is a handle (OpenCL's cl_mem, WebGPU's WGPUBuffer), not an
// address: each handle is its own space, the byte range is byte_offset onwards.
inline bool data_is_handle(int32_t device_type) { return device_type == kDLOpenCL || device_type == kDLWebGPU; }

inline dlfuse_status_t check_placement(const char* op, const char* arg, TensorView* v) {
  const DLTensor* t = v->t;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(t->data);
  const uint64_t offset = t->byte_offset;
  const uint64_t bytes = static_cast<uint64_t>(v->bytes);
  const uint64_t mask = static_cast<uint64_t>(v->itemsize) - 1;
  // Both below 2^62: their sum fits in int64, as check_placement_slow requires.
  const uint64_t extent = offset + bytes;
  const uint64_t first = addr + offset;
  if (__builtin_expect(!data_is_handle(t->device.device_type) && v->numel > 0 && addr != 0 &&
                           (offset | bytes) < (uint64_t{1} << 62) && addr <= UINT64_MAX - extent &&
                           (static_cast<uint64_t>(v->itemsize) & mask) == 0 && (first & mask) == 0,
                       1)) {
    v->space = 0;
    v->lo = first;
    v->hi = first + bytes;
    return DLFUSE_STATUS_OK;
  }
  return check_placement_slow(op, arg, v);
}

inline dlfuse_status_t check_tensor(const char* op, const char* arg, const DLTensor* t, bool is_output,
                                    TensorView* view) {
  if (auto s = check_layout(op, arg, t, is_output, view)) return s;
  return check_placement(op, arg, view);
}

// True when the byte ranges of two non-empty views intersect. Inline: called for every
// (output, input) pair of every call.
inline bool views_overlap(const TensorView& a, const TensorView& b) {
  if (a.numel == 0 || b.numel == 0 || a.space != b.space) return false;
  return a.lo < b.hi && b.lo < a.hi;
}
// True when a and b are the very same view: data, byte_offset, dtype, shape, strides.
bool same_view(const TensorView& a, const TensorView& b);

// NumPy broadcasting of a and b into out (right-aligned). False if incompatible.
bool broadcast_shapes(const int64_t* a, int32_t na, const int64_t* b, int32_t nb, int64_t* out, int32_t* nout);
// True when `from` broadcasts to exactly `to`.
bool broadcasts_to(const int64_t* from, int32_t nfrom, const int64_t* to, int32_t nto);
bool same_shape(const int64_t* a, int32_t na, const int64_t* b, int32_t nb);

}  // namespace dlfuse

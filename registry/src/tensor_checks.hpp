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
  // The bytes the view can touch, [lo, hi), in the address space named by `space`:
  // 0 for directly addressed memory, the cl_mem handle on OpenCL.
  uintptr_t space;
  uint64_t lo, hi;
};

// Validates `t` as argument `arg` of `op`: non-NULL, 0 <= ndim <= kMaxNdim, sizes >= 0,
// lanes 1, whole-byte items, strides >= 0, no int64 overflow in sizes or byte extents,
// data present and item-aligned. Outputs must also not overlap themselves.
dlfuse_status_t check_tensor(const char* op, const char* arg, const DLTensor* t, bool is_output,
                             TensorView* view);

// True when the byte ranges of two non-empty views intersect. Inline: called for every
// (output, input) pair of every call.
inline bool views_overlap(const TensorView& a, const TensorView& b) {
  if (a.numel == 0 || b.numel == 0 || a.space != b.space) return false;
  return a.lo < b.hi && b.lo < a.hi;
}
// True when a and b are the very same view: data, byte_offset, dtype, shape, strides.
bool same_view(const TensorView& a, const TensorView& b);

// NumPy broadcasting of a and b into out (right-aligned). False if incompatible.
bool broadcast_shapes(const int64_t* a, int32_t na, const int64_t* b, int32_t nb, int64_t* out,
                      int32_t* nout);
// True when `from` broadcasts to exactly `to`.
bool broadcasts_to(const int64_t* from, int32_t nfrom, const int64_t* to, int32_t nto);
bool same_shape(const int64_t* a, int32_t na, const int64_t* b, int32_t nb);

}  // namespace dlfuse

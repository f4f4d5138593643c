// Strided views of DLTensors over an op's output shape, collapsed to the three dims a
// pointwise or reduction kernel's grid covers (the host loops over any further dims).
// Both GPU plugins (OpenCL, WebGPU) compile this file: no runtime in here.
#ifndef DLFUSE_PLUGIN_COMMON_LAYOUT_H_
#define DLFUSE_PLUGIN_COMMON_LAYOUT_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlfuse_plugin {

using Dims = std::vector<int64_t>;

// Matches view_t in kernels/common.cl: element offset, then strides of dims 0, 1, 2.
struct ClView {
  int64_t off, s0, s1, s2;
};
// Matches red_t in kernels/common.cl.
struct ClReduced {
  int64_t n[8];
  int64_t s[8];
  int32_t nr;
  int32_t pad_;
};
static_assert(sizeof(ClView) == 32, "view_t layout");
static_assert(sizeof(ClReduced) == 136, "red_t layout");

inline int64_t itemsize(const DLTensor* t) { return t->dtype.bits / 8; }
inline int64_t elem_offset(const DLTensor* t) { return int64_t(t->byte_offset) / itemsize(t); }
Dims shape_of(const DLTensor* t);
// The tensor's strides in elements (compact row-major when strides is NULL).
Dims strides_of(const DLTensor* t);
// Strides of `t` read as a view of a `rank`-dim shape it broadcasts to (right-aligned):
// 0 for dims it lacks or has as 1, so every index of the bigger shape is valid.
Dims aligned_strides(const DLTensor* t, int rank);
// Its shape right-aligned to `rank` dims, 1 where it lacks a dim.
Dims aligned_shape(const DLTensor* t, int rank);
Dims compact_strides(const Dims& shape);
int64_t numel(const Dims& shape);
// Index of the farthest element + 1 (0 when empty): how many elements a buffer must hold
// past the view's offset.
int64_t extent(const DLTensor* t);

// Runs `launch` once per 3-D block of `shape` (in practice once): `strides[i]` are the
// strides of tensor i over `shape`, `offs[i]` its element offset. Size-1 dims are dropped
// and dims that every tensor walks contiguously are merged first. `launch` gets one
// ClView per tensor and the block's sizes n0, n1, n2 (innermost last); it returns false
// to stop. Returns false if a launch did. Nothing runs when shape has a zero.
bool for_each_block(const Dims& shape, const std::vector<Dims>& strides, const std::vector<int64_t>& offs,
                    const std::function<bool(const std::vector<ClView>&, int64_t, int64_t, int64_t)>& launch);

// A reduction of src (strides `src_strides` over `shape`) into dst, whose shape aligned
// to `shape` is `dst_shape` (1 where it is reduced) with strides `dst_strides`. Gives the
// kept dims as blocks like for_each_block and the reduced dims (merged) in `red`.
// Returns false with *err set if more than 8 reduced dims remain after merging.
bool for_each_reduction(const Dims& shape, const Dims& src_strides, int64_t src_off, const Dims& dst_shape,
                        const Dims& dst_strides, int64_t dst_off, std::string* err,
                        const std::function<bool(const ClView& src, const ClReduced& red, const ClView& dst, int64_t,
                                                 int64_t, int64_t)>& launch);

}  // namespace dlfuse_plugin

#endif

// Addressing DLTensor views: element strides (NULL = row-major), byte_offset, and the
// NumPy alignment of a tensor's dims to the right of a wider iteration space.
#ifndef DLFUSE_TESTREF_STRIDED_H_
#define DLFUSE_TESTREF_STRIDED_H_

#include <dlfuse/plugin_kit.hpp>

#include <cstdint>
#include <vector>

namespace testref {

// Index walking from the plugin kit; strides and base addresses stay here, where the
// mutants that break them (tests/conformance/README.md) live.
using dlfuse::kit::dot;
using dlfuse::kit::next_index;
using dlfuse::kit::numel;

inline int64_t elem_stride(const DLTensor* t, int dim) {
  if (t->strides) return t->strides[dim];
  int64_t s = 1;
  for (int j = dim + 1; j < t->ndim; ++j) s *= t->shape[j];
  return s;
}

inline std::vector<int64_t> shape_of(const DLTensor* t) { return std::vector<int64_t>(t->shape, t->shape + t->ndim); }

// Strides of `shape` (rank r) aligned to the last r of `rank` dims: a dim the tensor
// lacks or has size 1 in gets stride 0, so the same element is read (or accumulated)
// for every index of the wider space. `strides` NULL: row-major over `shape`.
inline std::vector<int64_t> aligned_strides(const std::vector<int64_t>& shape, const int64_t* strides, int rank) {
  const int r = int(shape.size());
  std::vector<int64_t> out(rank, 0);
  int64_t compact = 1;
  for (int j = r - 1; j >= 0; --j) {
    const int i = rank - r + j;
    const int64_t s = strides ? strides[j] : compact;
    compact *= shape[j];
    if (i >= 0 && shape[j] != 1) out[i] = s;
  }
  return out;
}

inline std::vector<int64_t> aligned_strides(const DLTensor* t, int rank) {
#ifdef DLFUSE_TESTREF_MUTANT_NULL_STRIDES_RANK3
  // mutant: NULL strides taken as "each dim steps by the next dim's size", right for 2 dims only
  if (!t->strides && t->ndim >= 3) {
    std::vector<int64_t> wrong(size_t(t->ndim), 1);
    for (int j = 0; j + 1 < t->ndim; ++j) wrong[size_t(j)] = t->shape[j + 1];
    return aligned_strides(shape_of(t), wrong.data(), rank);
  }
#endif
  return aligned_strides(shape_of(t), t->strides, rank);
}

// Integer arithmetic: the data of an empty tensor may be NULL or any value (docs/abi.md)
// and its base is never read, but pointer arithmetic on it (NULL + offset, or past the end
// of the address space) would be undefined. A non-empty tensor's extent is checked.
inline char* base_of(const DLTensor* t) {
#ifdef DLFUSE_TESTREF_MUTANT_BYTE_OFFSET_IGNORED
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(t->data));  // mutant
#else
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(t->data) + t->byte_offset);
#endif
}

// The highest byte offset (from base_of) of any element of a non-empty view.
inline int64_t last_element(const DLTensor* t) {
  const std::vector<int64_t> s = aligned_strides(t, t->ndim);
  int64_t o = 0;
  for (int i = 0; i < t->ndim; ++i) o += (t->shape[i] - 1) * s[size_t(i)];
  return o;
}

}  // namespace testref

#endif

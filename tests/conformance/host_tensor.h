// A tensor in host memory laid out exactly as its device copy will be: the same strides,
// element offset (byte_offset) and padding, so the whole buffer travels byte for byte.
#ifndef DLFUSE_CONFORMANCE_HOST_TENSOR_H_
#define DLFUSE_CONFORMANCE_HOST_TENSOR_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dlfuse_conformance {

enum class Layout {
  kCompact,          // row-major, passed with strides = NULL
  kCompactExplicit,  // row-major, strides spelled out
  kPadded,           // rows padded: row stride > last dim
  kTransposed,       // last two dims swapped in memory (a K x M buffer viewed as M x K)
  kZeroStride,       // stride 0 on the first dim of size > 1 (a broadcast view; inputs only)
  kColumnSlice,      // rows twice the last dim apart: the first half of [..., 2N] (the gradient
                     // of one input of a concatenation)
  kBroadcast,        // every stride 0: one element seen as the whole shape (the gradient of a
                     // sum; inputs only)
};

const char* layout_name(Layout l);
int64_t numel(const std::vector<int64_t>& shape);

// Poison for outputs: finite (an unwritten element can never pass as a NaN result) and
// far outside every value the suite produces.
constexpr double kPoison = 7777.0;

class HostTensor {
 public:
  HostTensor() = default;
  // `offset` elements precede the view (its byte_offset); two spare slots follow it so a
  // write past the view's end is seen.
  HostTensor(DLDataType dtype, std::vector<int64_t> shape, Layout layout, int64_t offset);

  DLDataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  bool null_strides() const { return null_strides_; }
  int64_t byte_offset() const { return offset_ * int64_t(esize_); }
  size_t nbytes() const { return bytes_.size(); }
  int64_t numel() const { return dlfuse_conformance::numel(shape_); }
  unsigned char* data() { return bytes_.data(); }
  const unsigned char* data() const { return bytes_.data(); }

  // Logical (row-major) element i, read or written through the strides; set() rounds.
  double get(int64_t i) const;
  // The bytes of logical element i.
  const unsigned char* element(int64_t i) const { return bytes_.data() + slot(i) * int64_t(esize_); }
  void set(int64_t i, double v);
  std::vector<double> values() const;
  // Fills every logical element with uniform values in [lo, hi); `grid` > 0 snaps them
  // to multiples of 2^-grid (exact sums in float32, see cases.cpp).
  void fill_random(std::mt19937_64& rng, double lo, double hi, int grid = 0);
  // Fills the whole buffer, padding included.
  void fill_buffer(double v);
  // Slot indices that some logical element maps to.
  std::vector<bool> covered() const;

 private:
  int64_t slot(int64_t i) const;
  // f(i, slot(i)) for every logical element i in order, the slots stepped without division.
  template <class F>
  void for_each_slot(F f) const;

  DLDataType dtype_{kDLFloat, 32, 1};
  size_t esize_ = 4;
  std::vector<int64_t> shape_, strides_;
  bool null_strides_ = false;
  int64_t offset_ = 0;
  std::vector<unsigned char> bytes_;
};

}  // namespace dlfuse_conformance

#endif

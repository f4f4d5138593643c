#include "host_tensor.h"

#include <cmath>
#include <utility>

#include "dtypes.h"

namespace dlfuse_conformance {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kCompact: return "compact";
    case Layout::kCompactExplicit: return "compact-explicit";
    case Layout::kPadded: return "padded";
    case Layout::kTransposed: return "transposed";
    case Layout::kZeroStride: return "zero-stride";
    case Layout::kColumnSlice: return "column-slice";
    case Layout::kBroadcast: return "broadcast";
  }
  return "?";
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::vector<int64_t> row_major(const std::vector<int64_t>& shape, int64_t pitch_pad) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i] + (i == int(shape.size()) - 1 ? pitch_pad : 0);
  }
  return s;
}

}  // namespace

HostTensor::HostTensor(DLDataType dtype, std::vector<int64_t> shape, Layout layout, int64_t offset)
    : dtype_(dtype), esize_(dtype_size(dtype)), shape_(std::move(shape)), offset_(offset) {
  const int r = int(shape_.size());
  switch (layout) {
    case Layout::kCompact:
      null_strides_ = true;
      strides_ = row_major(shape_, 0);
      break;
    case Layout::kCompactExplicit: strides_ = row_major(shape_, 0); break;
    case Layout::kPadded: strides_ = row_major(shape_, r >= 2 ? 3 : 0); break;
    case Layout::kColumnSlice: strides_ = row_major(shape_, r >= 2 ? shape_[r - 1] : 0); break;
    case Layout::kTransposed: {
      if (r < 2) {
        strides_ = row_major(shape_, 0);
        break;
      }
      std::vector<int64_t> mem = shape_;
      std::swap(mem[r - 1], mem[r - 2]);
      strides_ = row_major(mem, 0);
      std::swap(strides_[r - 1], strides_[r - 2]);
      break;
    }
    case Layout::kBroadcast: strides_.assign(size_t(r), 0); break;
    case Layout::kZeroStride: {
      strides_ = row_major(shape_, 0);
      for (int i = 0; i < r; ++i)
        if (shape_[i] > 1) {
          strides_[i] = 0;
          break;
        }
      break;
    }
  }
  int64_t last = -1;  // highest slot the view touches
  if (numel() > 0) {
    last = 0;
    for (int i = 0; i < r; ++i) last += (shape_[i] - 1) * strides_[i];
  }
  const int64_t slots = offset_ + last + 1 + 2;
  bytes_.assign(size_t(slots) * esize_, 0);
}

int64_t HostTensor::slot(int64_t i) const {
  int64_t s = offset_;
  for (int d = int(shape_.size()) - 1; d >= 0; --d) {
    s += (i % shape_[d]) * strides_[d];
    i /= shape_[d];
  }
  return s;
}

template <class F>
void HostTensor::for_each_slot(F f) const {
  const int64_t n = numel();
  const int r = int(shape_.size());
  std::vector<int64_t> idx(size_t(r), 0);
  int64_t s = offset_;
  for (int64_t i = 0; i < n; ++i) {
    f(i, s);
    for (int d = r - 1; d >= 0; --d) {
      s += strides_[size_t(d)];
      if (++idx[size_t(d)] < shape_[size_t(d)]) break;
      s -= idx[size_t(d)] * strides_[size_t(d)];
      idx[size_t(d)] = 0;
    }
  }
}

double HostTensor::get(int64_t i) const { return decode(bytes_.data() + slot(i) * esize_, dtype_); }

void HostTensor::set(int64_t i, double v) { encode(v, dtype_, bytes_.data() + slot(i) * esize_); }

std::vector<double> HostTensor::values() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  for_each_slot([&](int64_t i, int64_t s) { v[size_t(i)] = decode(bytes_.data() + s * esize_, dtype_); });
  return v;
}

void HostTensor::fill_random(std::mt19937_64& rng, double lo, double hi, int grid) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for_each_slot([&](int64_t, int64_t s) {
    double v = dist(rng);
    if (grid > 0) v = std::nearbyint(v * pow2(grid)) * pow2(-grid);  // exact scalings
    encode(v, dtype_, bytes_.data() + s * esize_);
  });
}

void HostTensor::fill_buffer(double v) {
  for (size_t s = 0; s < bytes_.size() / esize_; ++s) encode(v, dtype_, bytes_.data() + s * esize_);
}

std::vector<bool> HostTensor::covered() const {
  std::vector<bool> c(bytes_.size() / esize_, false);
  for_each_slot([&](int64_t, int64_t s) { c[size_t(s)] = true; });
  return c;
}

}  // namespace dlfuse_conformance

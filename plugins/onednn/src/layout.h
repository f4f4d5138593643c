// How add_mul_activation's tensors lie over the output's shape: the fast paths see every
// tensor as [rows, N] compact and a bias (or its gradient) as a row over N, a scalar, or
// a compact full tensor.
#ifndef DLFUSE_ONEDNN_LAYOUT_H_
#define DLFUSE_ONEDNN_LAYOUT_H_

#include "common.h"

namespace dlfuse_onednn {

enum class BiasKind { kRow, kScalar, kFull, kOther };

// True when v, aligned to shape's rank, has exactly that shape and is compact.
inline bool full_compact(const View& v, const std::vector<int64_t>& shape) {
  if (v.rank() > int(shape.size())) return false;
  const View a = aligned(v, int(shape.size()));
  return a.shape == shape && is_compact(a);
}

inline BiasKind bias_kind(const View& bias, const std::vector<int64_t>& shape) {
  const int r = int(shape.size());
  if (bias.rank() > r) return BiasKind::kOther;
  const View b = aligned(bias, r);
  bool ones = true, row = r > 0 && b.shape[r - 1] == shape[r - 1] && (b.strides[r - 1] == 1 || shape[r - 1] == 1);
  for (int i = 0; i < r; ++i) {
    if (b.shape[i] != 1) ones = false;
    if (i < r - 1 && b.shape[i] != 1) row = false;
  }
  if (ones) return BiasKind::kScalar;
  if (row) return BiasKind::kRow;
  if (full_compact(bias, shape)) return BiasKind::kFull;
  return BiasKind::kOther;
}

}  // namespace dlfuse_onednn

#endif

#include "layout.h"

#include <dlfuse/plugin_kit.hpp>

namespace dlfuse_plugin {

Dims shape_of(const DLTensor* t) { return Dims(t->shape, t->shape + t->ndim); }

Dims compact_strides(const Dims& shape) {
  Dims s(shape.size());
  int64_t acc = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    s[size_t(i)] = acc;
    acc *= shape[size_t(i)] > 0 ? shape[size_t(i)] : 1;
  }
  return s;
}

Dims strides_of(const DLTensor* t) {
  if (t->strides) return Dims(t->strides, t->strides + t->ndim);
  return compact_strides(shape_of(t));
}

Dims aligned_strides(const DLTensor* t, int rank) {
  const Dims st = strides_of(t);
  Dims out(size_t(rank), 0);
  for (int i = 0; i < rank; ++i) {
    const int j = i - (rank - t->ndim);
    if (j >= 0 && t->shape[j] != 1) out[size_t(i)] = st[size_t(j)];
  }
  return out;
}

Dims aligned_shape(const DLTensor* t, int rank) {
  Dims out(size_t(rank), 1);
  for (int i = 0; i < rank; ++i) {
    const int j = i - (rank - t->ndim);
    if (j >= 0) out[size_t(i)] = t->shape[j];
  }
  return out;
}

int64_t numel(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t extent(const DLTensor* t) {
  const Dims sh = shape_of(t), st = strides_of(t);
  if (numel(sh) == 0) return 0;
  int64_t last = 0;
  for (size_t i = 0; i < sh.size(); ++i) last += (sh[i] - 1) * st[i];
  return last + 1;
}

namespace {

// Walks the dims before the innermost three, adding their offsets, and launches per block.
template <class F>
bool outer_loop(const Dims& n, const std::vector<Dims>& s, const std::vector<int64_t>& offs, F&& inner) {
  const int nd = int(n.size());
  const int outer = nd > 3 ? nd - 3 : 0;
  Dims idx(size_t(outer), 0);
  std::vector<int64_t> base = offs;
  for (;;) {
    if (!inner(base)) return false;
    int d = outer - 1;
    for (; d >= 0; --d) {
      for (size_t t = 0; t < s.size(); ++t) base[t] += s[t][size_t(d)];
      if (++idx[size_t(d)] < n[size_t(d)]) break;
      for (size_t t = 0; t < s.size(); ++t) base[t] -= n[size_t(d)] * s[t][size_t(d)];
      idx[size_t(d)] = 0;
    }
    if (d < 0) return true;
  }
}

// Drops size-1 dims and merges dim i into i+1 where every tensor allows it.
void collapse(const Dims& shape, const std::vector<Dims>& strides, Dims* n, std::vector<Dims>* s) {
  n->clear();
  s->assign(strides.size(), Dims());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    bool merge = !n->empty();
    for (size_t t = 0; merge && t < strides.size(); ++t) merge = (*s)[t].back() == strides[t][i] * shape[i];
    if (merge) {
      n->back() *= shape[i];
      for (size_t t = 0; t < strides.size(); ++t) (*s)[t].back() = strides[t][i];
    } else {
      n->push_back(shape[i]);
      for (size_t t = 0; t < strides.size(); ++t) (*s)[t].push_back(strides[t][i]);
    }
  }
}

ClView view3(const Dims& s, int64_t off) {
  // s has at most... the innermost three dims of s, padded at the front with 0.
  const size_t nd = s.size();
  ClView v{off, 0, 0, 0};
  if (nd >= 1) v.s2 = s[nd - 1];
  if (nd >= 2) v.s1 = s[nd - 2];
  if (nd >= 3) v.s0 = s[nd - 3];
  return v;
}

void inner3(const Dims& n, int64_t* n0, int64_t* n1, int64_t* n2) {
  const size_t nd = n.size();
  *n2 = nd >= 1 ? n[nd - 1] : 1;
  *n1 = nd >= 2 ? n[nd - 2] : 1;
  *n0 = nd >= 3 ? n[nd - 3] : 1;
}

}  // namespace

bool for_each_block(const Dims& shape, const std::vector<Dims>& strides, const std::vector<int64_t>& offs,
                    const std::function<bool(const std::vector<ClView>&, int64_t, int64_t, int64_t)>& launch) {
  // A view given by its own dims instead of the iteration's would be read past its end and
  // misplace every element: a plugin bug, refused rather than run.
  if (offs.size() != strides.size())
    throw dlfuse::kit::Error(DLFUSE_STATUS_INTERNAL, "for_each_block: " + std::to_string(strides.size()) +
                                                         " stride lists, " + std::to_string(offs.size()) + " offsets");
  for (size_t t = 0; t < strides.size(); ++t)
    if (strides[t].size() != shape.size())
      throw dlfuse::kit::Error(DLFUSE_STATUS_INTERNAL, "for_each_block: tensor " + std::to_string(t) + " has " +
                                                           std::to_string(strides[t].size()) + " strides, expected " +
                                                           std::to_string(shape.size()) + " (one per dim iterated)");
  if (numel(shape) == 0) return true;
  Dims n;
  std::vector<Dims> s;
  collapse(shape, strides, &n, &s);
  int64_t n0, n1, n2;
  inner3(n, &n0, &n1, &n2);
  return outer_loop(n, s, offs, [&](const std::vector<int64_t>& base) {
    std::vector<ClView> v;
    for (size_t t = 0; t < s.size(); ++t) v.push_back(view3(s[t], base[t]));
    return launch(v, n0, n1, n2);
  });
}

bool for_each_reduction(
    const Dims& shape, const Dims& src_strides, int64_t src_off, const Dims& dst_shape, const Dims& dst_strides,
    int64_t dst_off, std::string* err,
    const std::function<bool(const ClView&, const ClReduced&, const ClView&, int64_t, int64_t, int64_t)>& launch) {
  if (src_strides.size() != shape.size() || dst_shape.size() != shape.size() || dst_strides.size() != shape.size()) {
    *err = "for_each_reduction: " + std::to_string(shape.size()) +
           " dims iterated, but src strides, dst shape and dst "
           "strides have " +
           std::to_string(src_strides.size()) + ", " + std::to_string(dst_shape.size()) + " and " +
           std::to_string(dst_strides.size());
    return false;
  }
  // Split into kept dims (dst has them) and reduced dims (dst is 1 there), merging each.
  Dims kn, ks, kd, rn, rs;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (dst_shape[i] == 1) {
      if (!rn.empty() && rs.back() == src_strides[i] * shape[i]) {
        rn.back() *= shape[i];
        rs.back() = src_strides[i];
      } else {
        rn.push_back(shape[i]);
        rs.push_back(src_strides[i]);
      }
    } else {
      if (!kn.empty() && ks.back() == src_strides[i] * shape[i] && kd.back() == dst_strides[i] * shape[i]) {
        kn.back() *= shape[i];
        ks.back() = src_strides[i];
        kd.back() = dst_strides[i];
      } else {
        kn.push_back(shape[i]);
        ks.push_back(src_strides[i]);
        kd.push_back(dst_strides[i]);
      }
    }
  }
  if (numel(kn) == 0) return true;
  if (rn.size() > 8) {
    *err = "a reduction over " + std::to_string(rn.size()) + " separate groups of dims (at most 8 supported)";
    return false;
  }
  ClReduced red{};
  red.nr = int32_t(rn.size());
  for (size_t i = 0; i < rn.size(); ++i) {
    red.n[i] = rn[i];
    red.s[i] = rs[i];
  }
  int64_t n0, n1, n2;
  inner3(kn, &n0, &n1, &n2);
  return outer_loop(kn, {ks, kd}, {src_off, dst_off}, [&](const std::vector<int64_t>& base) {
    return launch(view3(ks, base[0]), red, view3(kd, base[1]), n0, n1, n2);
  });
}

}  // namespace dlfuse_plugin

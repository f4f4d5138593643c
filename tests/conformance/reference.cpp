#include "reference.h"

#include <cmath>
#include <cstring>

#include <dlfuse/types.h>

#include "host_tensor.h"

namespace dlfuse_conformance {
namespace {

// Row-major strides of `shape` aligned to the right of a rank-`rank` space, 0 where the
// shape is broadcast (size 1 or missing): maps an output index to the input's element.
std::vector<int64_t> bstrides(const std::vector<int64_t>& shape, size_t rank) {
  std::vector<int64_t> s(rank, 0);
  int64_t acc = 1;
  for (int j = int(shape.size()) - 1; j >= 0; --j) {
    const int i = int(rank) - int(shape.size()) + j;
    if (shape[j] != 1) s[size_t(i)] = acc;
    acc *= shape[j];
  }
  return s;
}

// Calls f(linear output index, multi-index) over every element of `shape`.
template <class F>
void for_each_index(const std::vector<int64_t>& shape, F f) {
  const int64_t n = numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    f(lin, idx);
    for (int d = int(shape.size()) - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

int64_t at(const std::vector<int64_t>& idx, const std::vector<int64_t>& s) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * s[i];
  return o;
}

// The sums of the matmul references. Vec4 is four lanes of double, each lane computing what
// the scalar code would (x86-64 without AVX: two SSE2 operations).
typedef double Vec4 __attribute__((vector_size(32)));
// By reference: a Vec4 passed by value would take the AVX calling convention in one clone only.
__attribute__((always_inline)) inline void load4(Vec4& v, const double* p) { std::memcpy(&v, p, sizeof v); }
__attribute__((always_inline)) inline void store4(double* p, const Vec4& v) { std::memcpy(p, &v, sizeof v); }

// Rows r < R of s and sc get the terms t < T in order: s_r[j] += c[r][t] v_t[j] and
// sc_r[j] += d[r][t] w_t[j]. Each row of v and w is loaded once for R output rows, and
// each output once per T terms.
template <int R, int T>
__attribute__((always_inline)) inline void add_block(double* const* s, double* const* sc, const double (*c)[4],
                                                     const double (*d)[4], const double* const* v,
                                                     const double* const* w, int64_t width) {
  int64_t j = 0;
  for (; j + 4 <= width; j += 4) {
    Vec4 vt[T], wt[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      load4(vt[t], v[t] + j);
      load4(wt[t], w[t] + j);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      Vec4 x, y;
      load4(x, s[r] + j);
      load4(y, sc[r] + j);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        x = x + c[r][t] * vt[t];
        y = y + d[r][t] * wt[t];
      }
      store4(s[r] + j, x);
      store4(sc[r] + j, y);
    }
  }
  for (; j < width; ++j) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      double x = s[r][j], y = sc[r][j];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        x = x + c[r][t] * v[t][j];
        y = y + d[r][t] * w[t][j];
      }
      s[r][j] = x;
      sc[r][j] = y;
    }
  }
}

template <int R>
__attribute__((always_inline)) inline void add_rows(double* s, double* sc, int64_t out_step, int64_t width,
                                                    const double* c, const double* d, int64_t c_row, int64_t c_step,
                                                    const double* v, const double* w, int64_t v_step, int64_t count) {
  double* so[R];
  double* sco[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    so[r] = s + r * out_step;
    sco[r] = sc + r * out_step;
  }
  double cb[R][4], db[R][4];
  const double* vi[4];
  const double* wi[4];
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      vi[t] = v + (i + t) * v_step;
      wi[t] = w + (i + t) * v_step;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        cb[r][t] = c[r * c_row + (i + t) * c_step];
        db[r][t] = d[r * c_row + (i + t) * c_step];
      }
    }
    add_block<R, 4>(so, sco, cb, db, vi, wi, width);
  }
  for (; i < count; ++i) {
    vi[0] = v + i * v_step;
    wi[0] = w + i * v_step;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      cb[r][0] = c[r * c_row + i * c_step];
      db[r][0] = d[r * c_row + i * c_step];
    }
    add_block<R, 1>(so, sco, cb, db, vi, wi, width);
  }
}

// For each output row r < rows (s and sc at r * out_step) and each term i < count in
// order: s_r[j] += c[r * c_row + i * c_step] v_i[j] and sc_r[j] += d[...] w_i[j], row i of
// v and w at i * v_step. No output row overlaps an input. Every element adds its terms one
// at a time in order: the result is the naive loop's, bit for bit.
__attribute__((always_inline)) inline void add_products_body(double* s, double* sc, int64_t out_step, int64_t rows,
                                                             int64_t width, const double* c, const double* d,
                                                             int64_t c_row, int64_t c_step, const double* v,
                                                             const double* w, int64_t v_step, int64_t count) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    add_rows<4>(s + r * out_step, sc + r * out_step, out_step, width, c + r * c_row, d + r * c_row, c_row, c_step, v, w,
                v_step, count);
  for (; r < rows; ++r)
    add_rows<1>(s + r * out_step, sc + r * out_step, out_step, width, c + r * c_row, d + r * c_row, c_row, c_step, v, w,
                v_step, count);
}

// An AVX2 copy chosen at run time, not by an ifunc: a resolver runs during relocation,
// before ThreadSanitizer's runtime is up, and the TSan build's executables crashed there.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) void add_products_avx2(double* s, double* sc, int64_t out_step, int64_t rows,
                                                       int64_t width, const double* c, const double* d, int64_t c_row,
                                                       int64_t c_step, const double* v, const double* w, int64_t v_step,
                                                       int64_t count) {
  add_products_body(s, sc, out_step, rows, width, c, d, c_row, c_step, v, w, v_step, count);
}
#endif

void add_products(double* s, double* sc, int64_t out_step, int64_t rows, int64_t width, const double* c,
                  const double* d, int64_t c_row, int64_t c_step, const double* v, const double* w, int64_t v_step,
                  int64_t count) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return add_products_avx2(s, sc, out_step, rows, width, c, d, c_row, c_step, v, w, v_step, count);
#endif
  add_products_body(s, sc, out_step, rows, width, c, d, c_row, c_step, v, w, v_step, count);
}

RefOut zeros(const std::vector<int64_t>& shape) {
  RefOut r;
  r.shape = shape;
  r.val.assign(size_t(numel(shape)), 0.0);
  r.scale.assign(size_t(numel(shape)), 0.0);
  return r;
}

std::vector<double> abs_of(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

std::vector<int64_t> head(const std::vector<int64_t>& s, size_t drop) {
  return std::vector<int64_t>(s.begin(), s.end() - long(drop));
}

// The matmul problem in one place: batch shape, dims, and how each operand's batch maps.
struct Mm {
  std::vector<int64_t> batch;
  int64_t M, K, N;
  std::vector<int64_t> a_b, b_b;  // batch strides of a and b, in elements of their dense values
};

Mm matmul_dims(const Dense& a, const Dense& b) {
  Mm d;
  broadcast_shapes(head(a.shape, 2), head(b.shape, 2), &d.batch);
  d.M = a.shape[a.shape.size() - 2];
  d.K = a.shape.back();
  d.N = b.shape.back();
  d.a_b = bstrides(head(a.shape, 2), d.batch.size());
  d.b_b = bstrides(head(b.shape, 2), d.batch.size());
  for (auto& s : d.a_b) s *= d.M * d.K;
  for (auto& s : d.b_b) s *= d.K * d.N;
  return d;
}

}  // namespace

bool broadcast_shapes(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out) {
  const size_t r = std::max(a.size(), b.size());
  out->assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    (*out)[i] = da == 1 ? db : da;
  }
  return true;
}

namespace {
// u of GELU_TANH: √(2/π) (p + 0.044715 p³).
double gelu_tanh_u(double p) { return std::sqrt(2.0 / M_PI) * (p + 0.044715 * p * p * p); }
// Φ(p) as ½ erfc(-p/√2): ½(1 + erf(p/√2)) cancels for p < 0 (at p = -5 it keeps 10 digits,
// below p ≈ -8.3 none).
double normal_cdf(double p) { return 0.5 * std::erfc(-p / std::sqrt(2.0)); }
}  // namespace

double ref_activate(int act, double p) {
  switch (act) {
    case 0: return p;
    case 1: return std::isnan(p) ? p : (p > 0 ? p : 0.0);
    case 2: return 1.0 / (1.0 + std::exp(-p));
    case 3: return std::tanh(p);
    case 4: return p * normal_cdf(p);
    case 5: return p / (1.0 + std::exp(-2.0 * gelu_tanh_u(p)));  // ½ p (1 + tanh u) = p σ(2u)
    default: return p / (1.0 + std::exp(-p));
  }
}

double ref_activate_grad(int act, double p, double g) {
  switch (act) {
    case 0: return g;
    case 1: return (p > 0 || std::isnan(p)) ? g : 0.0;
    case 2: {
      const double s = 1.0 / (1.0 + std::exp(-p));
      return g * s * (1.0 - s);
    }
    case 3: {
      const double t = std::tanh(p);
      return g * (1.0 - t * t);
    }
    case 4: return g * (normal_cdf(p) + p * std::exp(-0.5 * p * p) / std::sqrt(2.0 * M_PI));
    case 5: {
      // ½(1 + tanh u) = σ(2u) and ½(1 - tanh² u) = 2 σ(2u) σ(-2u): for p << 0, 1 + tanh u
      // and 1 - tanh² u would cancel (docs/ops.md).
      const double u = gelu_tanh_u(p), du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * p * p);
      const double s = 1.0 / (1.0 + std::exp(-2.0 * u)), s_neg = 1.0 / (1.0 + std::exp(2.0 * u));
      return g * (s * (1.0 + 2.0 * p * s_neg * du));
    }
    default: {
      const double s = 1.0 / (1.0 + std::exp(-p));
      return g * s * (1.0 + p * (1.0 - s));
    }
  }
}

double ref_activate_grad_scale(int act, double p) {
  const double ap = std::fabs(p);
  switch (act) {
    case 0: return 1.0;
    case 1: return (p > 0 || std::isnan(p)) ? 1.0 : 0.0;
    case 2: {
      const double s = 1.0 / (1.0 + std::exp(-p));
      return s + s * s;
    }
    case 3: {
      const double t = std::tanh(p);
      return 1.0 + t * t;
    }
    case 4: {
      // Φ(p) as its first form's terms, ½(1 + |erf(p/√2)|): a kernel may use that form,
      // whose bracket cancels for p < 0 (docs/ops.md).
      const double half_terms = 0.5 * (1.0 + std::fabs(std::erf(p / std::sqrt(2.0))));
      return half_terms + ap * std::exp(-0.5 * p * p) / std::sqrt(2.0 * M_PI);
    }
    case 5: {
      const double c = std::sqrt(2.0 / M_PI), t = std::tanh(gelu_tanh_u(p));
      return 0.5 * (1.0 + std::fabs(t)) + 0.5 * ap * (1.0 + t * t) * c * (1.0 + 3.0 * 0.044715 * p * p);
    }
    default: {
      const double s = 1.0 / (1.0 + std::exp(-p));
      return s + ap * (s + s * s);
    }
  }
}

double ref_activate_grad_from_out(int act, double out, double g) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return g;
    case DLFUSE_ACT_RELU: return (out > 0 || std::isnan(out)) ? g : 0.0;
    case DLFUSE_ACT_SIGMOID: return g * out * (1.0 - out);
    default: return g * (1.0 - out * out);  // TANH
  }
}

double ref_activate_grad_scale_from_out(int act, double out) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return 1.0;
    case DLFUSE_ACT_RELU: return (out > 0 || std::isnan(out)) ? 1.0 : 0.0;
    case DLFUSE_ACT_SIGMOID: return std::fabs(out) + out * out;
    default: return 1.0 + out * out;  // TANH
  }
}

RefOut ref_matmul_pre(const Dense& a, const Dense& b, const Dense& bias) {
  const Mm d = matmul_dims(a, b);
  std::vector<int64_t> out_shape = d.batch;
  out_shape.push_back(d.M);
  out_shape.push_back(d.N);
  RefOut r = zeros(out_shape);
  const std::vector<int64_t> bias_s = bstrides(bias.shape, out_shape.size());
  const std::vector<double> a_abs = abs_of(a.v), b_abs = abs_of(b.v);
  for_each_index(d.batch, [&](int64_t bl, const std::vector<int64_t>& bi) {
    const double* pa = a.v.data() + at(bi, d.a_b);
    const double* pb = b.v.data() + at(bi, d.b_b);
    std::vector<int64_t> oi = bi;
    oi.resize(bi.size() + 2);
    for (int64_t m = 0; m < d.M; ++m) {
      oi[bi.size()] = m;
      for (int64_t n = 0; n < d.N; ++n) {
        oi[bi.size() + 1] = n;
        const double bv = bias.v[size_t(at(oi, bias_s))];
        r.val[size_t((bl * d.M + m) * d.N + n)] = bv;
        r.scale[size_t((bl * d.M + m) * d.N + n)] = std::fabs(bv);
      }
    }
    // |a b| = |a| |b| exactly: the scale's terms are the products' magnitudes.
    add_products(r.val.data() + bl * d.M * d.N, r.scale.data() + bl * d.M * d.N, d.N, d.M, d.N, pa,
                 a_abs.data() + (pa - a.v.data()), d.K, 1, pb, b_abs.data() + (pb - b.v.data()), d.N, d.K);
  });
  return r;
}

RefOut ref_matmul_forward(const Dense& a, const Dense& b, const Dense& bias) {
  RefOut r = ref_matmul_pre(a, b, bias);
  for (double& v : r.val) v = ref_activate(DLFUSE_ACT_RELU, v);
  return r;
}

std::vector<RefOut> ref_matmul_activation(const Dense& a, const Dense& b, const Dense& bias, int act) {
  const RefOut pre = ref_matmul_pre(a, b, bias);
  // act' is at most about 1.13 (GELU, SiLU) and the activations keep |out| <= |pre| or <= 1:
  // the error of out follows pre's, whose scale is the sum's (docs/ops.md, "sums").
  RefOut out = pre;
  for (double& v : out.val) v = ref_activate(act, v);
  return {out, pre};
}

RefOut ref_matmul_residual(const Dense& a, const Dense& b, const Dense& bias, const Dense& residual) {
  RefOut r = ref_matmul_pre(a, b, bias);
  const auto rs = bstrides(residual.shape, r.shape.size());
  for_each_index(r.shape, [&](int64_t lin, const std::vector<int64_t>& i) {
    const double v = residual.v[size_t(at(i, rs))];
    r.val[size_t(lin)] += v;
    r.scale[size_t(lin)] += std::fabs(v);  // one more term of the sum
  });
  return r;
}

namespace {

// dZ of a matmul backward, with the scale of each element (|grad_out| A, docs/ops.md).
struct Dz {
  std::vector<double> val, scale;
};

// grad_a, grad_b and the reductions of dZ to bias_shape and residual_shape (the latter
// empty when the op has none: `with_residual` false).
Grads matmul_grads(const Dz& dz, const Dense& a, const Dense& b, const std::vector<int64_t>& bias_shape,
                   bool with_residual, const std::vector<int64_t>& residual_shape) {
  const Mm d = matmul_dims(a, b);
  Grads g{zeros(a.shape), zeros(b.shape), zeros(bias_shape), with_residual ? zeros(residual_shape) : RefOut{}};
  const size_t rank = d.batch.size() + 2;
  const std::vector<int64_t> bias_s = bstrides(bias_shape, rank);
  const std::vector<int64_t> res_s = with_residual ? bstrides(residual_shape, rank) : std::vector<int64_t>();
  const std::vector<double> a_abs = abs_of(a.v);
  std::vector<double> bt(size_t(d.K * d.N)), bt_abs(bt.size());
  for_each_index(d.batch, [&](int64_t bl, const std::vector<int64_t>& bi) {
    const int64_t ao = at(bi, d.a_b), bo = at(bi, d.b_b);
    std::vector<int64_t> oi = bi;
    oi.resize(rank);
    // Each gradient element sums its terms in the order m, then n, as the element-by-element
    // form does. grad_a's rows sum over n the rows of b's transpose, grad_b's rows over m the
    // rows of dZ.
    for (int64_t m = 0; m < d.M; ++m) {
      const double* z = dz.val.data() + (bl * d.M + m) * d.N;
      const double* zs = dz.scale.data() + (bl * d.M + m) * d.N;
      oi[rank - 2] = m;
      for (int64_t n = 0; n < d.N; ++n) {
        oi[rank - 1] = n;
        const size_t bo2 = size_t(at(oi, bias_s));
        g.bias.val[bo2] += z[n];
        g.bias.scale[bo2] += zs[n];
        if (with_residual) {
          const size_t ro = size_t(at(oi, res_s));
          g.residual.val[ro] += z[n];
          g.residual.scale[ro] += zs[n];
        }
      }
    }
    for (int64_t n = 0; n < d.N; ++n) {
      for (int64_t k = 0; k < d.K; ++k) {
        const double v = b.v[size_t(bo + k * d.N + n)];
        bt[size_t(n * d.K + k)] = v;
        bt_abs[size_t(n * d.K + k)] = std::fabs(v);
      }
    }
    const double* z = dz.val.data() + bl * d.M * d.N;
    const double* zs = dz.scale.data() + bl * d.M * d.N;
    add_products(g.first.val.data() + ao, g.first.scale.data() + ao, d.K, d.M, d.K, z, zs, d.N, 1, bt.data(),
                 bt_abs.data(), d.K, d.N);
    add_products(g.second.val.data() + bo, g.second.scale.data() + bo, d.N, d.K, d.N, a.v.data() + ao,
                 a_abs.data() + ao, 1, d.K, z, zs, d.N, d.M);
  });
  return g;
}

}  // namespace

Grads ref_matmul_backward(const Dense& grad_out, const Dense& a, const Dense& b, const Dense& out,
                          const std::vector<int64_t>& bias_shape) {
  Dz dz;
  for (size_t o = 0; o < grad_out.v.size(); ++o) {
    const double z = ref_activate_grad(DLFUSE_ACT_RELU, out.v[o], grad_out.v[o]);
    dz.val.push_back(z);
    dz.scale.push_back(std::fabs(z));
  }
  return matmul_grads(dz, a, b, bias_shape, false, {});
}

Grads ref_matmul_activation_backward(const Dense& grad_out, const Dense& a, const Dense& b, const Dense& saved,
                                     bool from_out, int act, const std::vector<int64_t>& bias_shape) {
  Dz dz;
  for (size_t o = 0; o < grad_out.v.size(); ++o) {
    const double go = grad_out.v[o], sv = saved.v[o];
    const double z = from_out ? ref_activate_grad_from_out(act, sv, go) : ref_activate_grad(act, sv, go);
    const double a_scale = from_out ? ref_activate_grad_scale_from_out(act, sv) : ref_activate_grad_scale(act, sv);
    // A select passes grad_out unchanged or gives an exact 0: no scale where it blocks.
    dz.val.push_back(z);
    dz.scale.push_back(z == 0.0 ? 0.0 : std::fabs(go) * a_scale);
  }
  return matmul_grads(dz, a, b, bias_shape, false, {});
}

Grads ref_matmul_residual_backward(const Dense& grad_out, const Dense& a, const Dense& b,
                                   const std::vector<int64_t>& bias_shape, const std::vector<int64_t>& residual_shape) {
  Dz dz;
  dz.val = grad_out.v;
  dz.scale = abs_of(grad_out.v);
  return matmul_grads(dz, a, b, bias_shape, true, residual_shape);
}

Dense ref_pre_activation(const Dense& x, const Dense& y, const Dense& bias, double mult) {
  Dense pre;
  std::vector<int64_t> xy;
  broadcast_shapes(x.shape, y.shape, &xy);
  broadcast_shapes(xy, bias.shape, &pre.shape);
  const size_t r = pre.shape.size();
  const auto xs = bstrides(x.shape, r), ys = bstrides(y.shape, r), bs = bstrides(bias.shape, r);
  pre.v.resize(size_t(numel(pre.shape)));
  for_each_index(pre.shape, [&](int64_t lin, const std::vector<int64_t>& i) {
    pre.v[size_t(lin)] = x.v[size_t(at(i, xs))] + bias.v[size_t(at(i, bs))] + mult * y.v[size_t(at(i, ys))];
  });
  return pre;
}

RefOut ref_add_mul_forward(const Dense& x, const Dense& y, const Dense& bias, int act, double mult) {
  const Dense pre = ref_pre_activation(x, y, bias, mult);
  RefOut r = zeros(pre.shape);
  for (size_t i = 0; i < pre.v.size(); ++i) {
    const double p = pre.v[i];
    r.val[i] = ref_activate(act, p);
    // GELU is p/2 (1 + erf) or p/2 (1 + tanh): for p < 0 the bracket cancels, so the
    // scale is the sum of its terms' magnitudes, as for the gradients (docs/ops.md).
    if (act == DLFUSE_ACT_GELU_ERF)
      r.scale[i] = 0.5 * std::fabs(p) * (1.0 + std::fabs(std::erf(p / std::sqrt(2.0))));
    else if (act == DLFUSE_ACT_GELU_TANH)
      r.scale[i] = 0.5 * std::fabs(p) * (1.0 + std::fabs(std::tanh(gelu_tanh_u(p))));
    else
      r.scale[i] = std::fabs(r.val[i]);
  }
  return r;
}

// grad_x, grad_y, grad_bias of add_mul from d_pre at every index of the output's `shape`,
// each summed into its own (broadcast) shape; `d_at(lin, &scale)` gives d_pre and its scale.
template <class DAt>
Grads add_mul_grads(const std::vector<int64_t>& shape, const std::vector<int64_t>& x_shape,
                    const std::vector<int64_t>& y_shape, const std::vector<int64_t>& bias_shape, double mult,
                    DAt d_at) {
  Grads g{zeros(x_shape), zeros(y_shape), zeros(bias_shape), RefOut{}};
  const size_t r = shape.size();
  const auto xs = bstrides(x_shape, r), ys = bstrides(y_shape, r), bs = bstrides(bias_shape, r);
  for_each_index(shape, [&](int64_t lin, const std::vector<int64_t>& i) {
    double sc = 0.0;
    const double d = d_at(size_t(lin), &sc);
    const size_t ix = size_t(at(i, xs)), iy = size_t(at(i, ys)), ib = size_t(at(i, bs));
    g.first.val[ix] += d;
    g.first.scale[ix] += sc;
    g.second.val[iy] += mult * d;
    g.second.scale[iy] += std::fabs(mult) * sc;
    g.bias.val[ib] += d;
    g.bias.scale[ib] += sc;
  });
  return g;
}

Grads ref_add_mul_backward(const Dense& grad_out, const Dense& x, const Dense& y, const Dense& bias, int act,
                           double mult) {
  const Dense pre = ref_pre_activation(x, y, bias, mult);
  return add_mul_grads(pre.shape, x.shape, y.shape, bias.shape, mult, [&](size_t lin, double* sc) {
    const double p = pre.v[lin], go = grad_out.v[lin];
    const double d = ref_activate_grad(act, p, go);
    // A select passes grad_out unchanged or gives an exact 0: no scale where it blocks.
    *sc = d == 0.0 ? 0.0 : std::fabs(go) * ref_activate_grad_scale(act, p);
    return d;
  });
}

Grads ref_add_mul_backward_from_out(const Dense& grad_out, const Dense& out, const std::vector<int64_t>& x_shape,
                                    const std::vector<int64_t>& y_shape, const std::vector<int64_t>& bias_shape,
                                    int act, double mult) {
  return add_mul_grads(out.shape, x_shape, y_shape, bias_shape, mult, [&](size_t lin, double* sc) {
    const double o = out.v[lin], go = grad_out.v[lin];
    const double d = ref_activate_grad_from_out(act, o, go);
    *sc = d == 0.0 ? 0.0 : std::fabs(go) * ref_activate_grad_scale_from_out(act, o);
    return d;
  });
}

}  // namespace dlfuse_conformance

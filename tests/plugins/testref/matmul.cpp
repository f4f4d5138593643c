// matmul_add_relu forward and backward as plain loops over strided, broadcast batches.
#include <set>
#include <vector>

#include "activation.h"
#include "strided.h"
#include "testref.h"

namespace testref {
namespace {

// How one matmul operand ([..., R, C]) is walked: batch strides aligned to the output's
// batch dims, then its row and column strides.
struct Operand {
  char* base;
  std::vector<int64_t> batch;
  int64_t row, col;
};

Operand operand(const DLTensor* t, int batch_rank) {
  Operand o;
  o.base = base_of(t);
  // Aligned over the whole shape, so that compact batch strides include the matrix size.
  const std::vector<int64_t> full = aligned_strides(t, batch_rank + 2);
  o.batch.assign(full.begin(), full.end() - 2);
  o.row = elem_stride(t, t->ndim - 2);
  o.col = elem_stride(t, t->ndim - 1);
  return o;
}

// A float accumulator per element of a gradient, indexed like its tensor, stored back
// through the tensor's own strides at the end.
template <class Acc> struct GradBuffer {
  const DLTensor* t = nullptr;
  std::vector<Acc> sum;
  std::vector<int64_t> batch;  // compact strides aligned to the output's batch dims
  int64_t row = 0, col = 0;

  GradBuffer(const DLTensor* grad, int batch_rank) : t(grad) {
    if (!grad) return;
    const std::vector<int64_t> s = shape_of(grad);
    sum.assign(size_t(numel(s)), Acc(0));
    const std::vector<int64_t> full = aligned_strides(s, nullptr, batch_rank + 2);
    batch.assign(full.begin(), full.end() - 2);
    col = 1;
    row = s.back();
  }
  Acc& at(int64_t batch_off, int64_t r, int64_t c) { return sum[size_t(batch_off + r * row + c * col)]; }

  template <class T> void store() const {
    if (!t) return;
    const std::vector<int64_t> shape = shape_of(t);
    const std::vector<int64_t> strided = aligned_strides(t, t->ndim);
    std::vector<int64_t> idx(shape.size(), 0);
    if (numel(shape) == 0) return;
    int64_t linear = 0;
    do {
      Convert<T, Acc>::store(base_of(t) + dot(idx, strided) * int64_t(sizeof(T)), sum[size_t(linear++)]);
    } while (next_index(idx, shape));
  }
};

template <class T, class Acc>
dlfuse_status_t forward(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = out->ndim, batch_rank = rank - 2;
  const int64_t M = out->shape[rank - 2], N = out->shape[rank - 1], K = a->shape[a->ndim - 1];
  const std::vector<int64_t> batch_shape(out->shape, out->shape + batch_rank);
  const Operand A = operand(a, batch_rank), B = operand(b, batch_rank), O = operand(out, batch_rank);
  const std::vector<int64_t> bias_s = aligned_strides(bias, rank);
  const std::vector<int64_t> bias_batch(bias_s.begin(), bias_s.end() - 2);
  const char* bias_base = base_of(bias);
  if (numel(batch_shape) == 0) return DLFUSE_STATUS_OK;

  std::vector<int64_t> bi(batch_rank, 0);
  do {
    const char* pa = A.base + dot(bi, A.batch) * es;
    const char* pb = B.base + dot(bi, B.batch) * es;
    const char* pbias = bias_base + dot(bi, bias_batch) * es;
    char* po = O.base + dot(bi, O.batch) * es;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
#if DLFUSE_TESTREF_INJECT_BUG == 2
        if (M > 1 && N > 1 && m == M - 1 && n == N - 1) continue;  // the injected bug
#endif
        Acc acc = Acc(0);
        for (int64_t k = 0; k < K; ++k) {
          Acc av = C::load(pa + (m * A.row + k * A.col) * es), bv = C::load(pb + (k * B.row + n * B.col) * es);
#ifdef DLFUSE_TESTREF_MUTANT_TF32_WHEN_NOT_ALLOWED
          if (sizeof(T) == 4) {  // mutant: float32 operands cut to TF32 although not allowed
            av = Acc(tf32_round(float(av)));
            bv = Acc(tf32_round(float(bv)));
          }
#endif
          acc += av * bv;
#ifdef DLFUSE_TESTREF_MUTANT_ACCUM_IN_STORAGE_DTYPE
          acc = storage_round<T, Acc>(acc);  // mutant: the running sum kept in the storage dtype
#endif
        }
        acc += C::load(pbias + (m * bias_s[rank - 2] + n * bias_s[rank - 1]) * es);
#ifdef DLFUSE_TESTREF_MUTANT_K_ZERO_NOT_RELU_BIAS
        if (K == 0) acc = Acc(0);  // mutant: an empty product taken as "no output"
#endif
        C::store(po + (m * O.row + n * O.col) * es, relu(acc));
      }
    }
  } while (next_index(bi, batch_shape));
  return DLFUSE_STATUS_OK;
}

template <class T, class Acc>
dlfuse_status_t backward(const DLTensor* grad_out, const DLTensor* a, const DLTensor* b,
                         const DLTensor* out, DLTensor* grad_a, DLTensor* grad_b, DLTensor* grad_bias) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = out->ndim, batch_rank = rank - 2;
  const int64_t M = out->shape[rank - 2], N = out->shape[rank - 1], K = a->shape[a->ndim - 1];
  const std::vector<int64_t> batch_shape(out->shape, out->shape + batch_rank);
  const Operand A = operand(a, batch_rank), B = operand(b, batch_rank);
  const Operand G = operand(grad_out, batch_rank), O = operand(out, batch_rank);
  GradBuffer<Acc> ga(grad_a, batch_rank), gb(grad_b, batch_rank);

  // grad_bias may have any shape that broadcasts to out: index it over out's full rank.
  std::vector<Acc> gbias;
  std::vector<int64_t> gbias_s;
  if (grad_bias) {
    gbias.assign(size_t(numel(shape_of(grad_bias))), Acc(0));
    gbias_s = aligned_strides(shape_of(grad_bias), nullptr, rank);
  }
  const std::vector<int64_t> gbias_batch =
      grad_bias ? std::vector<int64_t>(gbias_s.begin(), gbias_s.end() - 2) : std::vector<int64_t>();

  std::vector<int64_t> bi(batch_rank, 0);
#ifdef DLFUSE_TESTREF_MUTANT_MATMUL_BATCH_GRAD_NOT_SUMMED
  std::set<int64_t> seen_b;
#endif
  if (numel(batch_shape) > 0) do {
    const char* pa = A.base + dot(bi, A.batch) * es;
    const char* pb = B.base + dot(bi, B.batch) * es;
    const char* pg = G.base + dot(bi, G.batch) * es;
    const char* po = O.base + dot(bi, O.batch) * es;
    const int64_t ga_off = grad_a ? dot(bi, ga.batch) : 0, gb_off = grad_b ? dot(bi, gb.batch) : 0;
    const int64_t gbias_off = grad_bias ? dot(bi, gbias_batch) : 0;
#ifdef DLFUSE_TESTREF_MUTANT_MATMUL_BATCH_GRAD_NOT_SUMMED
    // mutant: a gradient block met again (its operand broadcast over this batch dim) is
    // overwritten instead of summed
    if (grad_b && !seen_b.insert(gb_off).second)
      for (int64_t i = 0; i < K * N; ++i) gb.sum[size_t(gb_off + i)] = Acc(0);
#endif
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        const Acc o = C::load(po + (m * O.row + n * O.col) * es);
        const Acc dz = activate_grad(DLFUSE_ACT_RELU, o, C::load(pg + (m * G.row + n * G.col) * es));
        if (grad_bias) gbias[size_t(gbias_off + m * gbias_s[rank - 2] + n * gbias_s[rank - 1])] += dz;
        for (int64_t k = 0; k < K; ++k) {
          if (grad_a) ga.at(ga_off, m, k) += dz * C::load(pb + (k * B.row + n * B.col) * es);
          if (grad_b) gb.at(gb_off, k, n) += C::load(pa + (m * A.row + k * A.col) * es) * dz;
        }
      }
    }
  } while (next_index(bi, batch_shape));

  ga.template store<T>();
  gb.template store<T>();
  if (grad_bias && !gbias.empty()) {
    const std::vector<int64_t> shape = shape_of(grad_bias);
    const std::vector<int64_t> strided = aligned_strides(grad_bias, grad_bias->ndim);
    std::vector<int64_t> idx(shape.size(), 0);
    int64_t linear = 0;
    do {
      C::store(base_of(grad_bias) + dot(idx, strided) * es, gbias[size_t(linear++)]);
    } while (next_index(idx, shape));
  }
  return DLFUSE_STATUS_OK;
}

}  // namespace

dlfuse_status_t matmul_add_relu(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 3, 1, true);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    return with_dtype(in[0]->dtype, args->err, args->err_size, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return forward<T, Acc>(in[0], in[1], in[2], args->outputs[0]);
    });
  });
}

dlfuse_status_t matmul_add_relu_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 4, 3, false);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    return with_dtype(in[0]->dtype, args->err, args->err_size, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return backward<T, Acc>(in[0], in[1], in[2], in[3], out[0], out[1], out[2]);
    });
  });
}

}  // namespace testref

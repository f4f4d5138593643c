// The matmul ops (matmul_add_relu, matmul_add_activation, matmul_add_residual and their
// backwards) as plain loops over strided, broadcast batches: one forward with an epilogue,
// one backward with a choice of dZ.
#include <set>
#include <string>
#include <utility>
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
template <class Acc>
struct GradBuffer {
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

  template <class T>
  void store() const {
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

// A gradient of any shape that broadcasts to out (grad_bias, grad_residual): one
// accumulator per element, indexed over out's full rank, summed where it was broadcast.
template <class Acc>
struct BroadcastGrad {
  const DLTensor* t = nullptr;
  std::vector<Acc> sum;
  std::vector<int64_t> s, batch;  // compact strides aligned to out's rank; their batch part

  BroadcastGrad(const DLTensor* grad, int rank) : t(grad) {
    if (!grad) return;
    sum.assign(size_t(numel(shape_of(grad))), Acc(0));
    s = aligned_strides(shape_of(grad), nullptr, rank);
    batch.assign(s.begin(), s.end() - 2);
  }
  void add(int64_t batch_off, int64_t m, int64_t n, Acc v) {
    if (t) sum[size_t(batch_off + m * s[s.size() - 2] + n * s[s.size() - 1])] += v;
  }
  template <class T>
  void store() const {
    if (!t || sum.empty()) return;
    const std::vector<int64_t> shape = shape_of(t);
    const std::vector<int64_t> strided = aligned_strides(t, t->ndim);
    std::vector<int64_t> idx(shape.size(), 0);
    int64_t linear = 0;
    do {
      Convert<T, Acc>::store(base_of(t) + dot(idx, strided) * int64_t(sizeof(T)), sum[size_t(linear++)]);
    } while (next_index(idx, shape));
  }
};

// What the forward does after a @ b + bias: the activation, and the optional extras of
// ABI 1.1's ops (pre written out, a residual added).
struct Epilogue {
  int act = DLFUSE_ACT_RELU;
  DLTensor* pre = nullptr;             // matmul_add_activation: receives a @ b + bias
  const DLTensor* residual = nullptr;  // matmul_add_residual: added after the bias, no activation
  bool relu_op = false;                // matmul_add_relu itself: the injected bug 2 is its alone
};

template <class T, class Acc>
dlfuse_status_t forward(const DLTensor* a, const DLTensor* b, const DLTensor* bias, DLTensor* out, const Epilogue& ep) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = out->ndim, batch_rank = rank - 2;
  const int64_t M = out->shape[rank - 2], N = out->shape[rank - 1], K = a->shape[a->ndim - 1];
  const std::vector<int64_t> batch_shape(out->shape, out->shape + batch_rank);
  const Operand A = operand(a, batch_rank), B = operand(b, batch_rank), O = operand(out, batch_rank);
  const std::vector<int64_t> bias_s = aligned_strides(bias, rank);
  const std::vector<int64_t> bias_batch(bias_s.begin(), bias_s.end() - 2);
  const char* bias_base = base_of(bias);
  const Operand P = ep.pre ? operand(ep.pre, batch_rank) : Operand{};
  // The residual broadcasts like the bias; in place it is exactly out's view, and each of its
  // elements is read right before the same element of out is written.
  const std::vector<int64_t> res_s = ep.residual ? aligned_strides(ep.residual, rank) : std::vector<int64_t>();
  const std::vector<int64_t> res_batch =
      ep.residual ? std::vector<int64_t>(res_s.begin(), res_s.end() - 2) : std::vector<int64_t>();
  if (numel(batch_shape) == 0) return DLFUSE_STATUS_OK;

  std::vector<int64_t> bi(batch_rank, 0);
#ifdef DLFUSE_TESTREF_MUTANT_RESIDUAL_IN_PLACE_ZERO_FIRST
  // mutant: out cleared before the pass (harmless unless out is the residual)
  if (ep.residual) do {
      char* po = O.base + dot(bi, O.batch) * es;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) C::store(po + (m * O.row + n * O.col) * es, Acc(0));
    } while (next_index(bi, batch_shape));
#endif
  do {
    const char* pa = A.base + dot(bi, A.batch) * es;
    const char* pb = B.base + dot(bi, B.batch) * es;
    const char* pbias = bias_base + dot(bi, bias_batch) * es;
    char* po = O.base + dot(bi, O.batch) * es;
    char* pp = ep.pre ? P.base + dot(bi, P.batch) * es : nullptr;
    const char* pr = ep.residual ? base_of(ep.residual) + dot(bi, res_batch) * es : nullptr;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
#if DLFUSE_TESTREF_INJECT_BUG == 2
        if (ep.relu_op && M > 1 && N > 1 && m == M - 1 && n == N - 1) continue;  // the injected bug
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
#ifdef DLFUSE_TESTREF_MUTANT_UNALIGNED_ROW_BIAS_DROPPED
        // mutant: a bias varying along M lost where K's rows are not 16-byte aligned and the
        // work pays for padded copies (as a GPU plugin's padded GEMM that drops its addend)
        const bool padded_path = (K * es) % 16 != 0 && M * N * K >= 64 * (M * K + K * N + M * N);
        if (!(padded_path && bias_s[rank - 2] != 0))
#endif
          acc += C::load(pbias + (m * bias_s[rank - 2] + n * bias_s[rank - 1]) * es);
#ifdef DLFUSE_TESTREF_MUTANT_K_ZERO_NOT_RELU_BIAS
        if (K == 0) acc = Acc(0);  // mutant: an empty product taken as "no output"
#endif
#ifdef DLFUSE_TESTREF_MUTANT_PRE_AFTER_ACTIVATION
        if (pp) C::store(pp + (m * P.row + n * P.col) * es, activate(ep.act, acc));  // mutant: pre is out
#else
        if (pp) C::store(pp + (m * P.row + n * P.col) * es, acc);
#endif
        if (pr) {
          C::store(po + (m * O.row + n * O.col) * es,
                   acc + C::load(pr + (m * res_s[rank - 2] + n * res_s[rank - 1]) * es));
          continue;
        }
        C::store(po + (m * O.row + n * O.col) * es, activate(ep.act, acc));
      }
    }
  } while (next_index(bi, batch_shape));
  return DLFUSE_STATUS_OK;
}

// Where dZ comes from: grad_out times act' of the saved tensor (out or pre), or grad_out
// itself (matmul_add_residual_backward: no saved tensor).
struct Saved {
  const DLTensor* t = nullptr;
  int act = DLFUSE_ACT_IDENTITY;
  bool from_out = false;  // t is the forward's out; else its pre
};

template <class Acc>
Acc dz_of(const Saved& s, Acc saved, Acc grad) {
  if (!s.t) return grad;
  return s.from_out ? activate_grad_from_out(s.act, saved, grad) : activate_grad(s.act, saved, grad);
}

// Outputs of a backward: grad_a, grad_b, then reductions to broadcastable shapes
// (grad_bias, and grad_residual for the residual op); each may be NULL.
struct BackwardOutputs {
  DLTensor* grad_a = nullptr;
  DLTensor* grad_b = nullptr;
  DLTensor* grad_bias = nullptr;
  DLTensor* grad_residual = nullptr;
};

template <class T, class Acc>
dlfuse_status_t backward(const DLTensor* grad_out, const DLTensor* a, const DLTensor* b, const Saved& saved,
                         const BackwardOutputs& outs) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = grad_out->ndim, batch_rank = rank - 2;
  const int64_t M = grad_out->shape[rank - 2], N = grad_out->shape[rank - 1], K = a->shape[a->ndim - 1];
  const std::vector<int64_t> batch_shape(grad_out->shape, grad_out->shape + batch_rank);
  const Operand A = operand(a, batch_rank), B = operand(b, batch_rank);
  const Operand G = operand(grad_out, batch_rank);
  const Operand S = saved.t ? operand(saved.t, batch_rank) : Operand{};
  GradBuffer<Acc> ga(outs.grad_a, batch_rank), gb(outs.grad_b, batch_rank);
  BroadcastGrad<Acc> gbias(outs.grad_bias, rank), gres(outs.grad_residual, rank);

  std::vector<int64_t> bi(batch_rank, 0);
#ifdef DLFUSE_TESTREF_MUTANT_MATMUL_BATCH_GRAD_NOT_SUMMED
  std::set<int64_t> seen_b;
#endif
  if (numel(batch_shape) > 0) do {
      const char* pa = A.base + dot(bi, A.batch) * es;
      const char* pb = B.base + dot(bi, B.batch) * es;
      const char* pg = G.base + dot(bi, G.batch) * es;
      const char* ps = saved.t ? S.base + dot(bi, S.batch) * es : nullptr;
      const int64_t ga_off = outs.grad_a ? dot(bi, ga.batch) : 0, gb_off = outs.grad_b ? dot(bi, gb.batch) : 0;
      const int64_t gbias_off = outs.grad_bias ? dot(bi, gbias.batch) : 0;
      const int64_t gres_off = outs.grad_residual ? dot(bi, gres.batch) : 0;
#ifdef DLFUSE_TESTREF_MUTANT_MATMUL_BATCH_GRAD_NOT_SUMMED
      // mutant: a gradient block met again (its operand broadcast over this batch dim) is
      // overwritten instead of summed
      if (outs.grad_b && !seen_b.insert(gb_off).second)
        for (int64_t i = 0; i < K * N; ++i) gb.sum[size_t(gb_off + i)] = Acc(0);
#endif
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          const Acc g = C::load(pg + (m * G.row + n * G.col) * es);
          const Acc dz = dz_of(saved, ps ? C::load(ps + (m * S.row + n * S.col) * es) : Acc(0), g);
          gbias.add(gbias_off, m, n, dz);
          gres.add(gres_off, m, n, dz);
          for (int64_t k = 0; k < K; ++k) {
            if (outs.grad_a) ga.at(ga_off, m, k) += dz * C::load(pb + (k * B.row + n * B.col) * es);
            if (outs.grad_b) gb.at(gb_off, k, n) += C::load(pa + (m * A.row + k * A.col) * es) * dz;
          }
        }
      }
    } while (next_index(bi, batch_shape));

  ga.template store<T>();
  gb.template store<T>();
  gbias.template store<T>();
  gres.template store<T>();
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t bad_activation(const dlfuse_kernel_args_t* args) {
  return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
              std::string(args->op) + ": attribute ACTIVATION is missing or not one of the 7 activations");
}

// Runs body(Tag<storage>, Tag<accumulator>) on the dtype of the call's first input.
template <class F>
dlfuse_status_t dispatch(const dlfuse_kernel_args_t* args, F&& body) {
  return with_dtype(args->inputs[0]->dtype, args->err, args->err_size, std::forward<F>(body));
}

}  // namespace

dlfuse_status_t matmul_add_relu(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 3, 1, true);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      Epilogue ep;
      ep.relu_op = true;
      return forward<T, Acc>(in[0], in[1], in[2], args->outputs[0], ep);
    });
  });
}

dlfuse_status_t matmul_add_relu_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 4, 3, false);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return backward<T, Acc>(in[0], in[1], in[2], Saved{in[3], DLFUSE_ACT_RELU, true},
                              BackwardOutputs{out[0], out[1], out[2], nullptr});
    });
  });
}

dlfuse_status_t matmul_add_activation(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 3, 2, true);
    if (st != DLFUSE_STATUS_OK) return st;
    Epilogue ep;
    if (!read_activation(args, &ep.act)) return bad_activation(args);
    ep.pre = args->outputs[1];
    const DLTensor* const* in = args->inputs;
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return forward<T, Acc>(in[0], in[1], in[2], args->outputs[0], ep);
    });
  });
}

dlfuse_status_t matmul_add_activation_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 5, 3, false, /* out, pre */ 0x18u);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    Saved saved;
    if (!read_activation(args, &saved.act)) return bad_activation(args);
    if (!in[3] == !in[4])
      return fail(
          args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
          std::string(args->op) + ": expected exactly one of 'out' and 'pre', got " + (in[3] ? "both" : "neither"));
    saved.from_out = in[3] != nullptr;
    saved.t = saved.from_out ? in[3] : in[4];
    if (saved.from_out && !derivative_from_out(saved.act))
      return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                  std::string(args->op) + ": 'out' given with an activation whose derivative needs 'pre'");
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return backward<T, Acc>(in[0], in[1], in[2], saved, BackwardOutputs{out[0], out[1], out[2], nullptr});
    });
  });
}

dlfuse_status_t matmul_add_residual(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 4, 1, true);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    Epilogue ep;
    ep.residual = in[3];
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return forward<T, Acc>(in[0], in[1], in[2], args->outputs[0], ep);
    });
  });
}

dlfuse_status_t matmul_add_residual_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const dlfuse_status_t st = check_call(args, 3, 4, false);
    if (st != DLFUSE_STATUS_OK) return st;
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    return dispatch(args, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return backward<T, Acc>(in[0], in[1], in[2], Saved{}, BackwardOutputs{out[0], out[1], out[2], out[3]});
    });
  });
}

}  // namespace testref

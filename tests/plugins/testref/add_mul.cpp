// add_mul_activation forward and backward: one pass over the broadcast output shape.
#include <algorithm>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "activation.h"
#include "strided.h"
#include "testref.h"

namespace testref {
namespace {

#if DLFUSE_TESTREF_INJECT_BUG == 4
constexpr int64_t kSharedElems = 1 << 16;
double g_shared[kSharedElems];
#endif

// multiplier * y, computed as written: 0 * Inf is NaN (docs/ops.md).
template <class C, class Acc>
Acc scaled_y(Acc mult, const char* y) {
#ifdef DLFUSE_TESTREF_MUTANT_MULT_ZERO_DROPPED
  if (mult == Acc(0)) return Acc(0);  // mutant: the term dropped
#endif
  return mult * C::load(y);
}

#if DLFUSE_TESTREF_INJECT_BUG == 3
// The injected bug, modelled on a real one: partial sums per chunk of output elements in
// malloc'ed scratch, each chunk zeroing its own partials when it starts. The chunk count is
// the one wanted, but the chunk size is rounded up, so the last chunks may get no element:
// their partials are never written, and the final sum reads whatever the scratch held.
template <class Acc>
struct Chunked {
  int64_t n = 0, want = 1, per = 1;
  Acc* part = nullptr;
  void init(int64_t elems, int64_t total) {
    n = elems;
    want = std::max<int64_t>(1, std::min<int64_t>(total, 23));
    per = (total + want - 1) / want;
    part = static_cast<Acc*>(std::malloc(size_t(want * n) * sizeof(Acc) + 1));
    if (!part) throw std::bad_alloc();
  }
  ~Chunked() { std::free(part); }
  void add(int64_t lin, int64_t e, Acc v) {
    const int64_t c = lin / per;
    if (lin % per == 0)
      for (int64_t i = 0; i < n; ++i) part[c * n + i] = Acc(0);
    part[c * n + e] += v;
  }
  Acc total(int64_t e) const {
    Acc s = Acc(0);
    for (int64_t c = 0; c < want; ++c) s += part[c * n + e];
    return s;
  }
};
#endif

// One reduction target: a float accumulator per element of the gradient's own shape.
template <class Storage, class Acc>
struct Reduced {
  DLTensor* t;
  std::vector<Acc> sum;
  std::vector<int64_t> index;  // compact strides of t's shape aligned to the output's rank
#if DLFUSE_TESTREF_INJECT_BUG == 3
  Chunked<Acc> chunks;
#endif

  Reduced(DLTensor* grad, int rank, int64_t total) : t(grad) {
    (void)total;
    if (!grad) return;
    sum.assign(size_t(numel(shape_of(grad))), Acc(0));
    index = aligned_strides(shape_of(grad), nullptr, rank);
#if DLFUSE_TESTREF_INJECT_BUG == 3
    chunks.init(int64_t(sum.size()), total);
#endif
  }
#if DLFUSE_TESTREF_INJECT_BUG == 3
  void add(const std::vector<int64_t>& idx, Acc v, int64_t lin) {
    if (t) chunks.add(lin, dot(idx, index), v);
  }
  void finish() {
    for (size_t e = 0; e < sum.size(); ++e) sum[e] = chunks.total(int64_t(e));
  }
#else
  void add(const std::vector<int64_t>& idx, Acc v, int64_t) {
    if (!t) return;
#ifdef DLFUSE_TESTREF_MUTANT_REDUCE_TO_WRONG_DIMS
    // mutant: dims of size 1 taken as "not reduced": only the first slice along them counts
    const int off = int(idx.size()) - t->ndim;
    for (int j = 0; j < t->ndim; ++j)
      if (t->shape[j] == 1 && off + j >= 0 && idx[size_t(off + j)] != 0) return;
#endif
    Acc& s = sum[size_t(dot(idx, index))];
    s += v;
#ifdef DLFUSE_TESTREF_MUTANT_ACCUM_IN_STORAGE_DTYPE
    s = storage_round<Storage, Acc>(s);  // mutant: the running sum kept in the storage dtype
#endif
  }
  void finish() {}
#endif
  template <class T>
  void store() {
    if (!t || sum.empty()) return;
    finish();
    const std::vector<int64_t> shape = shape_of(t);
    const std::vector<int64_t> strided = aligned_strides(t, t->ndim);
    std::vector<int64_t> idx(shape.size(), 0);
    int64_t linear = 0;
    do {
      Convert<T, Acc>::store(base_of(t) + dot(idx, strided) * int64_t(sizeof(T)), sum[size_t(linear++)]);
    } while (next_index(idx, shape));
  }
};

template <class T, class Acc>
dlfuse_status_t forward(const DLTensor* x, const DLTensor* y, const DLTensor* bias, DLTensor* out, int act, Acc mult) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = out->ndim;
  const std::vector<int64_t> shape = shape_of(out);
  const std::vector<int64_t> xs = aligned_strides(x, rank), ys = aligned_strides(y, rank);
  const std::vector<int64_t> bs = aligned_strides(bias, rank), os = aligned_strides(out, rank);
  if (numel(shape) == 0) return DLFUSE_STATUS_OK;
  std::vector<int64_t> idx(rank, 0);
#ifdef DLFUSE_TESTREF_MUTANT_IN_PLACE_ZERO_FIRST
  // mutant: the output cleared before the pass (harmless unless out is x)
  do {
    C::store(base_of(out) + dot(idx, os) * es, Acc(0));
  } while (next_index(idx, shape));
#endif
#if DLFUSE_TESTREF_INJECT_BUG == 4
  // The injected bug: pre-activations staged in one buffer shared by every call, no lock.
  if (numel(shape) <= kSharedElems) {
    int64_t i = 0;
    do {
      g_shared[i++] = double(C::load(base_of(x) + dot(idx, xs) * es) + C::load(base_of(bias) + dot(idx, bs) * es) +
                             mult * C::load(base_of(y) + dot(idx, ys) * es));
    } while (next_index(idx, shape));
    std::this_thread::yield();  // as a longer kernel would, give another call time to overwrite
    i = 0;
    do {
      C::store(base_of(out) + dot(idx, os) * es, activate(act, Acc(g_shared[i++])));
    } while (next_index(idx, shape));
    return DLFUSE_STATUS_OK;
  }
#endif
  // In place (out == x) is safe: each element of x is read right before its own slot is written.
  do {
    const Acc pre = C::load(base_of(x) + dot(idx, xs) * es) + C::load(base_of(bias) + dot(idx, bs) * es) +
                    scaled_y<C>(mult, base_of(y) + dot(idx, ys) * es);
    C::store(base_of(out) + dot(idx, os) * es, activate(act, pre));
  } while (next_index(idx, shape));
#ifdef DLFUSE_TESTREF_MUTANT_WRITE_PAST_EXTENT
  C::store(base_of(out) + (last_element(out) + 1) * es, Acc(0));  // mutant: one element too many
#endif
#ifdef DLFUSE_TESTREF_MUTANT_MUTATES_INPUT
  char* y0 = base_of(y);  // mutant: an input used as scratch afterwards
  C::store(y0, C::load(y0) + Acc(1));
#endif
  return DLFUSE_STATUS_OK;
}

// The forward's inputs x, y, bias (ABI 1.0), or its output `out` instead (ABI 1.1: then
// x, y and bias are NULL and the gradients' own shapes say what to sum over).
struct Saved {
  const DLTensor *x, *y, *bias, *out;
};

std::vector<int64_t> strides_or_none(const DLTensor* t, int rank) {
  return t ? aligned_strides(t, rank) : std::vector<int64_t>();
}

template <class T, class Acc>
dlfuse_status_t backward(const DLTensor* grad_out, const Saved& sv, DLTensor* grad_x, DLTensor* grad_y,
                         DLTensor* grad_bias, int act, Acc mult) {
  using C = Convert<T, Acc>;
  const int64_t es = sizeof(T);
  const int rank = grad_out->ndim;
  const std::vector<int64_t> shape = shape_of(grad_out);
  const std::vector<int64_t> gs = aligned_strides(grad_out, rank), xs = strides_or_none(sv.x, rank);
  const std::vector<int64_t> ys = strides_or_none(sv.y, rank), bs = strides_or_none(sv.bias, rank);
  const std::vector<int64_t> os = strides_or_none(sv.out, rank);
  const int64_t total = numel(shape);
  Reduced<T, Acc> gx(grad_x, rank, total), gy(grad_y, rank, total), gb(grad_bias, rank, total);
  std::vector<int64_t> idx(rank, 0);
  int64_t lin = 0;
  if (total > 0) do {
      const Acc g = C::load(base_of(grad_out) + dot(idx, gs) * es);
      Acc d_pre;
      if (sv.out) {
        d_pre = activate_grad_from_out(act, C::load(base_of(sv.out) + dot(idx, os) * es), g);
      } else {
        const Acc pre = C::load(base_of(sv.x) + dot(idx, xs) * es) + C::load(base_of(sv.bias) + dot(idx, bs) * es) +
                        scaled_y<C>(mult, base_of(sv.y) + dot(idx, ys) * es);
        d_pre = activate_grad(act, pre, g);
      }
#ifdef DLFUSE_TESTREF_MUTANT_NULL_OUTPUT_WRITES_GRAD_OUT
      // mutant: an absent grad_x still written, into grad_out's memory (same shape)
      if (!grad_x) C::store(base_of(grad_out) + dot(idx, gs) * es, d_pre);
#endif
      gx.add(idx, d_pre, lin);
#if DLFUSE_TESTREF_INJECT_BUG == 1
      gy.add(idx, d_pre, lin);  // the injected bug: the multiplier is forgotten
#else
      gy.add(idx, mult * d_pre, lin);
#endif
      gb.add(idx, d_pre, lin);
      ++lin;
    } while (next_index(idx, shape));
  gx.template store<T>();
  gy.template store<T>();
  gb.template store<T>();
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t bad_activation(const dlfuse_kernel_args_t* args) {
  return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
              "attribute ACTIVATION is missing or not one of the 7 activations");
}

}  // namespace

dlfuse_status_t add_mul_activation(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
#ifdef DLFUSE_TESTREF_MUTANT_STREAM_WRITTEN
    if (args->stream) *static_cast<unsigned char*>(args->stream) = 0;  // mutant: a CPU kernel using its stream
#endif
    const dlfuse_status_t st = check_call(args, 3, 1, true);
    if (st != DLFUSE_STATUS_OK) return st;
    int act = 0;
    if (!read_activation(args, &act)) return bad_activation(args);
    const double mult = read_multiplier(args);
    const DLTensor* const* in = args->inputs;
    return with_dtype(in[0]->dtype, args->err, args->err_size, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return forward<T, Acc>(in[0], in[1], in[2], args->outputs[0], act, Acc(mult));
    });
  });
}

// Declared with DLFUSE_KERNEL_TAKES_V1_1_INPUTS: five inputs (grad_out, x, y, bias, out),
// NULL where absent. Four is still accepted (the ABI 1.0 call of a host that bypasses the
// registry), and checked the same way.
dlfuse_status_t add_mul_activation_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return guarded(args->err, args->err_size, [&]() -> dlfuse_status_t {
    const int num_inputs = args->num_inputs == 4 ? 4 : 5;
    const dlfuse_status_t st = check_call(args, num_inputs, 3, false, /* x, y, bias, out */ 0x1eu);
    if (st != DLFUSE_STATUS_OK) return st;
    int act = 0;
    if (!read_activation(args, &act)) return bad_activation(args);
    const double mult = read_multiplier(args);
    const DLTensor* const* in = args->inputs;
    DLTensor* const* out = args->outputs;
    const Saved sv{in[1], in[2], in[3], num_inputs == 5 ? in[4] : nullptr};
    const bool forward_inputs = sv.x && sv.y && sv.bias;
    if (sv.out ? (sv.x || sv.y || sv.bias) : !forward_inputs)
      return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "add_mul_activation_backward: expected either x, y and bias, or out alone");
    if (sv.out && !derivative_from_out(act))
      return fail(args->err, args->err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                  "add_mul_activation_backward: 'out' given with an activation whose derivative needs x, y and bias");
    return with_dtype(in[0]->dtype, args->err, args->err_size, [&](auto t, auto acc) {
      using T = typename decltype(t)::type;
      using Acc = typename decltype(acc)::type;
      return backward<T, Acc>(in[0], sv, out[0], out[1], out[2], act, Acc(mult));
    });
  });
}

}  // namespace testref

// Ops of the test plugin's own, in the testref_ops build only (CMakeLists.txt): what adding
// an op takes, shown end to end. testref_scale_add's schema below is all a binding needs: the
// Python package calls it as dlfuse.testref_scale_add(x, y, scale=...) and its backward with
// the gradient parameters (needs, x_shape, y_shape) derived from that schema, with no change
// to any binding (bindings/python/tests/test_adding_an_op.py).
//
//   testref_scale_add(x, y; SCALE = 1.0) -> out = x + SCALE * y, NumPy broadcasting; out may be x
//   testref_scale_add_backward(grad_out; SCALE) -> grad_x = sum_to(grad_out, x's shape),
//                                                  grad_y = SCALE * sum_to(grad_out, y's shape)
//
// testref_axpby declares its attributes under the core keys' numbers with other types or
// ranges (an op's keys are its own, docs/abi.md): ALPHA, FLOAT64, under ACTIVATION's key 1;
// REPEAT, INT64, under MULTIPLIER's key 2; BETA, FLOAT64, under OUTPUT_ACTIVATION's key 4;
// MODE, an enum-like INT64 in [0, 2], under ALLOW_TF32's key 3 (an INT64 of [0, 1], default
// 0: MODE's default 2 is neither that default nor in that range, so a binding that takes it
// for a truth value, or its default or range from the key, gets another result). A binding
// that reads an attribute by a core key instead of by its schema gets the wrong values
// (bindings/python/tests/test_attr_keys.py, bindings/rust/dlfuse/tests/attr_keys.rs).
//
//   testref_axpby(x, y; ALPHA = 1.5, REPEAT = 3 in [-1000, 1000], BETA = 0.25, MODE = 2 in [0, 2])
//       -> out = SX * ALPHA * x + SY * REPEAT * y + BETA, NumPy broadcasting, in double, where
//          MODE 0: SX = +1, SY = -1;  MODE 1: SX = -1, SY = +1;  MODE 2: SX = SY = +1
//   testref_axpby_backward(grad_out; ALPHA, REPEAT, MODE)
//       -> grad_x = SX * ALPHA * sum_to(grad_out, x's shape),
//          grad_y = SY * REPEAT * sum_to(grad_out, y's shape)
#include "testref.h"

namespace testref {
namespace {

namespace kit = dlfuse::kit;
constexpr int32_t kAttrScale = 2001;  // this op's own attribute key

dlfuse_attr_schema_t scale_attr() {
  dlfuse_attr_schema_t a{};
  a.name = "SCALE";
  a.default_value.key = kAttrScale;
  a.default_value.type = DLFUSE_ATTR_FLOAT64;
  a.default_value.value.f64 = 1.0;
  return a;
}

const dlfuse_attr_schema_t kAttrs[] = {scale_attr()};
const dlfuse_arg_schema_t kFwdIn[] = {{"x", 0, 0, 0, 0, -1}, {"y", 0, 0, 0, 0, -1}};
const dlfuse_arg_schema_t kFwdOut[] = {{"out", 0, 0, DLFUSE_SHAPE_BROADCAST, 0x3u, 0}};
const dlfuse_arg_schema_t kBwdIn[] = {{"grad_out", 0, 0, 0, 0, -1}};
const dlfuse_arg_schema_t kBwdOut[] = {
    {"grad_x", DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE, 0, DLFUSE_SHAPE_LIKE, 0x1u, -1},
    {"grad_y", DLFUSE_ARG_OPTIONAL | DLFUSE_ARG_REDUCIBLE, 0, DLFUSE_SHAPE_LIKE, 0x1u, -1}};

// The offset of element `flat` (row-major) of `shape` in a tensor with `strides` (0 where
// it is broadcast).
int64_t offset_of(const kit::Dims& strides, const kit::Dims& shape, int64_t flat) {
  int64_t off = 0;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    const int64_t n = shape[size_t(d)];
    off += (flat % n) * strides[size_t(d)];
    flat /= n;
  }
  return off;
}

template <class T>
void forward(const dlfuse_kernel_args_t* args, double scale) {
  const kit::View x(args->inputs[0]), y(args->inputs[1]), out(args->outputs[0]);
  const int r = out.rank();
  const kit::Dims xs = x.aligned_strides(r), ys = y.aligned_strides(r);
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {  // element i reads only element i of x when out is x
    const double v =
        double(x.base<T>()[offset_of(xs, out.shape, i)]) + scale * double(y.base<T>()[offset_of(ys, out.shape, i)]);
    out.base<T>()[offset_of(out.strides, out.shape, i)] = T(v);
  }
}

// grad (of grad_out's shape) summed into `g` (any shape broadcasting to it), times scale.
template <class T>
void reduce_into(const kit::View& grad, const kit::View& g, double scale) {
  const int r = grad.rank();
  const kit::Dims gs = g.aligned_strides(r);
  const int64_t n = g.numel();
  for (int64_t i = 0; i < n; ++i) g.base<T>()[offset_of(g.strides, g.shape, i)] = T(0);
  for (int64_t i = 0; i < grad.numel(); ++i) {
    T& dst = g.base<T>()[offset_of(gs, grad.shape, i)];
    dst = T(double(dst) + scale * double(grad.base<T>()[offset_of(grad.strides, grad.shape, i)]));
  }
}

template <class T>
void backward(const dlfuse_kernel_args_t* args, double scale) {
  const kit::View grad(args->inputs[0]);
  if (args->outputs[0]) reduce_into<T>(grad, kit::View(args->outputs[0]), 1.0);
  if (args->outputs[1]) reduce_into<T>(grad, kit::View(args->outputs[1]), scale);
}

template <template <class> class Run>
dlfuse_status_t run(const dlfuse_kernel_args_t* args, int32_t num_inputs, int32_t num_outputs, bool first_out) {
  return kit::guarded(kName, args, [&] {
    kit::check_call(args, num_inputs, num_outputs, first_out, kDLCPU);
    const double scale = kit::attr_float(args, kAttrScale, 1.0);
    if (args->inputs[0]->dtype.bits == 64)
      Run<double>{}(args, scale);
    else
      Run<float>{}(args, scale);
  });
}

template <class T>
struct Fwd {
  void operator()(const dlfuse_kernel_args_t* a, double s) { forward<T>(a, s); }
};
template <class T>
struct Bwd {
  void operator()(const dlfuse_kernel_args_t* a, double s) { backward<T>(a, s); }
};

// testref_axpby's attributes: keys that the core ops use for attributes of other types or ranges.
constexpr int32_t kKeyAlpha = 1, kKeyRepeat = 2, kKeyMode = 3, kKeyBeta = 4;
constexpr double kAlpha = 1.5, kBeta = 0.25;
constexpr int64_t kRepeat = 3, kMode = 2;

dlfuse_attr_schema_t float_attr(const char* name, int32_t key, double def) {
  dlfuse_attr_schema_t a{};
  a.name = name;
  a.default_value.key = key;
  a.default_value.type = DLFUSE_ATTR_FLOAT64;
  a.default_value.value.f64 = def;
  return a;
}

dlfuse_attr_schema_t int_attr(const char* name, int32_t key, int64_t def, int64_t lo, int64_t hi) {
  dlfuse_attr_schema_t a{};
  a.name = name;
  a.default_value.key = key;
  a.default_value.type = DLFUSE_ATTR_INT64;
  a.default_value.value.i64 = def;
  a.min_value = lo;
  a.max_value = hi;
  return a;
}

// The forward takes all four; the backward ALPHA, REPEAT and MODE (BETA has no gradient).
const dlfuse_attr_schema_t kAxpbyAttrs[] = {
    float_attr("ALPHA", kKeyAlpha, kAlpha), int_attr("REPEAT", kKeyRepeat, kRepeat, -1000, 1000),
    float_attr("BETA", kKeyBeta, kBeta), int_attr("MODE", kKeyMode, kMode, 0, 2)};
const dlfuse_attr_schema_t kAxpbyBackwardAttrs[] = {kAxpbyAttrs[0], kAxpbyAttrs[1], kAxpbyAttrs[3]};

// An attribute of `args` by its schema entry: absent, its default; of another type, or an
// INT64 outside its range (a host calling the kernel directly: the registry refuses both
// first), an error naming it by its schema name, not by a core key's.
const dlfuse_attr_t& attr_of(const dlfuse_kernel_args_t* args, const dlfuse_attr_schema_t& s) {
  const dlfuse_attr_t* a = dlfuse_find_attr(args, s.default_value.key);
  if (!a) return s.default_value;
  const bool is_int = s.default_value.type == DLFUSE_ATTR_INT64;
  if (a->type != s.default_value.type)
    kit::invalid(s.name, is_int ? "type INT64" : "type FLOAT64", "type " + std::to_string(a->type));
  if (is_int && (a->value.i64 < s.min_value || a->value.i64 > s.max_value))
    kit::invalid(s.name, std::to_string(s.min_value) + ".." + std::to_string(s.max_value),
                 std::to_string(a->value.i64));
  return *a;
}

// The signed factors of x and y: SX * ALPHA and SY * REPEAT (exact: a sign and an integer).
struct Coeffs {
  double x, y;
};
Coeffs coeffs(const dlfuse_kernel_args_t* args) {
  const double alpha = attr_of(args, kAxpbyAttrs[0]).value.f64;
  const double repeat = double(attr_of(args, kAxpbyAttrs[1]).value.i64);
  const int64_t mode = attr_of(args, kAxpbyAttrs[3]).value.i64;
  return {mode == 1 ? -alpha : alpha, mode == 0 ? -repeat : repeat};
}

template <class T>
void axpby_forward(const dlfuse_kernel_args_t* args) {
  const Coeffs c = coeffs(args);
  const double beta = attr_of(args, kAxpbyAttrs[2]).value.f64;
  const kit::View x(args->inputs[0]), y(args->inputs[1]), out(args->outputs[0]);
  const int r = out.rank();
  const kit::Dims xs = x.aligned_strides(r), ys = y.aligned_strides(r);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double v = c.x * double(x.base<T>()[offset_of(xs, out.shape, i)]) +
                     c.y * double(y.base<T>()[offset_of(ys, out.shape, i)]) + beta;
    out.base<T>()[offset_of(out.strides, out.shape, i)] = T(v);
  }
}

template <class T>
void axpby_backward(const dlfuse_kernel_args_t* args) {
  const Coeffs c = coeffs(args);
  const kit::View grad(args->inputs[0]);
  if (args->outputs[0]) reduce_into<T>(grad, kit::View(args->outputs[0]), c.x);
  if (args->outputs[1]) reduce_into<T>(grad, kit::View(args->outputs[1]), c.y);
}

}  // namespace

const dlfuse_op_schema_t kScaleAddSchema = {
    sizeof(dlfuse_op_schema_t), "testref_scale_add", 2, 2, kFwdIn, 1, kFwdOut, 1, kAttrs, nullptr, -1};
const dlfuse_op_schema_t kScaleAddBackwardSchema = {
    sizeof(dlfuse_op_schema_t), "testref_scale_add_backward", 2, 1, kBwdIn, 2, kBwdOut, 1, kAttrs, nullptr, -1};

dlfuse_status_t scale_add(void*, void*, const dlfuse_kernel_args_t* args) { return run<Fwd>(args, 2, 1, true); }
dlfuse_status_t scale_add_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return run<Bwd>(args, 1, 2, false);
}

const dlfuse_op_schema_t kAxpbySchema = {
    sizeof(dlfuse_op_schema_t), "testref_axpby", 2, 2, kFwdIn, 1, kFwdOut, 4, kAxpbyAttrs, nullptr, -1};
const dlfuse_op_schema_t kAxpbyBackwardSchema = {sizeof(dlfuse_op_schema_t),
                                                 "testref_axpby_backward",
                                                 2,
                                                 1,
                                                 kBwdIn,
                                                 2,
                                                 kBwdOut,
                                                 3,
                                                 kAxpbyBackwardAttrs,
                                                 nullptr,
                                                 -1};

dlfuse_status_t axpby(void*, void*, const dlfuse_kernel_args_t* args) {
  return kit::guarded(kName, args, [&] {
    kit::check_call(args, 2, 1, true, kDLCPU);
    if (args->inputs[0]->dtype.bits == 64)
      axpby_forward<double>(args);
    else
      axpby_forward<float>(args);
  });
}

dlfuse_status_t axpby_backward(void*, void*, const dlfuse_kernel_args_t* args) {
  return kit::guarded(kName, args, [&] {
    kit::check_call(args, 1, 2, false, kDLCPU);
    if (args->inputs[0]->dtype.bits == 64)
      axpby_backward<double>(args);
    else
      axpby_backward<float>(args);
  });
}

}  // namespace testref

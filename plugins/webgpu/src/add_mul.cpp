// add_mul_activation forward (one pass, in place allowed) and backward: one pass over the
// inputs that writes the gradients of the output's shape and, when some gradient is
// broadcast, d_pre into a float scratch that reductions sum. The backward reads d_pre from
// x, y and bias (ABI 1.0) or from the forward's out (ABI 1.1, the fifth input): the same
// kernel, out passed in x's place.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "dlfuse_webgpu_kernels.h"
#include "elementwise_plan.h"
#include "ops.h"

namespace dlfuse_webgpu {
namespace {

// vec4s per invocation of the vec4 forward (kernels/pointwise4.wgsl): 2 was the fastest
// on an H200 (docs/webgpu.md); DLFUSE_WEBGPU_PW_VEC4=1..8 overrides it, for tuning.
// Read once per process, like the GEMM tile: not an environment lookup per call.
int forward4_items() {
  static const int items = [] {
    const char* e = std::getenv("DLFUSE_WEBGPU_PW_VEC4");
    const int v = e ? std::atoi(e) : 0;
    return v >= 1 && v <= 8 ? v : 2;
  }();
  return items;
}

// The forward as vec4s (kernels/pointwise4.wgsl) where the block allows it: n2 a multiple
// of 4, out and the inputs that vary along dim 2 contiguous there with rows at multiples of
// 4 elements, the other inputs broadcast along it. False: not taken.
bool forward4(Launch& l, const Call& c, const WGPUBuffer bufs[4], const std::vector<ClView>& v, int64_t n0, int64_t n1,
              int64_t n2, int act, float mult) {
  const auto aligned = [](const ClView& w) { return w.s2 == 1 && w.off % 4 == 0 && w.s0 % 4 == 0 && w.s1 % 4 == 0; };
  if (n2 % 4 != 0 || !aligned(v[3])) return false;
  int modes = 0;
  for (int i = 0; i < 3; ++i) {
    if (aligned(v[size_t(i)]))
      modes |= 1 << i;
    else if (v[size_t(i)].s2 != 0)
      return false;
  }
  const int items = forward4_items();
  const int64_t per_group = 256 * int64_t(items);
  const int64_t groups = (n0 * n1 * (n2 / 4) + per_group - 1) / per_group;
  const int64_t cap = l.dev.limits.maxComputeWorkgroupsPerDimension;
  const int64_t gx = std::min(groups, cap), gy = (groups + gx - 1) / gx;
  if (gy > cap) return false;
  std::vector<int32_t> prm = {int32_t(n0), int32_t(n1), int32_t(n2 / 4), act, float_bits(mult), modes};
  for (int i = 0; i < 4; ++i) {
    const ClView& w = v[size_t(i)];
    push_view(prm, i == 3 || (modes >> i & 1) ? ClView{w.off / 4, w.s0 / 4, w.s1 / 4, 1} : w);
  }
  const std::string items_const = "const V4: i32 = " + std::to_string(items) + ";\n";
  const Pipeline& p = c.dev->pipeline("pw4:amx_fwd4:" + std::to_string(items), c.prec, items_const + kPointwise4,
                                      "amx_fwd4", 9, Params::kUniform);
  // vec4 views at bindings 1..4, the same buffers as scalars at 5..7 (broadcast inputs).
  l.dispatch(
      p,
      {(modes & 1) ? bufs[0] : nullptr, (modes & 2) ? bufs[1] : nullptr, (modes & 4) ? bufs[2] : nullptr, bufs[3],
       (modes & 1) ? nullptr : bufs[0], (modes & 2) ? nullptr : bufs[1], (modes & 4) ? nullptr : bufs[2], nullptr},
      prm, uint32_t(gx), uint32_t(gy), 1);
  return true;
}

}  // namespace

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(add_mul_activation),
                          kit::arg_names::add_mul_activation);
    const DLTensor *x = args->inputs[0], *y = args->inputs[1], *b = args->inputs[2];
    const DLTensor* out = dlfuse_plugin::required_out(args, 0, "out");
    const int act = kit::activation(args);
    const float mult = float(kit::multiplier(args));
    const int rank = out->ndim;
    Launch l(*c.dev);
    const Pipeline& p = pointwise(c, "amx_fwd");
    const WGPUBuffer bufs[4] = {buf_of(x), buf_of(y), buf_of(b), buf_of(out)};
    for_each_block(
        shape_of(out), {aligned_strides(x, rank), aligned_strides(y, rank), aligned_strides(b, rank), strides_of(out)},
        {elem_offset(x), elem_offset(y), elem_offset(b), elem_offset(out)},
        [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
          if (!forward4(l, c, bufs, v, n0, n1, n2, act, mult)) {
            std::vector<int32_t> prm = {0, 0, 0, act, float_bits(mult)};
            for (const ClView& w : v) push_view(prm, w);
            pointwise_dispatch(l, p, {bufs[0], bufs[1], bufs[2], bufs[3], nullptr, nullptr, nullptr, nullptr}, prm, n0,
                               n1, n2);
          }
          return true;
        });
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    dlfuse_plugin::AddMulBackward f = dlfuse_plugin::add_mul_backward_form(args);
    Call c =
        prepare_call(static_cast<State*>(state), args, f.num_inputs, DLFUSE_NUM_OUTPUTS(add_mul_activation_backward),
                     f.names, DLFUSE_OPTIONAL_INPUTS(add_mul_activation_backward));
    dlfuse_plugin::read_add_mul_backward(args, f);
    // the kernel reads d_pre's source through x (y and bias unused in the out form)
    const DLTensor *g = f.g, *x = f.src, *y = f.y, *b = f.b, *out = f.out;
    const DLTensor* const* grads = f.grads;
    const int act = f.act;
    const float mult = f.mult;
    const Dims oshape = shape_of(g);
    const int rank = int(oshape.size());
    const int64_t n = numel(oshape);

    const dlfuse_plugin::GradRoute route = dlfuse_plugin::route_grads(grads, oshape);
    const int direct = route.direct;
    const bool* reduce = route.reduce;
    const bool need_tmp = route.need_tmp();
    if (!direct && !need_tmp) return DLFUSE_STATUS_OK;

    std::vector<Dims> strides;
    std::vector<int64_t> offs;
    dlfuse_plugin::input_views(g, x, y, b, oshape, strides, offs);
    const Dims none(size_t(rank), 0);  // y and bias in the out form: never read
    WGPUBuffer gb[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i) {
      const bool written = (direct >> i) & 1;
      // Right-aligned to the output's rank: a gradient written directly may lack the
      // output's leading size-1 dims (bias [M, N] under out [1, M, N]), and every view
      // for_each_block walks must have one stride per output dim.
      strides.push_back(written ? aligned_strides(grads[i], rank) : none);
      offs.push_back(written ? elem_offset(grads[i]) : 0);
      if (written) gb[i] = buf_of(grads[i]);
    }
    const Dims ts = compact_strides(oshape);
    strides.push_back(need_tmp ? ts : none);
    offs.push_back(0);

    Launch l(*c.dev);
    WGPUBuffer tmp = need_tmp ? l.scratch(uint64_t(n) * sizeof(float)) : nullptr;
    const Pipeline& p = pointwise(c, "amx_bwd");
    // An empty output still reduces to zeros (for_each_block runs nothing then).
    for_each_block(oshape, strides, offs, [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
      std::vector<int32_t> prm = {int32_t(n0),      int32_t(n1), int32_t(n2), act,
                                  float_bits(mult), direct,      out ? 1 : 0, need_tmp ? 1 : 0};
      for (const ClView& w : v) push_view(prm, w);
      pointwise_dispatch(
          l, p, {buf_of(g), buf_of(x), y ? buf_of(y) : nullptr, b ? buf_of(b) : nullptr, gb[0], gb[1], gb[2], tmp}, prm,
          n0, n1, n2);
      return true;
    });
    for (int i = 0; i < 3; ++i)
      if (reduce[i]) reduce_into(l, c, oshape, tmp, 0, ts, true, grads[i], i == 1 ? mult : 1.0f);
    l.submit();
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_webgpu

// add_mul_activation forward (one pass, in place allowed) and backward: one pass over the
// inputs that writes the gradients of the output's shape and, when every broadcast gradient
// is a sum over rows (bias [N]), also their per-chunk column sums (a tiny second kernel
// adds the chunks); other broadcasts are reduced from a float scratch of d_pre. The
// backward reads d_pre from x, y and bias (ABI 1.0) or from the forward's out (ABI 1.1,
// the fifth input): the same kernels, out passed in x's place.
#include <algorithm>

#include "elementwise_plan.h"
#include "ops.h"

namespace dlfuse_opencl {
namespace {

void read_attrs(const dlfuse_kernel_args_t* args, cl_int* act, cl_float* mult) {
  *act = cl_int(kit::activation(args));
  *mult = cl_float(kit::multiplier(args));
}

}  // namespace

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return guarded(args ? args->err : nullptr, args ? args->err_size : 0, [&] {
    Call c = prepare_call(static_cast<State*>(state), args, DLFUSE_ARITY(add_mul_activation),
                          kit::arg_names::add_mul_activation);
    const DLTensor *x = args->inputs[0], *y = args->inputs[1], *b = args->inputs[2];
    const DLTensor* out = dlfuse_plugin::required_out(args, 0, "out");
    cl_int act;
    cl_float mult;
    read_attrs(args, &act, &mult);
    const int rank = out->ndim;
    KernelRef k(c.dev->kernel(c.prec, "amx_fwd"));
    for_each_block(shape_of(out),
                   {aligned_strides(x, rank), aligned_strides(y, rank), aligned_strides(b, rank), strides_of(out)},
                   {elem_offset(x), elem_offset(y), elem_offset(b), elem_offset(out)},
                   [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
                     set_args(k.k, mem_of(x), v[0], mem_of(y), v[1], mem_of(b), v[2], mem_of(out), v[3], cl_long(n0),
                              cl_long(n1), cl_long(n2), mult, act);
                     size_t global[3] = {size_t(n2), size_t(n1), size_t(n0)}, local[3];
                     pointwise_local(*c.dev, n2, n1, local);
                     enqueue(c.queue, k.k, global, local, "amx_fwd");
                     return true;
                   });
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
    // the kernels read d_pre's source through x (y and bias unused in the out form)
    const DLTensor *g = f.g, *x = f.src, *y = f.y, *b = f.b, *out = f.out;
    const DLTensor* const* grads = f.grads;
    const cl_int act = f.act;
    const cl_float mult = f.mult;
    const cl_int from_out = out ? 1 : 0;
    const Dims oshape = shape_of(g);
    const int rank = int(oshape.size());
    const int64_t n = numel(oshape);

    const dlfuse_plugin::GradRoute route = dlfuse_plugin::route_grads(grads, oshape);
    const cl_int direct = route.direct;
    const bool* reduce = route.reduce;
    const bool need_tmp = route.need_tmp();
    if (!direct && !need_tmp) return DLFUSE_STATUS_OK;

    std::vector<Dims> strides;
    std::vector<int64_t> offs;
    dlfuse_plugin::input_views(g, x, y, b, oshape, strides, offs);
    cl_mem ym = y ? mem_of(y) : nullptr, bm = b ? mem_of(b) : nullptr;
    cl_mem gm[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i) {
      const bool present = grads[i] && numel(shape_of(grads[i])) > 0;
      // A reduced gradient's strides are 0 along the dims it is summed over.
      strides.push_back(present ? aligned_strides(grads[i], rank) : Dims(size_t(rank), 0));
      offs.push_back(present ? elem_offset(grads[i]) : 0);
      if ((direct >> i) & 1) gm[i] = mem_of(grads[i]);
    }

    // One pass when the output collapses to [rows, columns] and every reduced gradient is
    // a sum over the rows (kept along the columns).
    std::vector<ClView> v2;
    int64_t bn0 = 0, bn1 = 0, bn2 = 0;
    int blocks = 0;
    for_each_block(oshape, strides, offs, [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
      v2 = v;
      bn0 = n0, bn1 = n1, bn2 = n2;
      return ++blocks < 2;
    });
    bool rows = n > 0 && blocks == 1 && bn0 == 1;
    for (int i = 0; i < 3 && rows; ++i)
      if (reduce[i]) rows = v2[size_t(4 + i)].s1 == 0 && v2[size_t(4 + i)].s2 != 0;
    if (rows) {
      const int64_t target = c.dev->cpu_kernels ? 4096 : 65536;  // work-items wanted
      // rpi rounds up, so the chunk count is recomputed from it: every chunk the reduction
      // reads then has at least one row and writes its partial sum (scratch is not zeroed).
      const int64_t want = std::max<int64_t>(1, std::min<int64_t>(bn1, target / bn2));
      const int64_t rpi = (bn1 + want - 1) / want;
      const int64_t chunks = (bn1 + rpi - 1) / rpi;
      MemRef part;
      if (need_tmp) part.m = scratch(*c.dev, size_t(chunks * bn2) * sizeof(float));
      KernelRef k(c.dev->kernel(c.prec, "amx_bwd_rows"));
      set_args(k.k, mem_of(g), v2[0], mem_of(x), v2[1], ym, v2[2], bm, v2[3], gm[0], v2[4], gm[1], v2[5], gm[2], v2[6],
               part.m, direct, cl_long(bn1), cl_long(bn2), cl_long(rpi), mult, act, from_out);
      size_t global[3] = {size_t(bn2), size_t(chunks), 1}, local[3];
      pointwise_local(*c.dev, bn2, chunks, local);
      enqueue(c.queue, k.k, global, local, "amx_bwd_rows");
      if (need_tmp) {
        KernelRef r(c.dev->kernel(c.prec, "reduce_f"));
        ClReduced red{};
        red.nr = 1;
        red.n[0] = chunks;
        red.s[0] = bn2;
        for (int i = 0; i < 3; ++i) {
          if (!reduce[i]) continue;
          const ClView& vt = v2[size_t(4 + i)];
          set_args(r.k, part.m, ClView{0, 0, 0, 1}, red, mem_of(grads[i]), ClView{vt.off, 0, 0, vt.s2}, cl_long(1),
                   cl_long(1), cl_long(bn2), cl_float(i == 1 ? mult : 1.0f));
          size_t rg[3] = {size_t(bn2), 1, 1}, rl[3];
          pointwise_local(*c.dev, bn2, 1, rl);
          enqueue(c.queue, r.k, rg, rl, "reduce_f");
        }
      }
      return DLFUSE_STATUS_OK;
    }

    // General case: d_pre into a float scratch of the output's shape, then reductions.
    const Dims ts = compact_strides(oshape);
    MemRef tmp;
    if (need_tmp) tmp.m = scratch(*c.dev, size_t(n) * sizeof(float));
    if (n > 0) {
      strides.push_back(need_tmp ? ts : Dims(size_t(rank), 0));
      offs.push_back(0);
      KernelRef k(c.dev->kernel(c.prec, "amx_bwd"));
      for_each_block(oshape, strides, offs, [&](const std::vector<ClView>& v, int64_t n0, int64_t n1, int64_t n2) {
        set_args(k.k, mem_of(g), v[0], mem_of(x), v[1], ym, v[2], bm, v[3], gm[0], v[4], gm[1], v[5], gm[2], v[6],
                 tmp.m, v[7], direct, cl_long(n0), cl_long(n1), cl_long(n2), mult, act, from_out);
        size_t global[3] = {size_t(n2), size_t(n1), size_t(n0)}, local[3];
        pointwise_local(*c.dev, n2, n1, local);
        enqueue(c.queue, k.k, global, local, "amx_bwd");
        return true;
      });
    }
    for (int i = 0; i < 3; ++i)
      if (reduce[i]) reduce_into(c, oshape, tmp.m, 0, ts, true, grads[i], i == 1 ? mult : 1.0f);
    return DLFUSE_STATUS_OK;
  });
}

}  // namespace dlfuse_opencl

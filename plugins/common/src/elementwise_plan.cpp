#include "elementwise_plan.h"

namespace dlfuse_plugin {

GradRoute route_grads(const DLTensor* const grads[3], const Dims& oshape) {
  const int rank = int(oshape.size());
  GradRoute r;
  for (int i = 0; i < 3; ++i) {
    const DLTensor* t = grads[i];
    if (!t || numel(shape_of(t)) == 0) continue;
    if (aligned_shape(t, rank) == oshape)
      r.direct |= 1 << i;
    else
      r.reduce[i] = true;
  }
  return r;
}

void input_views(const DLTensor* g, const DLTensor* x, const DLTensor* y, const DLTensor* b, const Dims& oshape,
                 std::vector<Dims>& strides, std::vector<int64_t>& offs) {
  const int rank = int(oshape.size());
  const Dims none(size_t(rank), 0);
  strides = {strides_of(g), aligned_strides(x, rank), y ? aligned_strides(y, rank) : none,
             b ? aligned_strides(b, rank) : none};
  offs = {elem_offset(g), elem_offset(x), y ? elem_offset(y) : 0, b ? elem_offset(b) : 0};
}

}  // namespace dlfuse_plugin

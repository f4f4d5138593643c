// add_mul_activation's one-pass paths on AVX-512 CPUs (add_mul_fast.cpp): compact
// tensors of any of the plugin's dtypes, read and written in that dtype. Each returns
// false, having written nothing, where the CPU, the layout or the activation is not one
// it takes; the caller then runs its general path.
#ifndef DLFUSE_ONEDNN_ADD_MUL_FAST_H_
#define DLFUSE_ONEDNN_ADD_MUL_FAST_H_

#include "common.h"

namespace dlfuse_onednn {

// out = act(x + bias + mult * y) for IDENTITY and RELU.
bool add_mul_forward_fast(const DLTensor* x, const DLTensor* y, const DLTensor* bias, DLTensor* out, int act,
                          float mult);
// grads[0..2] = grad_x, grad_y, grad_bias (each may be NULL) from g and either out_in
// (IDENTITY, RELU, SIGMOID, TANH) or x, y, bias (out_in NULL; IDENTITY, RELU).
bool add_mul_backward_fast(const DLTensor* g, const DLTensor* x, const DLTensor* y, const DLTensor* bias,
                           const DLTensor* out_in, DLTensor* const* grads, int act, float mult);

}  // namespace dlfuse_onednn

#endif

// The rules of mlp and mlp_backward (dlfuse/ops.def, docs/ops.md): which layers a call has,
// the shapes its tensors must have, and the output shapes inference gives.
#pragma once
#include "op_spec.hpp"

namespace dlfuse {

dlfuse_status_t check_mlp(const char* op, const TensorView* in, const TensorView* out);
dlfuse_status_t check_mlp_backward(const char* op, const TensorView* in, const TensorView* out);
dlfuse_status_t form_mlp_backward(const OpSpec& spec, const char* op, const TensorView* in, const TensorView* out,
                                  const dlfuse_attr_t* canonical);

// The shape callbacks of their schemas' CALLBACK outputs (dlfuse_shape_fn_t).
dlfuse_status_t mlp_output_shape(const DLTensor* const* inputs, int32_t num_inputs, const dlfuse_attr_t* attrs,
                                 int32_t num_attrs, int32_t output, int32_t* ndim, int64_t* shape, char* err,
                                 size_t err_size);
dlfuse_status_t mlp_backward_output_shape(const DLTensor* const* inputs, int32_t num_inputs, const dlfuse_attr_t* attrs,
                                          int32_t num_attrs, int32_t output, int32_t* ndim, int64_t* shape, char* err,
                                          size_t err_size);

}  // namespace dlfuse

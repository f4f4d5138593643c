// mlp and mlp_backward (ABI 1.2) by composition for the OpenCL and WebGPU plugins: one call
// of the plugin's own matmul_add_activation(_backward) per layer (mlp_layers.hpp's mlp_forward,
// mlp_backward), what passes between layers that the caller does not keep in buffers of
// the plugin's own alloc().
#ifndef DLFUSE_PLUGIN_COMMON_MLP_COMPOSED_H_
#define DLFUSE_PLUGIN_COMMON_MLP_COMPOSED_H_

#include "mlp_layers.hpp"

namespace dlfuse_plugin {

// What the kernels need of the plugin: its layer kernels and device services. The kernel
// table passes it as kernel_data; it must live as long as the plugin (a constant).
struct Composition {
  LayerKernels layers;
  dlfuse_status_t (*alloc)(void* state, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size);
  dlfuse_status_t (*release)(void* state, int32_t device_id, void* ptr, char* err, size_t err_size);
  const char* plugin;  // the prefix of its messages
};

dlfuse_status_t mlp_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t mlp_backward_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept;

}  // namespace dlfuse_plugin

#endif

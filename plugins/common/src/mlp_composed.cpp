#include "mlp_composed.h"

#include <string>
#include <vector>

namespace dlfuse_plugin {
namespace kit = dlfuse::kit;

dlfuse_status_t mlp_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept {
  const auto* c = static_cast<const Composition*>(composition);
  return kit::guarded(c->plugin, args, [&] { return kit::mlp_forward(state, c->layers, args); });
}

dlfuse_status_t mlp_backward_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept {
  const auto* c = static_cast<const Composition*>(composition);
  std::vector<void*> buffers;
  int32_t device_id = 0;
  const dlfuse_status_t s = kit::guarded(c->plugin, args, [&] {
    device_id = args->inputs[0]->device.device_id;
    return kit::mlp_backward(state, c->layers, args, [&](size_t bytes) {
      void* p = nullptr;
      char err[256] = "";
      buffers.reserve(buffers.size() + 1);
      if (auto st = c->alloc(state, device_id, bytes, &p, err, sizeof err)) throw kit::Error(st, err);
      buffers.push_back(p);
      return p;
    });
  });
  for (void* p : buffers) c->release(state, device_id, p, nullptr, 0);
  return s;
}

}  // namespace dlfuse_plugin

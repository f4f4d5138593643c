#include "mlp_composed.h"

#include <string>
#include <vector>

namespace dlfuse_plugin {
namespace kit = dlfuse::kit;
namespace {

// Buffers of the plugin's alloc(), released when the call has enqueued everything: both
// devices keep a released buffer alive until the queued work that uses it is done.
class Scratch {
 public:
  Scratch(const Composition& c, void* state, int32_t device_id) : c_(c), state_(state), device_id_(device_id) {}
  ~Scratch() {
    for (void* p : buffers_) c_.release(state_, device_id_, p, nullptr, 0);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* operator()(size_t bytes) {
    void* p = nullptr;
    char err[256] = "";
    buffers_.reserve(buffers_.size() + 1);
    if (auto st = c_.alloc(state_, device_id_, bytes, &p, err, sizeof err)) throw kit::Error(st, err);
    buffers_.push_back(p);
    return p;
  }

 private:
  const Composition& c_;
  void* state_;
  int32_t device_id_;
  std::vector<void*> buffers_;
};

}  // namespace

dlfuse_status_t mlp_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept {
  const auto* c = static_cast<const Composition*>(composition);
  return kit::guarded(c->plugin, args, [&] {
    Scratch scratch(*c, state, args->inputs[0]->device.device_id);
    return dlfuse_plugin::mlp_forward(state, c->layers, args, scratch);
  });
}

dlfuse_status_t mlp_backward_composed(void* state, void* composition, const dlfuse_kernel_args_t* args) noexcept {
  const auto* c = static_cast<const Composition*>(composition);
  return kit::guarded(c->plugin, args, [&] {
    Scratch scratch(*c, state, args->inputs[0]->device.device_id);
    return dlfuse_plugin::mlp_backward(state, c->layers, args, scratch);
  });
}

}  // namespace dlfuse_plugin

// dlfuse's C++ PyTorch operators (libdlfuse_torch.so): the library's entry points. Every
// operator torch.ops.dlfuse.<op> is derived from its op's schema (torch_derived.cpp) when
// dlfuse.torch first uses it, so that an eager call and its backward run in torch's
// dispatcher and autograd engine with no Python on the way (docs/python.md, "The C++
// operators"). The fake (meta) kernels are dlfuse/torch.py's.
//
// The library is built against one torch version (its C++ ABI is not stable) and loaded
// only by that version; it calls libdlfuse through the entry points of the library the
// Python package loaded (dlfuse_torch_ops_init), never through a second copy.
#include <dlfcn.h>

#include "torch_lib.hpp"

using namespace dlfuse_torch;

// Called once by dlfuse.torch: the libdlfuse the package loaded (dlopen'ed again by path,
// which shares its handle) and the registry to dispatch through. 0, or -1 with *why set.
extern "C" __attribute__((visibility("default"))) int dlfuse_torch_ops_init(const char* path, void* registry,
                                                                            const char** why) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h || !registry) {
    if (why) *why = h ? "no registry" : dlerror();
    return -1;
  }
  Lib L;
  bind(h, "dlfuse_last_error", L.last_error);
  bind(h, "dlfuse_op_get", L.op_get);
  bind(h, "dlfuse_op_call", L.op_call);
  bind(h, "dlfuse_registry_op_count", L.registry_op_count);
  bind(h, "dlfuse_registry_op_schema", L.registry_op_schema);
  bind(h, "dlfuse_op_infer_outputs", L.op_infer_outputs);
  bind(h, "dlfuse_op_backward_plan", L.op_backward_plan);
  if (!L.last_error || !L.op_get || !L.op_call) {
    if (why) *why = "not libdlfuse: a 1.0 entry point is missing";
    return -1;
  }
  L.reg = static_cast<dlfuse_registry_t>(registry);
  g_lib = L;
  return 0;
}

// The torch version this library was compiled against; dlfuse.torch loads it only into
// that version.
extern "C" __attribute__((visibility("default"))) const char* dlfuse_torch_ops_torch_version(void) {
  return DLFUSE_TORCH_VERSION;
}

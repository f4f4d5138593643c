// What every kernel entry of a plugin built on device_plugin.hpp checks before its work
// (prepare_call): the call's arity; each tensor present where the op requires it, on one
// device of this plugin, of the first input's dtype, float32 or float16 (float16 only where
// the device has it), with non-NULL data when it is not empty; then what only the backend
// knows of a tensor's buffer and of the call as a whole. Messages name the argument, what
// was expected and what came.
//
// B is a struct (one is made per call, for what its checks collect):
//   kDeviceType, kDeviceTypeName         the DLPack device type and its name ("kDLOpenCL")
//   kBufferName                          what DLTensor.data holds ("cl_mem")
//   kFp16Missing                         why a device has no float16 ("lacks shader-f16")
//   Call                                 dev (Device*), prec (kF32 or kF16), esize; and the
//                                        backend's own fields
//   check_tensor(Call&, const DLTensor*, const std::string& arg, int i)
//                                        a present tensor i (inputs, then outputs)
//   finish(Call&, const dlfuse_kernel_args_t*, const char* const* names)
//                                        the call as a whole (overlaps, the stream)
// (the last two members, the rest static).
#ifndef DLFUSE_PLUGIN_COMMON_CALL_CHECKS_HPP_
#define DLFUSE_PLUGIN_COMMON_CALL_CHECKS_HPP_

#include <dlfuse/plugin_kit.hpp>

#include <string>

#include "layout.h"

namespace dlfuse_plugin {

template <class B, class State>
typename B::Call prepare_device_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                                     const char* const* names, uint32_t optional_inputs) {
  using Error = dlfuse::kit::Error;
  const auto bad = [](const std::string& m) { throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, m); };
  if (!args || args->num_inputs != num_inputs || args->num_outputs != num_outputs || !args->inputs || !args->outputs)
    bad("expected " + std::to_string(num_inputs) + " inputs and " + std::to_string(num_outputs) + " outputs");
  const DLTensor* first = args->inputs[0];
  if (!first) bad(std::string(names[0]) + ": expected a tensor, got NULL");
  if (first->device.device_type != B::kDeviceType)
    bad(std::string(names[0]) + ": device_type: expected " + B::kDeviceTypeName + " (" +
        std::to_string(int(B::kDeviceType)) + "), got " + std::to_string(first->device.device_type));
  typename B::Call c;
  c.dev = &s->device(first->device.device_id);
  const DLDataType dt = first->dtype;
  const bool f32 = dt.code == kDLFloat && dt.bits == 32 && dt.lanes == 1;
  const bool f16 = dt.code == kDLFloat && dt.bits == 16 && dt.lanes == 1;
  if (!f32 && !f16)
    throw Error(DLFUSE_STATUS_UNSUPPORTED, std::string(names[0]) + ": dtype: expected float32 or float16, got code " +
                                               std::to_string(dt.code) + " bits " + std::to_string(dt.bits) +
                                               " lanes " + std::to_string(dt.lanes));
  if (f16 && !c.dev->fp16)
    throw Error(DLFUSE_STATUS_UNSUPPORTED, c.dev->label() + " " + B::kFp16Missing + ": float16 is not supported there");
  c.prec = f16 ? decltype(c.prec)::kF16 : decltype(c.prec)::kF32;
  c.esize = f16 ? 2 : 4;
  B checks;
  for (int i = 0; i < num_inputs + num_outputs; ++i) {
    const DLTensor* t = i < num_inputs ? args->inputs[i] : args->outputs[i - num_inputs];
    const std::string arg = names[i];
    if (!t) {
      if (i < num_inputs && (i == 0 || !((optional_inputs >> i) & 1u))) bad(arg + ": expected a tensor, got NULL");
      continue;
    }
    if (t->device.device_type != first->device.device_type || t->device.device_id != first->device.device_id)
      bad(arg + ": expected a tensor on " + c.dev->label() + ", got device type " +
          std::to_string(t->device.device_type) + " id " + std::to_string(t->device.device_id));
    if (t->dtype.code != dt.code || t->dtype.bits != dt.bits || t->dtype.lanes != 1)
      bad(arg + ": expected the dtype of " + names[0] + ", got another");
    if (extent(t) > 0 && !t->data) bad(arg + ": data: expected a " + B::kBufferName + ", got NULL");
    checks.check_tensor(c, t, arg, i);
  }
  checks.finish(c, args, names);
  return c;
}

}  // namespace dlfuse_plugin

#endif

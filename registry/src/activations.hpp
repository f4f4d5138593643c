// Facts about dlfuse_activation_t that several ops' rules read.
#pragma once
#include <cstdint>

namespace dlfuse {

// True for the activations whose derivative their output gives (docs/ops.md): IDENTITY,
// RELU, SIGMOID, TANH.
bool derivative_from_out(int64_t act);
// "RELU", ... ("?" out of range).
const char* activation_name(int64_t act);

}  // namespace dlfuse

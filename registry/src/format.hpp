// Human-readable names for what goes into error messages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dlfuse/types.h"

namespace dlfuse {

std::string dtype_name(DLDataType dtype);                      // "float32", "bfloat16", "int8x4"
std::string device_type_name(int32_t type);                    // "cpu", "cuda", "opencl"
std::string device_name(DLDevice device);                      // "cuda:1"
std::string shape_string(const int64_t* shape, int32_t ndim);  // "[2, 3]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace dlfuse

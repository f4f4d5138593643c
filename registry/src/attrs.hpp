// Building typed attributes (the registry's defaults and the typed host functions).
#pragma once
#include "dlfuse/types.h"

namespace dlfuse {

inline dlfuse_attr_t int_attr(int32_t key, int64_t v) {
  dlfuse_attr_t a{};
  a.key = key;
  a.type = DLFUSE_ATTR_INT64;
  a.value.i64 = v;
  return a;
}

inline dlfuse_attr_t float_attr(int32_t key, double v) {
  dlfuse_attr_t a{};
  a.key = key;
  a.type = DLFUSE_ATTR_FLOAT64;
  a.value.f64 = v;
  return a;
}

}  // namespace dlfuse

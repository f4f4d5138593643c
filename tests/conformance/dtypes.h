// dtype names, element sizes, tolerances and exact double <-> storage conversion for the
// conformance suite. Written independently of the test plugin's conversions so that the
// two cross-check each other.
#ifndef DLFUSE_CONFORMANCE_DTYPES_H_
#define DLFUSE_CONFORMANCE_DTYPES_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

namespace dlfuse_conformance {

bool same_dtype(DLDataType a, DLDataType b);
// "float32", "bfloat16", ... or "code:bits:lanes" for anything else.
std::string dtype_name(DLDataType dt);
// Accepts f32/float32, f64/float64, f16/float16, bf16/bfloat16.
bool parse_dtype(const std::string& s, DLDataType* dt);
// True for the four dtypes the suite can check.
bool dtype_supported(DLDataType dt);
size_t dtype_size(DLDataType dt);

// Rounds v to the dtype (nearest even; NaN stays NaN, overflow gives Inf) and writes it.
void encode(double v, DLDataType dt, void* dst);
double decode(const void* src, DLDataType dt);
// v rounded to the dtype, as a double.
double round_to(double v, DLDataType dt);

// 2^k for k in [-1022, 1023], from its bits: x * pow2(k) is std::ldexp(x, k) wherever the
// product is neither rounded into the subnormals nor overflows, at a fraction of its cost.
double pow2(int k);

struct Tolerance {
  double rtol, atol;
};
// docs/ops.md, "Tolerances".
Tolerance tolerance_for(DLDataType dt, bool allow_tf32 = false);

}  // namespace dlfuse_conformance

#endif

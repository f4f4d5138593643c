// The conformance reference's GELU_TANH derivative (tests/conformance/reference.cpp, the
// form docs/ops.md writes) against a long-double evaluation, to float64's rtol 1e-12 of
// the value itself, over p in [-20, 20]. Read literally, ½(1 + tanh u) and 1 - tanh² u
// cancel for p << 0 (tanh u rounds to -1): that form misses the bound there, which the
// last test shows.
#include <gtest/gtest.h>

#include <cmath>

#include "reference.h"

namespace {

constexpr int kGeluTanh = 5;  // DLFUSE_ACT_GELU_TANH
constexpr double kRtol = 1e-12;

// act'(p) in long double (64-bit mantissa). Written with the identities ½(1 + tanh u) =
// 1/(1 + e^{-2u}) and ½(1 - tanh² u) = 2 e^{-2|u|} / (1 + e^{-2|u|})², which are exact and
// subtract nothing; the constants are the double ones every implementation uses.
long double grad_long(double p_in) {
  const long double p = p_in, c = std::sqrt(2.0 / M_PI), k = 0.044715;
  const long double u = c * (p + k * p * p * p);
  const long double half_one_plus_tanh = 1.0L / (1.0L + std::exp(-2.0L * u));
  const long double e = std::exp(-2.0L * std::fabs(u));
  const long double half_sech2 = 2.0L * e / ((1.0L + e) * (1.0L + e));
  return half_one_plus_tanh + p * half_sech2 * c * (1.0L + 3.0L * k * p * p);
}

// The derivative as docs/ops.md's definition reads, in the given type.
template <class T>
T grad_literal(double p_in) {
  const T p = p_in, c = std::sqrt(2.0 / M_PI), k = 0.044715;
  const T t = std::tanh(c * (p + k * p * p * p));
  return T(0.5) * (T(1) + t) + T(0.5) * p * (T(1) - t * t) * c * (T(1) + T(3) * k * p * p);
}

double rel_err(double got, long double want) {
  return static_cast<double>(std::fabs((static_cast<long double>(got) - want) / want));
}

// The long-double identities agree with the literal definition, also in long double,
// where that does not cancel (p >= -2: 1 + tanh u >= 4e-3).
TEST(GeluTanhReference, LongDoubleIdentitiesMatchTheDefinition) {
  for (int i = -2 * 64; i <= 20 * 64; ++i) {
    const double p = i / 64.0;
    const long double want = grad_literal<long double>(p);
    if (want == 0.0L) continue;
    EXPECT_LT(static_cast<double>(std::fabs((grad_long(p) - want) / want)), 1e-15) << "p = " << p;
  }
}

TEST(GeluTanhReference, DerivativeMeetsFloat64Rtol) {
  double worst = 0, worst_p = 0;
  for (int i = -20 * 64; i <= 20 * 64; ++i) {
    const double p = i / 64.0;
    const long double want = grad_long(p);
    ASSERT_NE(want, 0.0L) << "p = " << p;
    const double err = rel_err(dlfuse_conformance::ref_activate_grad(kGeluTanh, p, 1.0), want);
    if (err > worst) worst = err, worst_p = p;
  }
  EXPECT_LE(worst, kRtol) << "worst relative error at p = " << worst_p;
}

TEST(GeluTanhReference, ScalesByGradOut) {
  for (const double p : {-12.5, -3.0, 0.25, 4.0})
    EXPECT_EQ(dlfuse_conformance::ref_activate_grad(kGeluTanh, p, -2.0),
              -2.0 * dlfuse_conformance::ref_activate_grad(kGeluTanh, p, 1.0))
        << "p = " << p;
}

// The check above can fail: the literal form in float64 misses the bound for p << 0.
TEST(GeluTanhReference, LiteralFormMissesFloat64RtolForVeryNegativeInputs) {
  int missed = 0;
  for (int i = -20 * 64; i <= -3 * 64; ++i) {
    const double p = i / 64.0;
    missed += rel_err(grad_literal<double>(p), grad_long(p)) > kRtol;
  }
  EXPECT_GT(missed, 0);
}

}  // namespace

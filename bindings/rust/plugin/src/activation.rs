//! The activations of add_mul_activation and their derivatives (docs/ops.md), in float64.
use dlfuse_sys::*;

const FRAC_1_SQRT_2PI: f64 = 0.398_942_280_401_432_7; // 1/sqrt(2 pi)
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4; // sqrt(2/pi)
const GELU_TANH_C: f64 = 0.044715;

/// erfc in float64 (std has none): the Maclaurin series of erf below 2.5, where its
/// cancellation costs at most a few ulps of erfc, and above it the continued fraction
/// of erfc, which converges fast there and keeps relative accuracy in the far tail.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 2.5 {
        // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = x * x;
        let mut term = x; // (-1)^n x^(2n+1) / n!
        let mut sum = x;
        let mut n = 0.0;
        while n < 200.0 {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        return 1.0 - sum * std::f64::consts::FRAC_2_SQRT_PI;
    }
    if x > 27.0 {
        return 0.0; // below the smallest double
    }
    // erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    let mut tail = x;
    for k in (1..=80).rev() {
        tail = x + (k as f64 / 2.0) / tail;
    }
    (-x * x).exp() * (std::f64::consts::FRAC_2_SQRT_PI / 2.0) / tail
}

/// The standard normal CDF.
fn phi_cdf(p: f64) -> f64 {
    0.5 * erfc(-p * std::f64::consts::FRAC_1_SQRT_2)
}

fn sigmoid(p: f64) -> f64 {
    1.0 / (1.0 + (-p).exp())
}

pub fn forward(act: i32, p: f64) -> f64 {
    match act {
        DLFUSE_ACT_RELU => {
            // Not p.max(0.0): that would turn NaN into 0.
            if p > 0.0 || p.is_nan() {
                p
            } else {
                0.0
            }
        }
        DLFUSE_ACT_SIGMOID => sigmoid(p),
        DLFUSE_ACT_TANH => p.tanh(),
        DLFUSE_ACT_GELU_ERF => p * phi_cdf(p),
        DLFUSE_ACT_GELU_TANH => {
            let u = SQRT_2_OVER_PI * (p + GELU_TANH_C * p * p * p);
            0.5 * p * (1.0 + u.tanh())
        }
        DLFUSE_ACT_SILU => p * sigmoid(p),
        _ => p, // IDENTITY; the registry refuses values outside the enum
    }
}

/// d act / d p times g. RELU is a select, so a NaN or Inf g stays out where p <= 0.
pub fn backward(act: i32, p: f64, g: f64) -> f64 {
    match act {
        DLFUSE_ACT_RELU => {
            if p > 0.0 || p.is_nan() {
                g
            } else {
                0.0
            }
        }
        DLFUSE_ACT_SIGMOID => {
            let s = sigmoid(p);
            g * (s * (1.0 - s))
        }
        DLFUSE_ACT_TANH => {
            let t = p.tanh();
            g * (1.0 - t * t)
        }
        DLFUSE_ACT_GELU_ERF => g * (phi_cdf(p) + p * FRAC_1_SQRT_2PI * (-0.5 * p * p).exp()),
        DLFUSE_ACT_GELU_TANH => {
            let u = SQRT_2_OVER_PI * (p + GELU_TANH_C * p * p * p);
            let t = u.tanh();
            let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * p * p);
            g * (0.5 * (1.0 + t) + 0.5 * p * (1.0 - t * t) * du)
        }
        DLFUSE_ACT_SILU => {
            let s = sigmoid(p);
            g * (s * (1.0 + p * (1.0 - s)))
        }
        _ => g,
    }
}

#[cfg(test)]
mod tests {
    use super::erfc;

    /// Values from a correctly rounded libm (Python's math.erfc).
    #[test]
    fn erfc_matches_libm_to_1e_11_relative() {
        let cases = [
            (0.0, 1.0),
            (0.1, 0.8875370839817152),
            (0.5, 0.4795001221869535),
            (1.0, 0.15729920705028513),
            (1.5, 0.033894853524689274),
            (2.0, 0.004677734981047265),
            (2.49, 0.000429287867733913),
            (2.5, 0.0004069520174449589),
            (3.0, 2.2090496998585438e-05),
            (4.0, 1.541725790028002e-08),
            (5.0, 1.5374597944280351e-12),
            (8.0, 1.1224297172982928e-29),
            (12.0, 1.3562611692059042e-64),
        ];
        for (x, want) in cases {
            let got = erfc(x);
            assert!(((got - want) / want).abs() < 1e-11, "erfc({}) = {:e}, want {:e}", x, got, want);
            let neg = erfc(-x);
            assert!((neg - (2.0 - want)).abs() < 1e-15, "erfc(-{}) = {:e}", x, neg);
        }
        assert!(erfc(f64::NAN).is_nan());
        assert_eq!(erfc(f64::INFINITY), 0.0);
        assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
    }
}

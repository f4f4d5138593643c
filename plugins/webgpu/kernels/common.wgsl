// What every kernel shares: the parameter block, strided views over a 3-D grid, the
// activations and their derivatives (docs/ops.md). The host puts `alias T = f32;` (or
// `enable f16; alias T = f16;`) before this file; arithmetic is float32 either way.
//
// WGSL lets a compiler assume that no value is NaN or infinite and has no isnan(): NaN and
// Inf are recognised from the bits, and every select that must let NaN through tests them.

// Binding 0 of every kernel is its parameter block, int32 words (floats as their bits),
// layouts per kernel, declared by the kernel's file with pr(i), its word i.

fn prm_f(i: i32) -> f32 { return bitcast<f32>(pr(i)); }

// Element index of grid point (i0, i1, i2) in the view whose four words start at v:
// offset, then the strides of dims 0, 1, 2.
fn at(v: i32, i0: i32, i1: i32, i2: i32) -> i32 {
  return pr(v) + i0 * pr(v + 1) + i1 * pr(v + 2) + i2 * pr(v + 3);
}

fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_finite(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u; }
fn nan_f32() -> f32 { return bitcast<f32>(0x7fc00000u); }

const SQRT1_2: f32 = 0.70710678118654752;
const INV_SQRT_2PI: f32 = 0.39894228040143268;
const SQRT_2_OVER_PI: f32 = 0.79788456080286536;
const GELU_C: f32 = 0.044715;

// 1 / (1 + e^-x) without overflow trouble: e^-x = Inf gives 0, e^-x = 0 gives 1.
fn sigmoid(x: f32) -> f32 { return 1.0 / (1.0 + exp(-x)); }

// tanh with full relative accuracy near 0 (the series) and exact limits (1 - 2/(e^2|x|+1)).
fn tanh_acc(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.25) {
    let x2 = x * x;
    return x * (1.0 + x2 * (-0.33333333333 + x2 * (0.13333333333 + x2 * (-0.053968253968 + x2 * 0.021869488536))));
  }
  let r = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
  return select(-r, r, x >= 0.0 || is_nan(x));
}

// erfc(x), relative error below 1.2e-7 everywhere (Numerical Recipes' Chebyshev fit).
fn erfc_acc(x: f32) -> f32 {
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.5 * z);
  let r = t * exp(-z * z - 1.26551223 +
                  t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
                  t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return select(2.0 - r, r, x >= 0.0 || is_nan(x));
}

// Phi(x), the standard normal CDF.
fn phi_cdf(x: f32) -> f32 { return 0.5 * erfc_acc(-x * SQRT1_2); }

// act(p) for a dlfuse_activation_t; NaN in, NaN out (relu included).
fn act_fwd(p: f32, act: i32) -> f32 {
  switch act {
    case 1: { return select(0.0, p, p > 0.0 || is_nan(p)); }
    case 2: { return sigmoid(p); }
    case 3: { return tanh_acc(p); }
    case 4: { return p * phi_cdf(p); }
    case 5: {
      let u = SQRT_2_OVER_PI * (p + GELU_C * p * p * p);
      return p * sigmoid(2.0 * u);  // p (1 + tanh u) / 2
    }
    case 6: { return p * sigmoid(p); }
    default: { return p; }
  }
}

// act'(p) for every activation but relu (a select, see d_pre).
fn act_grad(p: f32, act: i32) -> f32 {
  switch act {
    case 2: {
      let e = exp(-abs(p));
      let d = 1.0 + e;
      return e / (d * d);
    }
    case 3: {
      let t = tanh_acc(p);
      return 1.0 - t * t;
    }
    case 4: { return phi_cdf(p) + p * INV_SQRT_2PI * exp(-0.5 * p * p); }
    case 5: {
      let u = SQRT_2_OVER_PI * (p + GELU_C * p * p * p);
      let du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * p * p);
      let s = sigmoid(2.0 * u);     // (1 + tanh u) / 2
      let sm = sigmoid(-2.0 * u);   // (1 - tanh u) / 2
      let sech2 = s * sm;           // (1 - tanh^2 u) / 4
      // |p| > ~1.8e19 makes du Inf where sech2 is already 0: the term is 0, not 0 * Inf.
      return s + select(2.0 * p * sech2 * du, 0.0, sech2 == 0.0);
    }
    case 6: {
      let s = sigmoid(p);
      let sm = sigmoid(-p);  // 1 - s without cancellation
      return s * (1.0 + p * sm);
    }
    default: { return 1.0; }
  }
}

// grad_out * act'(pre); relu is a select, so NaN/Inf gradients where pre <= 0 give 0.
fn d_pre(g: f32, p: f32, act: i32) -> f32 {
  if (act == 1) { return select(0.0, g, p > 0.0 || is_nan(p)); }
  return g * act_grad(p, act);
}

// grad_out * act'(pre) written in out = act(pre) (identity, relu, sigmoid, tanh only).
fn d_out(g: f32, o: f32, act: i32) -> f32 {
  switch act {
    case 0: { return g; }
    case 1: { return select(0.0, g, o > 0.0 || is_nan(o)); }
    case 2: { return g * (o * (1.0 - o)); }
    case 3: { return g * (1.0 - o * o); }
    default: { return nan_f32(); }
  }
}

fn d_act(g: f32, v: f32, act: i32, from_out: bool) -> f32 {
  if (from_out) { return d_out(g, v, act); }
  return d_pre(g, v, act);
}

// Pointwise grids: 256 invocations per workgroup, workgroups laid out 2-D (x first) since
// one dimension holds at most 65535; the linear index then splits into (i0, i1, i2).
const PW: u32 = 256u;
fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> i32 {
  return i32((wid.y * nwg.x + wid.x) * PW + lid);
}

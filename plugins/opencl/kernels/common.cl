/* dlfuse OpenCL kernels: shared definitions.
 *
 * The plugin concatenates the .cl files of this folder (common.cl first, in the order of
 * CMakeLists.txt) into one program and builds it once per device and dtype with
 *   -DDLF_HALF=0|1   storage type float or half (half only where cl_khr_fp16 is reported)
 *   -DDLF_CPU=0|1    the device is a CPU (picks the GEMM kernel's tuning)
 * Arithmetic is always float; half data is converted on load and rounded (to nearest
 * even) on store. No fast-math: NaN and Inf must propagate exactly as docs/ops.md says.
 * Offsets and strides are in elements, as 64-bit integers.
 */
#ifdef DLF_FORCE_BUILD_ERROR
/* Lets the test suite check that a failed build's log reaches the caller's message. */
#error "DLF_FORCE_BUILD_ERROR is defined"
#endif

#if DLF_HALF
#ifdef cl_khr_fp16 /* not needed for vload_half/vstore_half, which are core */
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif
typedef half T;
#define LD(p, i) vload_half((i), (p))
#define ST(p, i, v) vstore_half_rte((v), (i), (p))
#define LD4(p, i) vload_half4(0, (p) + (i))
#define LD8(p, i) vload_half8(0, (p) + (i))
#else
typedef float T;
#define LD(p, i) ((p)[(i)])
#define ST(p, i, v) ((p)[(i)] = (v))
#define LD4(p, i) vload4(0, (p) + (i))
#define LD8(p, i) vload8(0, (p) + (i))
#endif

/* A view of up to three (collapsed) dims: element offset and strides, outermost first.
 * Must match struct ClView in plugins/common/src/layout.h. */
typedef struct {
  long off, s0, s1, s2;
} view_t;

/* The reduced dims of a reduction (at most 8 after collapsing): sizes and source strides.
 * Must match struct ClReduced in plugins/common/src/layout.h. */
typedef struct {
  long n[8];
  long s[8];
  int nr;
  int pad_;
} red_t;

/* relu with NaN passing through: fmax(NaN, 0) would give 0. */
inline float relu_nan(float v) { return (v > 0.0f || isnan(v)) ? v : 0.0f; }

/* 1 / (1 + e^-p), accurate at both tails. */
inline float sigm(float p) { return 1.0f / (1.0f + exp(-p)); }

#define DLF_SQRT_2_OVER_PI 0.79788456080286535588f
#define DLF_GELU_C 0.044715f
#define DLF_INV_SQRT_2PI 0.39894228040143267794f

/* Activation codes are dlfuse_activation_t. Formulas avoid cancellation (1 + erf(x) for
 * x < 0, 1 - tanh^2, 1 - sigmoid) so results keep float32 relative accuracy. */
inline float act_fwd(float p, int act) {
  switch (act) {
    case 0: return p;
    case 1: return relu_nan(p);
    case 2: return sigm(p);
    case 3: return tanh(p);
    case 4: return 0.5f * p * erfc(-p * M_SQRT1_2_F);
    case 5: {
      const float u = DLF_SQRT_2_OVER_PI * (p + DLF_GELU_C * p * p * p);
      return p / (1.0f + exp(-2.0f * u)); /* = p (1 + tanh u) / 2 */
    }
    case 6: return p / (1.0f + exp(-p));
  }
  return NAN;
}

/* act'(p) for every activation but relu (a select, see d_pre). */
inline float act_grad(float p, int act) {
  switch (act) {
    case 0: return 1.0f;
    case 2: {
      const float e = exp(-fabs(p));
      const float d = 1.0f + e;
      return e / (d * d);
    }
    case 3: {
      const float c = cosh(p);
      return 1.0f / (c * c);
    }
    case 4: {
      const float cdf = 0.5f * erfc(-p * M_SQRT1_2_F);
      return cdf + p * DLF_INV_SQRT_2PI * exp(-0.5f * p * p);
    }
    case 5: {
      const float u = DLF_SQRT_2_OVER_PI * (p + DLF_GELU_C * p * p * p);
      const float du = DLF_SQRT_2_OVER_PI * (1.0f + 3.0f * DLF_GELU_C * p * p);
      const float s = 1.0f / (1.0f + exp(-2.0f * u)); /* (1 + tanh u) / 2 */
      const float sm = 1.0f / (1.0f + exp(2.0f * u)); /* (1 - tanh u) / 2 */
      const float sech2 = s * sm; /* (1 - tanh^2 u) / 4 */
      /* |p| > ~1.8e19 makes du Inf where sech2 is already 0: the term is 0, not 0 * Inf. */
      return s + (sech2 == 0.0f ? 0.0f : 2.0f * p * sech2 * du);
    }
    case 6: {
      const float s = 1.0f / (1.0f + exp(-p));
      const float sm = 1.0f / (1.0f + exp(p)); /* 1 - s without cancellation */
      return s * (1.0f + p * sm);
    }
  }
  return NAN;
}

/* grad_out * act'(pre); for relu a select, so NaN/Inf gradients where pre <= 0 give 0. */
inline float d_pre(float g, float p, int act) {
  if (act == 1) return (p > 0.0f || isnan(p)) ? g : 0.0f;
  return g * act_grad(p, act);
}

/* grad_out * act'(pre) written in out = act(pre), for the activations whose derivative is
 * a function of their output (the registry refuses the others with out): identity 1,
 * relu the same select as d_pre (out > 0 exactly where pre > 0, NaN where pre is NaN),
 * sigmoid out (1 - out), tanh 1 - out^2. */
inline float d_out(float g, float o, int act) {
  switch (act) {
    case 0: return g;
    case 1: return (o > 0.0f || isnan(o)) ? g : 0.0f;
    case 2: return g * (o * (1.0f - o));
    case 3: return g * (1.0f - o * o);
  }
  return NAN;
}

/* d_pre from the forward's pre (from_out 0) or from its out (from_out 1). */
inline float d_act(float g, float v, int act, int from_out) {
  return from_out ? d_out(g, v, act) : d_pre(g, v, act);
}

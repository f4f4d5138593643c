// The activations of docs/ops.md in scalar float math (the plugin's own passes: generic
// layouts, matmul_add_activation's pre -> out pass, dZ from pre) and their oneDNN eltwise
// counterparts (post-ops and eltwise_backward, where oneDNN computes the documented function).
#ifndef DLFUSE_ONEDNN_ACTIVATION_H_
#define DLFUSE_ONEDNN_ACTIVATION_H_

#include <cmath>

#include "common.h"

namespace dlfuse_onednn {

inline float act_fwd(int act, float p) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return (p > 0.f || p != p) ? p : 0.f;
    case DLFUSE_ACT_SIGMOID: return 1.f / (1.f + std::exp(-p));
    case DLFUSE_ACT_TANH: return std::tanh(p);
    case DLFUSE_ACT_GELU_ERF: return 0.5f * p * (1.f + std::erf(p * 0.70710678118654752f));
    case DLFUSE_ACT_GELU_TANH: {
      const float u = 0.79788456080286536f * (p + 0.044715f * p * p * p);
      return 0.5f * p * (1.f + std::tanh(u));
    }
    default: return p / (1.f + std::exp(-p));  // SILU
  }
}

// g * act'(p); RELU is a select (a blocked NaN/Inf gradient gives 0).
inline float act_bwd(int act, float p, float g) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return g;
    case DLFUSE_ACT_RELU: return (p > 0.f || p != p) ? g : 0.f;
    case DLFUSE_ACT_SIGMOID: {
      const float s = 1.f / (1.f + std::exp(-p));
      return g * (s * (1.f - s));
    }
    case DLFUSE_ACT_TANH: {
      const float t = std::tanh(p);
      return g * (1.f - t * t);
    }
    case DLFUSE_ACT_GELU_ERF: {
      const float cdf = 0.5f * (1.f + std::erf(p * 0.70710678118654752f));
      const float pdf = 0.39894228040143268f * std::exp(-0.5f * p * p);
      return g * (cdf + p * pdf);
    }
    case DLFUSE_ACT_GELU_TANH: {
      const float k = 0.79788456080286536f;
      const float t = std::tanh(k * (p + 0.044715f * p * p * p));
      return g * (0.5f * (1.f + t) + 0.5f * p * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * p * p));
    }
    default: {
      const float s = 1.f / (1.f + std::exp(-p));
      return g * (s * (1.f + p * (1.f - s)));
    }
  }
}

// The oneDNN eltwise algorithm (and alpha) of a transcendental activation; false for
// IDENTITY and RELU (oneDNN's relu drops NaN: see append_relu_keep_nan).
inline bool eltwise_alg(int act, dnnl::algorithm* alg, float* alpha) {
  *alpha = 0.f;
  switch (act) {
    case DLFUSE_ACT_SIGMOID: *alg = dnnl::algorithm::eltwise_logistic; return true;
    case DLFUSE_ACT_TANH: *alg = dnnl::algorithm::eltwise_tanh; return true;
    case DLFUSE_ACT_GELU_ERF: *alg = dnnl::algorithm::eltwise_gelu_erf; return true;
    case DLFUSE_ACT_GELU_TANH: *alg = dnnl::algorithm::eltwise_gelu_tanh; return true;
    case DLFUSE_ACT_SILU:
      *alg = dnnl::algorithm::eltwise_swish;
      *alpha = 1.f;
      return true;
    default: return false;
  }
}

// Appends the post-ops computing `act` (nothing for IDENTITY; RELU keeps NaN).
inline void append_activation(dnnl::post_ops& po, int act) {
  dnnl::algorithm alg;
  float alpha;
  if (act == DLFUSE_ACT_RELU)
    append_relu_keep_nan(po);
  else if (eltwise_alg(act, &alg, &alpha))
    po.append_eltwise(1.f, alg, alpha, 0.f);
}

}  // namespace dlfuse_onednn

#endif

// The activations of add_mul_activation and their gradients, in the accumulation type.
#ifndef DLFUSE_TESTREF_ACTIVATION_H_
#define DLFUSE_TESTREF_ACTIVATION_H_

#include <dlfuse/types.h>

#include <cmath>

namespace testref {

// relu must keep NaN (fmax(p, 0) would turn it into 0).
#ifdef DLFUSE_TESTREF_MUTANT_RELU_NAN_TO_ZERO
template <class A>
A relu(A p) {
  return p > A(0) ? p : A(0);
}  // mutant: as fmax(p, 0)
#else
template <class A>
A relu(A p) {
  return std::isnan(p) ? p : (p > A(0) ? p : A(0));
}
#endif

template <class A>
A sigmoid(A p) {
  return A(1) / (A(1) + std::exp(-p));
}

template <class A>
A gelu_tanh_u(A p) {
  const A k = A(0.7978845608028654);  // sqrt(2/pi)
  return k * (p + A(0.044715) * p * p * p);
}

template <class A>
A activate(int act, A p) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return p;
    case DLFUSE_ACT_RELU: return relu(p);
    case DLFUSE_ACT_SIGMOID: return sigmoid(p);
    case DLFUSE_ACT_TANH: return std::tanh(p);
#ifdef DLFUSE_TESTREF_MUTANT_GELU_ERF_AS_TANH
    case DLFUSE_ACT_GELU_ERF: return A(0.5) * p * (A(1) + std::tanh(gelu_tanh_u(p)));  // mutant
#else
    case DLFUSE_ACT_GELU_ERF: return A(0.5) * p * (A(1) + std::erf(p * A(0.7071067811865476)));
#endif
    case DLFUSE_ACT_GELU_TANH: return p * sigmoid(A(2) * gelu_tanh_u(p));  // ½ p (1 + tanh u)
    default: return p * sigmoid(p);  // SILU; the activation was checked before the loop
  }
}

// grad * act'(p). relu is a select so that a NaN/Inf grad where p <= 0 gives exactly 0.
template <class A>
A activate_grad(int act, A p, A grad) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return grad;
#if defined(DLFUSE_TESTREF_MUTANT_RELU_GRAD_AT_ZERO)
    case DLFUSE_ACT_RELU: return (p >= A(0) || std::isnan(p)) ? grad : A(0);  // mutant: relu'(0) = 1
#elif defined(DLFUSE_TESTREF_MUTANT_RELU_GRAD_PRODUCT)
    case DLFUSE_ACT_RELU: return grad * ((p > A(0) || std::isnan(p)) ? A(1) : A(0));  // mutant: NaN * 0
#else
    case DLFUSE_ACT_RELU: return (p > A(0) || std::isnan(p)) ? grad : A(0);
#endif
    case DLFUSE_ACT_SIGMOID: {
      const A s = sigmoid(p);
      return grad * (s * (A(1) - s));
    }
    case DLFUSE_ACT_TANH: {
      const A t = std::tanh(p);
      return grad * (A(1) - t * t);
    }
    case DLFUSE_ACT_GELU_ERF: {
      const A cdf = A(0.5) * (A(1) + std::erf(p * A(0.7071067811865476)));
      const A pdf = std::exp(A(-0.5) * p * p) * A(0.3989422804014327);  // 1/sqrt(2 pi)
      return grad * (cdf + p * pdf);
    }
    case DLFUSE_ACT_GELU_TANH: {
      // ½(1 + tanh u) = σ(2u), ½(1 - tanh² u) = 2 σ(2u) σ(-2u): no cancellation for p << 0.
      const A u = gelu_tanh_u(p);
      const A du = A(0.7978845608028654) * (A(1) + A(3 * 0.044715) * p * p);
      return grad * (sigmoid(A(2) * u) * (A(1) + A(2) * p * sigmoid(A(-2) * u) * du));
    }
#ifdef DLFUSE_TESTREF_MUTANT_SILU_GRAD_WRONG
    default: return grad * sigmoid(p);  // mutant: the p s (1 - s) term forgotten
#else
    default: {
      const A s = sigmoid(p);
      return grad * (s * (A(1) + p * (A(1) - s)));
    }
#endif
  }
}

// grad * act'(p) written in out = act(p), for the activations whose derivative their
// output gives (docs/ops.md, "Reading out instead"); the caller checked `act` is one.
// relu's select reads out as it reads p: out > 0 exactly where p > 0, NaN where p is NaN.
template <class A>
A activate_grad_from_out(int act, A out, A grad) {
  switch (act) {
    case DLFUSE_ACT_IDENTITY: return grad;
    case DLFUSE_ACT_RELU: return activate_grad(DLFUSE_ACT_RELU, out, grad);
#ifdef DLFUSE_TESTREF_MUTANT_SIGMOID_FROM_OUT_WRONG
    case DLFUSE_ACT_SIGMOID: return grad * out;  // mutant: the (1 - out) factor forgotten
#else
    case DLFUSE_ACT_SIGMOID: return grad * (out * (A(1) - out));
#endif
    default: return grad * (A(1) - out * out);  // TANH
  }
}

inline bool derivative_from_out(int act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

}  // namespace testref

#endif

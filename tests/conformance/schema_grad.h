// A backward op against its forward, both known only by their schemas (docs/abi.md,
// "Backward plans": grad_out is the gradient of the forward's first output, output grad_<x>
// the gradient of input x, other inputs the forward call's tensors of the same name).
#ifndef DLFUSE_CONFORMANCE_SCHEMA_GRAD_H_
#define DLFUSE_CONFORMANCE_SCHEMA_GRAD_H_

#include <random>
#include <string>

#include "schema_call.h"
#include "schema_draw.h"

namespace dlfuse_conformance {

// The arguments of a backward call made from forward problem `p`: the forward runs on
// random inputs (writing the outputs its backward plan asks for), grad_out is random, the
// plan's other inputs are the forward's tensors, each grad_<x> has x's shape. *fwd_args,
// when not NULL, receives the forward call's arguments.
bool backward_args(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const SchemaOp& fwd, const SchemaOp& bwd,
                   const Problem& p, std::mt19937_64& rng, SchemaArgs* args, std::string* err,
                   SchemaArgs* fwd_args = nullptr);

struct GradOutcome {
  bool pass = false;
  double max_abs = -1.0, ratio = -1.0;  // |backward - central differences|, and over its bound
  std::string detail;
};

// The backward against the forward's first output, element by element: row k of the
// Jacobian J from the backward at grad_out = e_k, against (J v)_k by central differences
// along a random direction v of every input the backward returns a gradient for, at steps
// h, h/2, h/4 (float64: h = 2^-10; float32: 2^-8). Richardson's extrapolation of h and h/2
// is compared; the bound is twice their difference plus the rounding of both sides (32
// units in the last place of each element's norm-wise magnitude, over the step). An element
// where h/4 does not shrink the difference as h^2 would (a kink of relu, say, within the
// steps) or whose bound exceeds 5% of sum_j |J_kj v_j| is left out; a draw where fewer than
// half the elements that are not flat remain is redrawn, up to 6 times. Problems of at most
// 64 elements per tensor. `draw` 0 uses the attributes' defaults, later draws random ones.
GradOutcome gradient_check(dlfuse_registry_t reg, DLDevice dev, DLDataType dt, const SchemaOp& fwd, const SchemaOp& bwd,
                           uint64_t seed, int draw);

}  // namespace dlfuse_conformance

#endif

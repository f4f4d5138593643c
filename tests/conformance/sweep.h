// The randomized sweep: valid calls generated from a seed, so a run is reproducible from
// the seed the runner prints (`dlfuse conform --seed S --sweep N`).
#ifndef DLFUSE_CONFORMANCE_SWEEP_H_
#define DLFUSE_CONFORMANCE_SWEEP_H_

#include <cstdint>
#include <vector>

#include "op_case.h"

namespace dlfuse_conformance {

// `count` cases of `op`, named sweep_000, sweep_001, ...; the same (op, seed, count) always
// gives the same cases, and case i does not depend on count. Ranks 1-4; sizes include 1,
// primes and sizes past one work-group or tile (> 128); every broadcast pattern of y and
// bias (add_mul) or of bias and the batch dims (matmul) can come up; inputs and outputs
// compact (NULL strides), explicit, padded, transposed or with a byte_offset, inputs also
// zero-stride; every activation in turn; absent gradients, in-place calls, the generic
// call path and NaN/Inf among them.
// `out_form`: add_mul_activation_backward's kernel takes ABI 1.1's inputs, so some of its
// cases read `out` instead of x, y, bias (the others are the same either way).
std::vector<CaseSpec> sweep_cases(OpKind op, uint64_t seed, int count, bool out_form = false);

}  // namespace dlfuse_conformance

#endif

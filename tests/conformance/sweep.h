// The randomized sweep: valid calls generated from a seed, so a run is reproducible from
// the seed the runner prints (`dlfuse conform --seed S --sweep N`).
#ifndef DLFUSE_CONFORMANCE_SWEEP_H_
#define DLFUSE_CONFORMANCE_SWEEP_H_

#include <cstdint>
#include <vector>

#include "op_case.h"

namespace dlfuse_conformance {

// `count` cases of `op`, named sweep_000, sweep_001, ...; the same (op, seed, count,
// out_form, whether device_type is a GPU's) always gives the same cases, and case i does
// not depend on count. Inputs and outputs compact (NULL strides), explicit, padded,
// transposed, column slices or with a byte_offset, inputs also zero-stride or broadcast
// (every stride 0); every activation in turn; absent gradients, in-place calls, the
// generic call path and NaN/Inf among them.
// Two cases in six (i % 6 < 2) are drawn as earlier versions drew them (ranks 1-4, sizes
// 1, primes and past 128, random broadcasts), so that cases pinned by seed and index stay
// what they were. The other four take forms in turn, each recurring every five of them:
//  add_mul: vectors; rows (every third of them in the forward: 65537 rows of a transposed
//    out, more workgroups in a dimension than GPU APIs allow); outputs with leading 1s
//    whose x or y (or bias) lacks them and is written directly; outputs of 2^15 + 1 to
//    2^15 + 2^12 elements (the oneDNN plugin's threads); ranks 3-4 (x and y whole in some:
//    every gradient written directly), every third of them rank 7 (four groups of kept
//    dims between summed ones);
//  matmul: sizes at the plugins' tile and block edges, aligned sizes (vec4 reads), K whose
//    rows are never 16-byte aligned, outputs past 2^15 elements with K <= 4, batches of
//    rank 1-3 (leading 1s among them) with sums over K of 1023 to 1025 among them.
// Sizes are odd, prime, powers of two, one short of or one past a tile. The bias form
// (add_mul: row, row with leading 1s, column, full, out's shape without its leading dims,
// scalar, some dims; matmul: row, column, MxN, full, scalar, row or column per batch) and
// the layout of the bias (compact, padded, transposed, zero-stride, broadcast, column
// slice) or of grad_bias (compact, padded, transposed, column slice, explicit, odd
// byte_offset) cycle with periods 7 and 6, so every pair comes up within 42 of these
// cases; every subset of the gradients is absent within 13 of them (24 with grad_residual).
// No gradient sums more than 24 000 terms (past 2^15 elements a scalar or partial input is
// a row instead), and a zero-stride or broadcast input repeats a value at most 257 times
// (padded instead): longer sums of equal terms round beyond docs/ops.md's float32 tolerance.
// `out_form`: add_mul_activation_backward's kernel takes ABI 1.1's inputs, so some of its
// cases read `out` instead of x, y, bias, or pass five inputs with out NULL (the others
// are the same either way).
// `device_type`: on a GPU's (CUDA, ROCm, Metal) the aligned and unaligned-K matmul forms
// are GEMMs with the work at which a GPU plugin changes course (up to 2^26 multiply-adds);
// elsewhere, the CPU devices of CI included (PoCL, lavapipe), every matmul case stays
// within 400 000 multiply-adds.
std::vector<CaseSpec> sweep_cases(OpKind op, uint64_t seed, int count, bool out_form = false,
                                  int32_t device_type = kDLCPU);

}  // namespace dlfuse_conformance

#endif

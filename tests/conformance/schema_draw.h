// Random calls of an op that the suite knows only by its schema: attribute values from the
// attributes' types and ranges, input shapes from the outputs' shape rules, each drawn
// problem confirmed by the registry's own inference (dlfuse_op_infer_outputs) before use.
#ifndef DLFUSE_CONFORMANCE_SCHEMA_DRAW_H_
#define DLFUSE_CONFORMANCE_SCHEMA_DRAW_H_

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "schema_call.h"

namespace dlfuse_conformance {

struct Problem {
  std::vector<std::optional<std::vector<int64_t>>> in;  // input shapes; nullopt: absent
  std::vector<dlfuse_attr_t> attrs;                     // every attribute, schema order
  std::vector<std::vector<int64_t>> out;                // inferred output shapes (widest)
  std::string text(const SchemaOp& op) const;           // "x[3,5] y[5] SCALE=1.5"
};

// Every attribute at its default, in schema order.
std::vector<dlfuse_attr_t> default_attrs(const dlfuse_op_schema_t& s);
// Every attribute drawn: INT64 uniform in its range clipped to [-16, 16] (around the
// default where that leaves nothing), FLOAT64 default * U[0.5, 2) with a random sign, or
// U[-2, 2) for a default of 0.
std::vector<dlfuse_attr_t> random_attrs(const dlfuse_op_schema_t& s, std::mt19937_64& rng);

// Draws input shapes the registry accepts for `attrs`: templates built from the shape
// rules (every input one shape, at min_rank >= 2; else NumPy broadcasts of one shape first;
// [M,K] and [K,N] for a MATMUL
// rule's inputs, the others [N], [M,N], [1,N] or [M,1]), with small dims (odd, prime,
// powers of two, 1), at most 2 batch dims. Optional inputs are present when `optional`
// and the op accepts them all, else absent; no tensor over `max_numel` elements; the shape
// the others broadcast from has at least `min_rank` dims. False with *err after 64 refused
// draws.
bool draw_problem(const SchemaOp& op, DLDataType dt, std::mt19937_64& rng, const std::vector<dlfuse_attr_t>& attrs,
                  bool optional, Problem* p, std::string* err, int64_t max_numel = 2048, int min_rank = 1);

}  // namespace dlfuse_conformance

#endif

#include "matmul_plan.h"

#include <string>

namespace dlfuse_plugin {
namespace {

int64_t dot(const Dims& a, const Dims& b) {
  int64_t s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

bool next_index(Dims& idx, const Dims& shape) {
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    if (++idx[size_t(d)] < shape[size_t(d)]) return true;
    idx[size_t(d)] = 0;
  }
  return false;
}

}  // namespace

bool wanted(const DLTensor* t) { return t && numel(shape_of(t)) > 0; }

const DLTensor* required_out(const dlfuse_kernel_args_t* args, int i, const char* name) {
  if (!args->outputs[i])
    throw dlfuse::kit::Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string(name) + ": expected a tensor, got NULL");
  return args->outputs[i];
}

void check_act_backward_form(const DLTensor* out, const DLTensor* pre, int act) {
  using dlfuse::kit::Error;
  if (!out == !pre)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, std::string("arguments 'out' and 'pre' are both ") +
                                                    (out ? "given" : "NULL") + "; expected exactly one of them");
  if (out && act > DLFUSE_ACT_TANH)
    throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                "argument 'out' is given with ACTIVATION " + std::to_string(act) +
                    "; expected IDENTITY, RELU, SIGMOID or TANH with 'out' (pass 'pre')");
}

std::vector<int64_t> forward_table(const Dims& batch, const Dims& out, const Dims& bias, const Dims& residual,
                                   const Dims& pre, const Dims& a, const Dims& b) {
  std::vector<int64_t> table;  // rows as kTableHeader says, then this batch's A and B
  Dims o(batch.size(), 0);
  do {
    table.insert(table.end(), {dot(o, out), dot(o, bias), dot(o, residual), dot(o, pre), dot(o, a), dot(o, b)});
  } while (next_index(o, batch));
  return table;
}

std::vector<int64_t> grad_table(const Dims& out_batch, const Dims& op_batch, const Dims& g_batch, const Dims& x,
                                const Dims& y, int64_t R) {
  const int brank = int(out_batch.size()), obr = int(op_batch.size());
  const int64_t nc = numel(op_batch), nb = numel(out_batch);
  std::vector<int64_t> table;
  if (nc <= 1 && R <= 1) return table;
  std::vector<std::vector<int64_t>> terms(static_cast<size_t>(nc));
  if (nb > 0) {
    Dims o(size_t(brank), 0);
    do {
      int64_t lin = 0;  // the operand batch this output batch belongs to (row-major)
      for (int j = 0; j < obr; ++j) {
        const int i = j + (brank - obr);
        lin = lin * op_batch[size_t(j)] + (op_batch[size_t(j)] == 1 ? 0 : o[size_t(i)]);
      }
      terms[size_t(lin)].push_back(dot(o, x));
      terms[size_t(lin)].push_back(dot(o, y));
    } while (next_index(o, out_batch));
  }
  Dims ci(size_t(obr), 0);
  for (int64_t l = 0; l < nc; ++l) {
    if (int64_t(terms[size_t(l)].size()) != 2 * R)
      throw dlfuse::kit::Error(DLFUSE_STATUS_INTERNAL, "batch reduction table is uneven");
    // Header: only C moves per batch (no bias, residual or pre in a gradient GEMM).
    table.insert(table.end(), {dot(ci, g_batch), 0, 0, 0});
    table.insert(table.end(), terms[size_t(l)].begin(), terms[size_t(l)].end());
    next_index(ci, op_batch);
  }
  return table;
}

}  // namespace dlfuse_plugin

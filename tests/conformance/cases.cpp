#include "cases.h"

namespace dlfuse_conformance {
namespace {

CaseSpec mm(const std::string& name, OpKind op, int64_t M, int64_t K, int64_t N,
            std::vector<int64_t> bias) {
  CaseSpec s;
  s.name = name;
  s.op = op;
  s.M = M;
  s.K = K;
  s.N = N;
  s.bias_shape = std::move(bias);
  return s;
}

CaseSpec am(const std::string& name, OpKind op, std::vector<int64_t> x, std::vector<int64_t> y,
            std::vector<int64_t> bias, int act = DLFUSE_ACT_RELU, double mult = 0.5) {
  CaseSpec s;
  s.name = name;
  s.op = op;
  s.x_shape = std::move(x);
  s.y_shape = std::move(y);
  s.bias_shape = std::move(bias);
  s.act = act;
  s.multiplier = mult;
  return s;
}

template <class F> CaseSpec with(CaseSpec s, F f) {
  f(s);
  return s;
}

std::vector<CaseSpec> matmul_cases(OpKind op) {
  const bool bwd = op == OpKind::kMatmulBackward;
  std::vector<CaseSpec> c = {
      mm("plain_2d", op, 5, 7, 3, {3}),
      mm("square_64", op, 64, 64, 64, {64}),
      mm("medium_128", op, 128, 96, 128, {1, 128}),
      mm("bias_1xN", op, 6, 5, 4, {1, 4}),
      mm("bias_Mx1", op, 6, 5, 4, {6, 1}),
      mm("bias_MxN", op, 6, 5, 4, {6, 4}),
      with(mm("batch_broadcast", op, 4, 6, 5, {5}), [](CaseSpec& s) { s.a_batch = {2, 1}; s.b_batch = {3}; }),
      with(mm("bias_full_batched", op, 4, 3, 5, {2, 4, 5}), [](CaseSpec& s) { s.a_batch = {2}; s.b_batch = {2}; }),
      with(mm("bias_batch_bcast", op, 4, 3, 5, {3, 1, 5}), [](CaseSpec& s) { s.a_batch = {3}; }),
      with(mm("b_batched_a_2d", op, 4, 3, 5, {4, 1}), [](CaseSpec& s) { s.b_batch = {3}; }),
      mm("size_one_dims", op, 1, 1, 1, {1}),
      with(mm("size_one_batch", op, 3, 4, 2, {2}), [](CaseSpec& s) { s.a_batch = {1}; s.b_batch = {4}; }),
      mm("zero_M", op, 0, 4, 3, {3}),
      mm("zero_N", op, 4, 3, 0, {0}),
      mm("zero_K", op, 4, 0, 3, {4, 3}),
      with(mm("zero_batch", op, 3, 2, 4, {4}), [](CaseSpec& s) { s.a_batch = {0}; }),
      with(mm("padded_rows", op, 9, 6, 7, {9, 7}), [&](CaseSpec& s) {
        for (const char* r : {"a", "b", "bias", "out", "grad_out", "grad_a", "grad_b", "grad_bias"})
          s.layout[r] = Layout::kPadded;
      }),
      with(mm("transposed_a", op, 8, 5, 6, {6}), [](CaseSpec& s) { s.layout["a"] = Layout::kTransposed; }),
      with(mm("transposed_b", op, 8, 5, 6, {6}), [](CaseSpec& s) { s.layout["b"] = Layout::kTransposed; }),
      with(mm("transposed_all", op, 8, 5, 6, {8, 6}), [&](CaseSpec& s) {
        for (const char* r : {"a", "b", "bias", "out", "grad_out", "grad_a", "grad_b", "grad_bias"})
          s.layout[r] = Layout::kTransposed;
      }),
      with(mm("explicit_strides", op, 5, 4, 3, {3}), [&](CaseSpec& s) {
        for (const char* r : {"a", "b", "bias", "out", "grad_out", "grad_a", "grad_b", "grad_bias"})
          s.layout[r] = Layout::kCompactExplicit;
      }),
      with(mm("zero_stride_inputs", op, 6, 4, 5, {6, 5}), [&](CaseSpec& s) {
        s.layout["a"] = Layout::kZeroStride;
        s.layout[bwd ? "grad_out" : "bias"] = Layout::kZeroStride;
      }),
      with(mm("byte_offset", op, 5, 6, 4, {4}), [&](CaseSpec& s) {
        int64_t k = 1;
        for (const char* r : {"a", "b", "bias", "out", "grad_out", "grad_a", "grad_b", "grad_bias"})
          s.offset[r] = k += 2;
      }),
      with(mm("generic_call", op, 5, 7, 3, {3}), [](CaseSpec& s) { s.generic_call = true; }),
  };
  // A long sum of same-signed terms (docs/ops.md, "Tolerances"): an accumulator of the
  // storage dtype stalls far outside the tolerance. Forward sums over K, backward over M.
  c.push_back(with(bwd ? mm("accum_long_positive", op, 4096, 2, 2, {2}) : mm("accum_long_positive", op, 2, 4096, 2, {2}),
                   [](CaseSpec& s) { s.positive = true; }));
  if (!bwd) {
    c.push_back(with(mm("nan_inf", op, 6, 5, 4, {4}), [](CaseSpec& s) { s.special = Special::kNanInf; }));
    c.push_back(with(mm("out_transposed", op, 7, 3, 5, {5}), [](CaseSpec& s) { s.layout["out"] = Layout::kTransposed; }));
    return c;
  }
  for (const char* g : {"grad_a", "grad_b", "grad_bias"})
    c.push_back(with(mm(std::string("absent_") + g, op, 5, 4, 6, {6}), [&](CaseSpec& s) { s.absent = {g}; }));
  c.push_back(with(mm("absent_all", op, 5, 4, 6, {6}), [](CaseSpec& s) { s.absent = {"grad_a", "grad_b", "grad_bias"}; }));
  c.push_back(with(mm("only_grad_bias_batched", op, 4, 3, 5, {5}), [](CaseSpec& s) {
    s.a_batch = {2};
    s.b_batch = {2};
    s.absent = {"grad_a", "grad_b"};
  }));
  c.push_back(with(mm("relu_select", op, 8, 5, 7, {7}), [](CaseSpec& s) { s.special = Special::kReluSelect; }));
  return c;
}

std::vector<CaseSpec> add_mul_cases(OpKind op) {
  const bool bwd = op == OpKind::kAddMulBackward;
  std::vector<CaseSpec> c;
  for (int act = 0; act < DLFUSE_ACT_COUNT; ++act)
    c.push_back(am(std::string("act_") + activation_name(act), op, {9, 17}, {9, 17}, {17}, act));
  c.push_back(am("mult_zero", op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_RELU, 0.0));
  // 0 * Inf is NaN: a kernel must not drop the multiplier's term when it is 0.
  if (!bwd)
    c.push_back(with(am("mult_zero_inf", op, {4, 6}, {4, 6}, {6}, DLFUSE_ACT_RELU, 0.0),
                     [](CaseSpec& s) { s.special = Special::kNanInf; }));
  c.push_back(am("mult_negative", op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_RELU, -1.25));
  c.push_back(am("mult_one", op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_SIGMOID, 1.0));
  // Not dyadic, so never with relu's backward (the select would depend on rounding).
  c.push_back(am("mult_nondyadic", op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_GELU_TANH, 0.3));
  c.push_back(am("medium_256", op, {256, 256}, {256, 256}, {256}, DLFUSE_ACT_SILU, 0.75));
  c.push_back(am("bcast_col_row", op, {6, 1}, {1, 5}, {6, 5}, DLFUSE_ACT_TANH));
  c.push_back(am("bcast_x_vector", op, {5}, {6, 5}, {1}, DLFUSE_ACT_RELU));
  c.push_back(am("bcast_batch_3d", op, {2, 4, 5}, {4, 5}, {5}, DLFUSE_ACT_GELU_ERF));
  c.push_back(am("bcast_bias_1x1", op, {3, 4, 5}, {3, 4, 5}, {1, 1}, DLFUSE_ACT_IDENTITY, -2.0));
  c.push_back(am("bias_scalar_0d", op, {4, 5}, {4, 5}, {}, DLFUSE_ACT_RELU));
  c.push_back(am("size_one", op, {1, 1}, {1, 1}, {1}, DLFUSE_ACT_SIGMOID));
  c.push_back(am("zero_M", op, {0, 5}, {0, 5}, {5}));
  c.push_back(am("zero_N", op, {4, 0}, {4, 0}, {0}));
  c.push_back(with(am("padded_rows", op, {7, 6}, {7, 6}, {7, 6}, DLFUSE_ACT_TANH), [](CaseSpec& s) {
    for (const char* r : {"x", "y", "bias", "out", "grad_out", "grad_x", "grad_y", "grad_bias"})
      s.layout[r] = Layout::kPadded;
  }));
  c.push_back(with(am("transposed", op, {7, 6}, {7, 6}, {6}, DLFUSE_ACT_SILU), [](CaseSpec& s) {
    for (const char* r : {"x", "out", "grad_out", "grad_x"}) s.layout[r] = Layout::kTransposed;
  }));
  c.push_back(with(am("zero_stride_inputs", op, {6, 5}, {6, 5}, {6, 5}, DLFUSE_ACT_RELU), [](CaseSpec& s) {
    s.layout["y"] = Layout::kZeroStride;
    s.layout["bias"] = Layout::kZeroStride;
    s.layout["grad_out"] = Layout::kZeroStride;
  }));
  c.push_back(with(am("byte_offset", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_GELU_TANH), [](CaseSpec& s) {
    int64_t k = 0;
    for (const char* r : {"x", "y", "bias", "out", "grad_out", "grad_x", "grad_y", "grad_bias"})
      s.offset[r] = k += 3;
  }));
  c.push_back(with(am("generic_call_default_mult", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_RELU, 1.0),
                   [](CaseSpec& s) { s.generic_call = true; }));
  c.push_back(with(am("generic_call", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_SIGMOID, -0.5),
                   [](CaseSpec& s) { s.generic_call = true; }));
  if (!bwd) {
    c.push_back(with(am("in_place", op, {8, 9}, {8, 9}, {9}, DLFUSE_ACT_RELU), [](CaseSpec& s) { s.in_place = true; }));
    c.push_back(with(am("in_place_padded", op, {8, 9}, {8, 9}, {9}, DLFUSE_ACT_GELU_ERF), [](CaseSpec& s) {
      s.in_place = true;
      s.layout["x"] = Layout::kPadded;
      s.offset["x"] = 5;
    }));
    for (int act = 0; act < DLFUSE_ACT_COUNT; ++act)
      c.push_back(with(am(std::string("nan_inf_") + activation_name(act), op, {4, 6}, {4, 6}, {6}, act),
                       [](CaseSpec& s) { s.special = Special::kNanInf; }));
    return c;
  }
  for (const char* g : {"grad_x", "grad_y", "grad_bias"})
    c.push_back(with(am(std::string("absent_") + g, op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_SIGMOID, -1.5),
                     [&](CaseSpec& s) { s.absent = {g}; }));
  c.push_back(with(am("absent_all", op, {6, 5}, {6, 5}, {5}), [](CaseSpec& s) {
    s.absent = {"grad_x", "grad_y", "grad_bias"};
  }));
  c.push_back(with(am("reduce_long_positive", op, {8192, 2}, {8192, 2}, {2}, DLFUSE_ACT_IDENTITY, 0.5),
                   [](CaseSpec& s) { s.positive = true; }));
  c.push_back(with(am("relu_select", op, {8, 9}, {8, 9}, {9}, DLFUSE_ACT_RELU, 0.5),
                   [](CaseSpec& s) { s.special = Special::kReluSelect; }));
  // Row counts that do not divide evenly into a plugin's chunks of rows: the OpenCL plugin
  // once summed grad_y/grad_bias over more chunks than it wrote, reading stale scratch
  // (about 1 call in 30 wrong). tests/conformance/CMakeLists.txt runs these 32 times.
  c.push_back(am("rows_chunks_169x173_relu", op, {169, 173}, {1, 173}, {173}, DLFUSE_ACT_RELU, 0.5));
  c.push_back(am("rows_chunks_2x130x146_sigmoid", op, {2, 130, 146}, {146}, {146}, DLFUSE_ACT_SIGMOID, 0.5));
  c.push_back(am("rows_chunks_171x146_gelu", op, {171, 146}, {171, 146}, {146}, DLFUSE_ACT_GELU_ERF, 0.5));
  return c;
}

}  // namespace

std::vector<CaseSpec> cases_for(OpKind op) {
  return op == OpKind::kMatmul || op == OpKind::kMatmulBackward ? matmul_cases(op) : add_mul_cases(op);
}

}  // namespace dlfuse_conformance

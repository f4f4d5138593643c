#include "cases.h"

namespace dlfuse_conformance {
namespace {

CaseSpec mm(const std::string& name, OpKind op, int64_t M, int64_t K, int64_t N, std::vector<int64_t> bias) {
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

template <class F>
CaseSpec with(CaseSpec s, F f) {
  f(s);
  return s;
}

// Every role a matmul case may lay out, ABI 1.0's first (byte_offset numbers them in order).
const char* const kMatmulRoles[] = {"a",      "b",         "bias", "out",      "grad_out",     "grad_a",
                                    "grad_b", "grad_bias", "pre",  "residual", "grad_residual"};

// The cases every matmul op shares: shapes, broadcasting, batches, zero sizes, layouts.
std::vector<CaseSpec> matmul_cases(OpKind op) {
  const bool bwd = is_backward_op(op);
  std::vector<CaseSpec> c = {
      mm("plain_2d", op, 5, 7, 3, {3}),
      mm("square_64", op, 64, 64, 64, {64}),
      mm("medium_128", op, 128, 96, 128, {1, 128}),
      mm("bias_1xN", op, 6, 5, 4, {1, 4}),
      mm("bias_Mx1", op, 6, 5, 4, {6, 1}),
      mm("bias_MxN", op, 6, 5, 4, {6, 4}),
      with(mm("batch_broadcast", op, 4, 6, 5, {5}),
           [](CaseSpec& s) {
             s.a_batch = {2, 1};
             s.b_batch = {3};
           }),
      with(mm("bias_full_batched", op, 4, 3, 5, {2, 4, 5}),
           [](CaseSpec& s) {
             s.a_batch = {2};
             s.b_batch = {2};
           }),
      with(mm("bias_batch_bcast", op, 4, 3, 5, {3, 1, 5}), [](CaseSpec& s) { s.a_batch = {3}; }),
      with(mm("b_batched_a_2d", op, 4, 3, 5, {4, 1}), [](CaseSpec& s) { s.b_batch = {3}; }),
      mm("size_one_dims", op, 1, 1, 1, {1}),
      with(mm("size_one_batch", op, 3, 4, 2, {2}),
           [](CaseSpec& s) {
             s.a_batch = {1};
             s.b_batch = {4};
           }),
      mm("zero_M", op, 0, 4, 3, {3}),
      mm("zero_N", op, 4, 3, 0, {0}),
      mm("zero_K", op, 4, 0, 3, {4, 3}),
      with(mm("zero_batch", op, 3, 2, 4, {4}), [](CaseSpec& s) { s.a_batch = {0}; }),
      with(mm("padded_rows", op, 9, 6, 7, {9, 7}),
           [&](CaseSpec& s) {
             for (const char* r : kMatmulRoles) s.layout[r] = Layout::kPadded;
           }),
      with(mm("transposed_a", op, 8, 5, 6, {6}), [](CaseSpec& s) { s.layout["a"] = Layout::kTransposed; }),
      with(mm("transposed_b", op, 8, 5, 6, {6}), [](CaseSpec& s) { s.layout["b"] = Layout::kTransposed; }),
      with(mm("transposed_all", op, 8, 5, 6, {8, 6}),
           [&](CaseSpec& s) {
             for (const char* r : kMatmulRoles) s.layout[r] = Layout::kTransposed;
           }),
      with(mm("explicit_strides", op, 5, 4, 3, {3}),
           [&](CaseSpec& s) {
             for (const char* r : kMatmulRoles) s.layout[r] = Layout::kCompactExplicit;
           }),
      with(mm("zero_stride_inputs", op, 6, 4, 5, {6, 5}),
           [&](CaseSpec& s) {
             s.layout["a"] = Layout::kZeroStride;
             s.layout[bwd ? "grad_out" : "bias"] = Layout::kZeroStride;
           }),
      with(mm("byte_offset", op, 5, 6, 4, {4}),
           [&](CaseSpec& s) {
             int64_t k = 1;
             for (const char* r : kMatmulRoles) s.offset[r] = k += 2;
           }),
      with(mm("generic_call", op, 5, 7, 3, {3}), [](CaseSpec& s) { s.generic_call = true; }),
  };
  // A batched GEMM past the CUDA plugin's small-GEMM kernel (2^18 multiply-adds) whose
  // bias rows are padded to 19 elements: in 16-bit dtypes each batch's bias but the first is
  // at a 2-byte address, which the kernel cuBLASLt is asked for must be able to read.
  if (!bwd)
    c.push_back(with(mm("bias_batch_padded_gemm", op, 7, 1024, 16, {3, 1, 16}), [](CaseSpec& s) {
      s.a_batch = {3};
      s.b_batch = {3};
      s.layout["bias"] = Layout::kPadded;
    }));
  // Batch dims that do not collapse into one strided-batched cuBLASLt call (a broadcast
  // over 2x3x4 in turn), past the small-GEMM kernel, with a bias that repeats over the first
  // dim: each outer call must be given its own bias, also where its offset is back at 0.
  if (!bwd)
    c.push_back(with(mm("bias_outer_broadcast_gemm", op, 3, 1025, 5, {2, 3, 4, 1, 5}), [](CaseSpec& s) {
      s.a_batch = {2, 3, 1};
      s.b_batch = {1, 3, 4};
      s.layout["bias"] = Layout::kZeroStride;
      s.offset["bias"] = 1;
    }));
  // A long sum of same-signed terms (docs/ops.md, "Tolerances"): an accumulator of the
  // storage dtype stalls far outside the tolerance. Forward sums over K, backward over M.
  c.push_back(
      with(bwd ? mm("accum_long_positive", op, 4096, 2, 2, {2}) : mm("accum_long_positive", op, 2, 4096, 2, {2}),
           [](CaseSpec& s) { s.positive = true; }));
  // The longest sum the CUDA plugin's small-GEMM kernel takes (K = 1024, one thread's chain).
  c.push_back(
      with(bwd ? mm("accum_k1024_positive", op, 1024, 3, 5, {5}) : mm("accum_k1024_positive", op, 3, 1024, 5, {5}),
           [](CaseSpec& s) { s.positive = true; }));
  // A 13-wide K (26-byte rows in 16-bit dtypes), large enough that the CUDA plugin runs its
  // GEMMs on copies with 16-byte rows (at least 64 multiply-adds per element copied); the
  // weight's transpose in the weight's layout too (13-element rows of b, grad_b and grad_a).
  // matmul_add_relu's pair only: every matmul op's GEMMs take the same path.
  if (op == OpKind::kMatmul || op == OpKind::kMatmulBackward) {
    c.push_back(mm("unaligned_k13", op, 256, 13, 192, {192}));
    c.push_back(with(mm("unaligned_k13_transposed_b", op, 256, 13, 192, {192}), [](CaseSpec& s) {
      s.layout["b"] = Layout::kTransposed;
      s.layout["grad_b"] = Layout::kTransposed;
    }));
  }
  // K rows of 287 elements (not 16-byte rows in any dtype) and enough work that the CUDA
  // plugin pads its operands, with a bias that varies along M: the bias (and a residual)
  // reach the GEMM as its addend in D, which the padded copy of D must keep. Every matmul
  // op: each adds its bias (and residual) its own way.
  c.push_back(mm("unaligned_k287_bias_Mx1", op, 219, 287, 202, {219, 1}));
  c.push_back(mm("unaligned_k287_bias_MxN", op, 219, 287, 202, {219, 202}));
  // The same over a grid (--grid): rows of every alignment, sizes either side of the work
  // at which the CUDA plugin starts to pad, vectors (N = 1) and K up to 1024.
  for (int64_t M : {17, 64, 219, 256, 1000})
    for (int64_t K : {13, 16, 255, 287, 300, 1024})
      for (int64_t N : {1, 64, 130, 202, 256})
        for (bool full : {false, true}) {
          const std::string name = "grid_" + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) +
                                   (full ? "_bias_MxN" : "_bias_Mx1");
          c.push_back(with(mm(name, op, M, K, N, full ? std::vector<int64_t>{M, N} : std::vector<int64_t>{M, 1}),
                           [](CaseSpec& s) { s.grid = true; }));
        }
  if (!bwd) {
    c.push_back(with(mm("nan_inf", op, 6, 5, 4, {4}), [](CaseSpec& s) { s.special = Special::kNanInf; }));
    c.push_back(
        with(mm("out_transposed", op, 7, 3, 5, {5}), [](CaseSpec& s) { s.layout["out"] = Layout::kTransposed; }));
    return c;
  }
  std::vector<std::string> grads = {"grad_a", "grad_b", "grad_bias"};
  if (op == OpKind::kMatmulResidualBackward) grads.push_back("grad_residual");
  for (const std::string& g : grads)
    c.push_back(with(mm("absent_" + g, op, 5, 4, 6, {6}), [&](CaseSpec& s) { s.absent = {g}; }));
  c.push_back(
      with(mm("absent_all", op, 5, 4, 6, {6}), [&](CaseSpec& s) { s.absent.insert(grads.begin(), grads.end()); }));
  // Saved tensors and incoming gradients that are column slices (16-byte rows: a GPU plugin
  // may copy them compact with vectors), and a bias gradient summed over many rows.
  c.push_back(with(mm("column_slice_grad_out", op, 9, 6, 16, {16}),
                   [](CaseSpec& s) { s.layout["grad_out"] = Layout::kColumnSlice; }));
  c.push_back(with(mm("column_slice_saved", op, 9, 6, 16, {16}), [](CaseSpec& s) {
    s.layout["out"] = Layout::kColumnSlice;
    s.layout["pre"] = Layout::kColumnSlice;
  }));
  c.push_back(mm("many_rows_row_bias", op, 16384, 3, 8, {8}));
  // grad_out of a sum: one element seen as [M, N] (every stride 0).
  c.push_back(with(mm("broadcast_grad_out", op, 33, 6, 16, {16}),
                   [](CaseSpec& s) { s.layout["grad_out"] = Layout::kBroadcast; }));
  c.push_back(with(mm("only_grad_bias_batched", op, 4, 3, 5, {5}), [&](CaseSpec& s) {
    s.a_batch = {2};
    s.b_batch = {2};
    s.absent.insert(grads.begin(), grads.end());
    s.absent.erase("grad_bias");
  }));
  if (op != OpKind::kMatmulResidualBackward)
    c.push_back(with(mm("relu_select", op, 8, 5, 7, {7}), [](CaseSpec& s) { s.special = Special::kReluSelect; }));
  return c;
}

std::vector<int64_t> out_shape_of(const CaseSpec& s) {
  std::vector<int64_t> out;
  broadcast_shapes(s.a_batch, s.b_batch, &out);
  out.push_back(s.M);
  out.push_back(s.N);
  return out;
}

const char* const kFromOutActs[] = {"identity", "relu", "sigmoid", "tanh"};

// matmul_add_activation: the shared cases with the activations in turn, then every
// activation, NaN/Inf, pre absent or laid out its own way.
std::vector<CaseSpec> matmul_activation_cases() {
  const OpKind op = OpKind::kMatmulAct;
  std::vector<CaseSpec> c = matmul_cases(op);
  for (size_t i = 0; i < c.size(); ++i) c[i].act = int(i % DLFUSE_ACT_COUNT);
  for (int act = 0; act < DLFUSE_ACT_COUNT; ++act) {
    const std::string a = activation_name(act);
    c.push_back(with(mm("act_" + a, op, 9, 11, 13, {13}), [&](CaseSpec& s) { s.act = act; }));
    c.push_back(with(mm("no_pre_" + a, op, 6, 5, 7, {6, 1}), [&](CaseSpec& s) {
      s.act = act;
      s.absent = {"pre"};
    }));
    c.push_back(with(mm("nan_inf_" + a, op, 6, 5, 4, {4}), [&](CaseSpec& s) {
      s.act = act;
      s.special = Special::kNanInf;
    }));
  }
  c.push_back(with(mm("pre_transposed", op, 7, 4, 5, {5}), [](CaseSpec& s) {
    s.act = DLFUSE_ACT_TANH;
    s.layout["pre"] = Layout::kTransposed;
    s.offset["pre"] = 3;
  }));
  c.push_back(with(mm("generic_call_no_pre", op, 5, 7, 3, {3}), [](CaseSpec& s) {
    s.act = DLFUSE_ACT_GELU_TANH;
    s.generic_call = true;
    s.absent = {"pre"};
  }));
  // Past the CUDA plugin's small-GEMM kernel (2^19 multiply-adds), pre at an 8-byte address
  // in 16-bit dtypes: cuBLASLt's GELU epilogue must not be handed it as its aux output.
  c.push_back(with(mm("pre_offset4_gemm", op, 128, 64, 64, {64}), [](CaseSpec& s) {
    s.act = DLFUSE_ACT_GELU_TANH;
    s.offset["pre"] = 4;
  }));
  return c;
}

// matmul_add_activation_backward: pre form with the activations in turn on the shared
// cases, then every activation from pre and the four from out, relu's select both ways.
std::vector<CaseSpec> matmul_activation_backward_cases() {
  const OpKind op = OpKind::kMatmulActBackward;
  std::vector<CaseSpec> c = matmul_cases(op);
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].special == Special::kNone) c[i].act = int(i % DLFUSE_ACT_COUNT);
  for (int act = 0; act < DLFUSE_ACT_COUNT; ++act)
    c.push_back(
        with(mm(std::string("pre_") + activation_name(act), op, 9, 11, 13, {13}), [&](CaseSpec& s) { s.act = act; }));
  for (int act = 0; act < DLFUSE_ACT_COUNT; ++act) {
    if (!derivative_from_out(act)) continue;
    c.push_back(with(mm(std::string("from_out_") + activation_name(act), op, 9, 11, 13, {13}), [&](CaseSpec& s) {
      s.act = act;
      s.from_out = true;
    }));
  }
  auto out_form = [](int act) {
    return [act](CaseSpec& s) {
      s.act = act;
      s.from_out = true;
    };
  };
  c.push_back(with(mm("relu_select_from_out", op, 8, 5, 7, {7}), [](CaseSpec& s) {
    s.special = Special::kReluSelect;
    s.from_out = true;
  }));
  c.push_back(
      with(with(mm("from_out_batch_broadcast", op, 4, 6, 5, {3, 1, 5}), out_form(DLFUSE_ACT_TANH)), [](CaseSpec& s) {
        s.a_batch = {2, 1};
        s.b_batch = {3};
      }));
  c.push_back(with(mm("from_out_bias_Mx1", op, 6, 5, 4, {6, 1}), out_form(DLFUSE_ACT_SIGMOID)));
  c.push_back(with(with(mm("from_out_transposed", op, 8, 5, 6, {6}), out_form(DLFUSE_ACT_TANH)), [](CaseSpec& s) {
    for (const char* r : {"out", "grad_out", "grad_a"}) s.layout[r] = Layout::kTransposed;
  }));
  c.push_back(with(with(mm("from_out_byte_offset", op, 5, 6, 4, {4}), out_form(DLFUSE_ACT_SIGMOID)), [](CaseSpec& s) {
    int64_t k = 1;
    for (const char* r : kMatmulRoles) s.offset[r] = k += 2;
  }));
  c.push_back(with(with(mm("from_out_generic_call", op, 5, 7, 3, {3}), out_form(DLFUSE_ACT_IDENTITY)),
                   [](CaseSpec& s) { s.generic_call = true; }));
  c.push_back(with(with(mm("from_out_absent_grad_a", op, 5, 4, 6, {6}), out_form(DLFUSE_ACT_TANH)),
                   [](CaseSpec& s) { s.absent = {"grad_a"}; }));
  c.push_back(with(mm("from_out_zero_K", op, 4, 0, 3, {4, 3}), out_form(DLFUSE_ACT_SIGMOID)));
  // Outputs of 2^26 elements or more: the CUDA plugin's dZ pass takes its flat, group-reduced
  // form there (8193 rows: a last group of one row block).
  c.push_back(with(mm("large_pre_gelu_tanh", op, 8193, 3, 8192, {8192}), [](CaseSpec& s) {
    s.act = DLFUSE_ACT_GELU_TANH;
    s.large = true;
  }));
  return c;
}

// matmul_add_residual: the shared cases with a full residual, then broadcast residuals
// and in place (out is the residual's very view).
std::vector<CaseSpec> matmul_residual_cases() {
  const OpKind op = OpKind::kMatmulResidual;
  std::vector<CaseSpec> c = matmul_cases(op);
  for (CaseSpec& s : c) s.residual_shape = out_shape_of(s);
  auto res = [](std::vector<int64_t> shape) { return [shape](CaseSpec& s) { s.residual_shape = shape; }; };
  c.push_back(with(mm("residual_N", op, 6, 5, 4, {6, 4}), res({4})));
  c.push_back(with(mm("residual_Mx1", op, 6, 5, 4, {4}), res({6, 1})));
  c.push_back(with(mm("residual_scalar_0d", op, 6, 5, 4, {4}), res({})));
  c.push_back(
      with(with(mm("residual_batch_bcast", op, 4, 3, 5, {5}), res({3, 1, 5})), [](CaseSpec& s) { s.a_batch = {3}; }));
  c.push_back(with(with(mm("residual_zero_stride", op, 6, 4, 5, {5}), res({6, 5})),
                   [](CaseSpec& s) { s.layout["residual"] = Layout::kZeroStride; }));
  c.push_back(with(with(mm("residual_transposed", op, 7, 3, 5, {5}), res({7, 5})), [](CaseSpec& s) {
    s.layout["residual"] = Layout::kTransposed;
    s.offset["residual"] = 2;
  }));
  c.push_back(with(with(mm("in_place", op, 8, 6, 9, {9}), res({8, 9})), [](CaseSpec& s) { s.in_place = true; }));
  c.push_back(with(with(mm("in_place_padded", op, 8, 6, 9, {8, 1}), res({8, 9})), [](CaseSpec& s) {
    s.in_place = true;
    s.layout["residual"] = Layout::kPadded;
    s.offset["residual"] = 5;
  }));
  c.push_back(with(with(mm("in_place_batched", op, 4, 6, 5, {5}), res({2, 3, 4, 5})), [](CaseSpec& s) {
    s.a_batch = {2, 1};
    s.b_batch = {3};
    s.in_place = true;
  }));
  c.push_back(with(with(mm("in_place_transposed", op, 7, 3, 5, {5}), res({7, 5})), [](CaseSpec& s) {
    s.in_place = true;
    s.layout["residual"] = Layout::kTransposed;
  }));
  c.push_back(with(with(mm("in_place_zero_K", op, 4, 0, 3, {3}), res({4, 3})), [](CaseSpec& s) { s.in_place = true; }));
  // A cuBLASLt GEMM (past the small-GEMM kernel) whose residual, its C, is at an 8-byte
  // address in 16-bit dtypes while D is aligned: C's alignment chooses the algorithm.
  c.push_back(with(with(mm("residual_offset4_gemm", op, 128, 64, 64, {64}), res({128, 64})),
                   [](CaseSpec& s) { s.offset["residual"] = 4; }));
  // A cuBLASLt GEMM whose out has rows 259 elements apart (518 bytes in 16-bit dtypes) beside
  // a compact residual, its C, and a at a 4-byte address: each of D's columns as cuBLASLt
  // sees them, not only its base, sets the alignment its kernel must take.
  c.push_back(with(with(mm("residual_padded_out_gemm", op, 256, 64, 256, {256}), res({256, 256})), [](CaseSpec& s) {
    s.layout["out"] = Layout::kPadded;
    s.offset["a"] = 2;
  }));
  // In place on the padded path (above): the residual is D itself, bias along N or M.
  c.push_back(with(with(mm("in_place_unaligned_k287", op, 219, 287, 202, {202}), res({219, 202})),
                   [](CaseSpec& s) { s.in_place = true; }));
  c.push_back(with(with(mm("in_place_unaligned_k287_bias_Mx1", op, 219, 287, 202, {219, 1}), res({219, 202})),
                   [](CaseSpec& s) { s.in_place = true; }));
  return c;
}

// matmul_add_residual_backward: the shared cases (grad_residual full), then grad_residual
// reduced over broadcast dims.
std::vector<CaseSpec> matmul_residual_backward_cases() {
  const OpKind op = OpKind::kMatmulResidualBackward;
  std::vector<CaseSpec> c = matmul_cases(op);
  for (CaseSpec& s : c) s.residual_shape = out_shape_of(s);
  auto res = [](std::vector<int64_t> shape) { return [shape](CaseSpec& s) { s.residual_shape = shape; }; };
  c.push_back(with(mm("grad_residual_N", op, 6, 5, 4, {6, 4}), res({4})));
  c.push_back(with(mm("grad_residual_Mx1", op, 6, 5, 4, {4}), res({6, 1})));
  c.push_back(with(mm("grad_residual_scalar_0d", op, 6, 5, 4, {4}), res({})));
  c.push_back(with(with(mm("grad_residual_batch_bcast", op, 4, 3, 5, {5}), res({3, 1, 5})),
                   [](CaseSpec& s) { s.a_batch = {3}; }));
  c.push_back(with(with(mm("grad_residual_batch_dropped", op, 4, 6, 5, {1, 5}), res({4, 5})), [](CaseSpec& s) {
    s.a_batch = {2, 1};
    s.b_batch = {3};
  }));
  c.push_back(with(with(mm("only_grad_residual", op, 6, 5, 4, {4}), res({6, 1})), [](CaseSpec& s) {
    s.absent = {"grad_a", "grad_b", "grad_bias"};
  }));
  c.push_back(with(with(mm("grad_residual_padded", op, 9, 6, 7, {7}), res({9, 7})), [](CaseSpec& s) {
    s.layout["grad_residual"] = Layout::kPadded;
    s.offset["grad_residual"] = 4;
  }));
  c.push_back(with(mm("accum_long_positive_residual", op, 4096, 2, 2, {2}), [](CaseSpec& s) {
    s.residual_shape = {1, 2};
    s.positive = true;
    s.absent = {"grad_a", "grad_b", "grad_bias"};
  }));
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
  // Rows a multiple of 4 wide: the vectorized forms, over a grid that stays 3-D (y's batch
  // stride 0 keeps dims 0 and 1 apart).
  c.push_back(am("bcast_batch_3d_vec4", op, {3, 4, 8}, {4, 8}, {8}, DLFUSE_ACT_SILU));
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
    for (const char* r : {"x", "y", "bias", "out", "grad_out", "grad_x", "grad_y", "grad_bias"}) s.offset[r] = k += 3;
  }));
  c.push_back(with(am("generic_call_default_mult", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_RELU, 1.0),
                   [](CaseSpec& s) { s.generic_call = true; }));
  c.push_back(with(am("generic_call", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_SIGMOID, -0.5),
                   [](CaseSpec& s) { s.generic_call = true; }));
  if (!bwd) {
    c.push_back(with(am("in_place", op, {8, 9}, {8, 9}, {9}, DLFUSE_ACT_RELU), [](CaseSpec& s) { s.in_place = true; }));
    c.push_back(
        with(am("in_place_vec4", op, {9, 12}, {9, 12}, {12}, DLFUSE_ACT_TANH), [](CaseSpec& s) { s.in_place = true; }));
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
  // Gradients of fewer dims than out (out has leading 1s) written in place of a reduction:
  // their strides must be read against out's dims (the WebGPU plugin once read them by the
  // gradient's own dims and scattered grad_bias).
  c.push_back(am("lower_rank_grad_bias", op, {1, 2, 2}, {1, 2, 2}, {2, 2}, DLFUSE_ACT_IDENTITY, 0.5));
  c.push_back(am("lower_rank_grad_y", op, {1, 2, 3}, {2, 3}, {1, 2, 3}, DLFUSE_ACT_SIGMOID, 0.5));
  c.push_back(am("lower_rank_grad_x", op, {2, 3}, {1, 2, 3}, {1, 2, 3}, DLFUSE_ACT_TANH, 0.5));
  c.push_back(am("lower_rank_4d", op, {1, 1, 3, 4}, {3, 4}, {1, 3, 4}, DLFUSE_ACT_SILU, 2.0));
  c.push_back(with(am("lower_rank_from_out", op, {1, 2, 3}, {2, 3}, {2, 3}, DLFUSE_ACT_TANH, 0.5),
                   [](CaseSpec& s) { s.from_out = true; }));
  c.push_back(
      with(am("lower_rank_grad_bias_strided", op, {1, 129, 64}, {1, 129, 64}, {129, 64}, DLFUSE_ACT_GELU_TANH, -1.25),
           [](CaseSpec& s) {
             s.layout["x"] = Layout::kZeroStride;
             s.layout["y"] = Layout::kPadded;
             s.offset["bias"] = 3;
             s.layout["grad_out"] = Layout::kZeroStride;
             s.absent = {"grad_x"};
           }));
  // pre from -3 to -8.5: Φ(p) = ½(1 + erf(p/√2)) cancels there, in a kernel that writes it
  // so (allowed: the tolerance counts the bracket's terms) and in a reference that would.
  c.push_back(with(am("gelu_erf_left_tail", op, {90112}, {90112}, {90112}, DLFUSE_ACT_GELU_ERF, 1.0),
                   [](CaseSpec& s) { s.special = Special::kLeftTail; }));
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
  // ABI 1.1 (only for a kernel that takes its inputs, DLFUSE_KERNEL_TAKES_V1_1_INPUTS): the out form.
  auto out_form = [](CaseSpec& s) { s.from_out = true; };
  for (int act = 0; act < DLFUSE_ACT_COUNT; ++act)
    if (derivative_from_out(act))
      c.push_back(with(am(std::string("from_out_") + activation_name(act), op, {9, 17}, {9, 17}, {17}, act), out_form));
  c.push_back(with(am("from_out_bcast_col_row", op, {6, 1}, {1, 5}, {6, 5}, DLFUSE_ACT_TANH), out_form));
  c.push_back(with(am("from_out_bcast_batch_3d", op, {2, 4, 5}, {4, 5}, {5}, DLFUSE_ACT_SIGMOID), out_form));
  c.push_back(with(am("from_out_bias_scalar_0d", op, {4, 5}, {4, 5}, {}, DLFUSE_ACT_IDENTITY, -1.25), out_form));
  c.push_back(with(am("from_out_relu_select", op, {8, 9}, {8, 9}, {9}, DLFUSE_ACT_RELU, 0.5), [](CaseSpec& s) {
    s.from_out = true;
    s.special = Special::kReluSelect;
  }));
  c.push_back(with(am("from_out_absent_grad_y", op, {6, 5}, {6, 5}, {5}, DLFUSE_ACT_SIGMOID, -1.5), [](CaseSpec& s) {
    s.from_out = true;
    s.absent = {"grad_y"};
  }));
  c.push_back(with(am("from_out_transposed", op, {7, 6}, {7, 6}, {6}, DLFUSE_ACT_TANH), [](CaseSpec& s) {
    s.from_out = true;
    for (const char* r : {"out", "grad_out", "grad_x"}) s.layout[r] = Layout::kTransposed;
  }));
  c.push_back(with(am("from_out_byte_offset", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_SIGMOID), [](CaseSpec& s) {
    s.from_out = true;
    int64_t k = 0;
    for (const char* r : {"out", "grad_out", "grad_x", "grad_y", "grad_bias"}) s.offset[r] = k += 3;
  }));
  c.push_back(with(am("from_out_zero_M", op, {0, 5}, {0, 5}, {5}, DLFUSE_ACT_TANH), out_form));
  c.push_back(with(am("from_out_reduce_long_positive", op, {8192, 2}, {8192, 2}, {2}, DLFUSE_ACT_IDENTITY, 0.5),
                   [](CaseSpec& s) {
                     s.from_out = true;
                     s.positive = true;
                   }));
  // 2^26 elements or more: the CUDA plugin's flat, group-reduced backward. 8193 rows leave a
  // last group of one row block; 4072 columns (not a multiple of 32) a partly idle column chunk.
  auto large_out_form = [](CaseSpec& s) {
    s.from_out = true;
    s.large = true;
  };
  c.push_back(
      with(am("from_out_large_relu", op, {8193, 8192}, {8193, 8192}, {8192}, DLFUSE_ACT_RELU, 0.5), large_out_form));
  c.push_back(with(am("from_out_large_bcast_x_tanh", op, {4072}, {16481, 4072}, {4072}, DLFUSE_ACT_TANH, -0.75),
                   large_out_form));
  c.push_back(with(am("from_out_generic_call", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_RELU, 1.0), [](CaseSpec& s) {
    s.from_out = true;
    s.generic_call = true;
  }));
  // A caller of ABI 1.1 passing five inputs, out NULL: the 1.0 form through the kernel's 1.1 signature.
  c.push_back(with(am("generic_call_v11_inputs", op, {5, 6}, {5, 6}, {6}, DLFUSE_ACT_GELU_ERF, -0.5), [](CaseSpec& s) {
    s.v11_inputs = true;
    s.generic_call = true;
  }));
  return c;
}

}  // namespace

std::vector<CaseSpec> cases_for(OpKind op) {
  switch (op) {
    case OpKind::kMatmulAct: return matmul_activation_cases();
    case OpKind::kMatmulActBackward: return matmul_activation_backward_cases();
    case OpKind::kMatmulResidual: return matmul_residual_cases();
    case OpKind::kMatmulResidualBackward: return matmul_residual_backward_cases();
    case OpKind::kMatmul:
    case OpKind::kMatmulBackward: return matmul_cases(op);
    default: return add_mul_cases(op);
  }
}

}  // namespace dlfuse_conformance

// Calls the registry must refuse with a status and a message before any kernel runs.
// Every buffer is real and large enough for the call as written, so a call that is wrongly
// accepted computes garbage instead of crashing (the overflow cases excepted: they cannot
// be made safe and come last).
#include <cstring>
#include <functional>

#include "cases.h"
#include "dtypes.h"

namespace dlfuse_conformance {
namespace {

constexpr size_t kBufferBytes = 4096;
constexpr int kBuffers = 10;

struct BadTensor {
  std::vector<int64_t> shape, strides;  // strides empty: NULL
  uint64_t byte_offset = 0;
  DLDataType dtype{};
  DLDevice dev{};
  int buffer = 0;
  bool null = false;
  DLTensor dl{};
};

struct BadCall {
  std::vector<BadTensor> ins, outs;
  std::vector<dlfuse_attr_t> attrs;
  bool typed = false;  // through the op's typed function, with this activation
  int typed_activation = 0;
  // Expected status when not only "refused": UNSUPPORTED for a valid call that a kernel
  // without ABI 1.1's inputs cannot take. DLFUSE_STATUS_OK: any refusal.
  dlfuse_status_t expect = DLFUSE_STATUS_OK;
};

dlfuse_attr_t attr_i(int32_t key, int64_t v) {
  dlfuse_attr_t a{};
  a.key = key;
  a.type = DLFUSE_ATTR_INT64;
  a.value.i64 = v;
  return a;
}
dlfuse_attr_t attr_f(int32_t key, double v) {
  dlfuse_attr_t a{};
  a.key = key;
  a.type = DLFUSE_ATTR_FLOAT64;
  a.value.f64 = v;
  return a;
}

constexpr int64_t M = 4, K = 3, N = 5;

BadCall base_call(OpKind op, DLDevice dev, DLDataType dt) {
  BadCall c;
  int next = 0;
  auto t = [&](std::vector<int64_t> shape) {
    BadTensor b;
    b.shape = std::move(shape);
    b.dtype = dt;
    b.dev = dev;
    b.buffer = next++;
    return b;
  };
  switch (op) {
    case OpKind::kMatmul:
      c.ins = {t({M, K}), t({K, N}), t({N})};
      c.outs = {t({M, N})};
      break;
    case OpKind::kMatmulBackward:
      c.ins = {t({M, N}), t({M, K}), t({K, N}), t({M, N})};
      c.outs = {t({M, K}), t({K, N}), t({N})};
      break;
    case OpKind::kAddMul:
      c.ins = {t({M, N}), t({M, N}), t({N})};
      c.outs = {t({M, N})};
      break;
    case OpKind::kAddMulBackward:
      c.ins = {t({M, N}), t({M, N}), t({M, N}), t({N})};
      c.outs = {t({M, N}), t({M, N}), t({N})};
      break;
    case OpKind::kMatmulAct:
      c.ins = {t({M, K}), t({K, N}), t({N})};
      c.outs = {t({M, N}), t({M, N})};
      break;
    case OpKind::kMatmulActBackward: {
      c.ins = {t({M, N}), t({M, K}), t({K, N}), t({M, N}), t({M, N})};
      c.ins[4].null = true;  // the out form; pre NULL
      c.outs = {t({M, K}), t({K, N}), t({N})};
      break;
    }
    case OpKind::kMatmulResidual:
      c.ins = {t({M, K}), t({K, N}), t({N}), t({M, N})};
      c.outs = {t({M, N})};
      break;
    case OpKind::kMatmulResidualBackward:
      c.ins = {t({M, N}), t({M, K}), t({K, N})};
      c.outs = {t({M, K}), t({K, N}), t({N}), t({M, N})};
      break;
  }
  if (op == OpKind::kAddMul || op == OpKind::kAddMulBackward)
    c.attrs = {attr_i(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU), attr_f(DLFUSE_ATTR_MULTIPLIER, 0.5)};
  if (op == OpKind::kMatmulAct || op == OpKind::kMatmulActBackward)
    c.attrs = {attr_i(DLFUSE_ATTR_ACTIVATION, DLFUSE_ACT_RELU)};
  return c;
}

// add_mul_activation_backward's ABI 1.1 out form: grad_out, NULL, NULL, NULL, out.
void to_out_form(BadCall& c) {
  BadTensor out = c.ins[0];
  out.buffer = kBuffers - 2;
  c.ins.push_back(out);
  for (int i = 1; i <= 3; ++i) c.ins[size_t(i)].null = true;
}

// The tensors of the base call whose first dim is M (size_overflow_bytes makes it 2^62).
std::vector<BadTensor*> tensors_with_m_rows(BadCall& c, OpKind op) {
  switch (op) {
    case OpKind::kMatmul: return {&c.ins[0], &c.outs[0]};
    case OpKind::kMatmulBackward: return {&c.ins[0], &c.ins[1], &c.ins[3], &c.outs[0]};
    case OpKind::kAddMul: return {&c.ins[0], &c.ins[1], &c.outs[0]};
    case OpKind::kAddMulBackward: return {&c.ins[0], &c.ins[1], &c.ins[2], &c.outs[0], &c.outs[1]};
    case OpKind::kMatmulAct: return {&c.ins[0], &c.outs[0], &c.outs[1]};
    case OpKind::kMatmulActBackward: return {&c.ins[0], &c.ins[1], &c.ins[3], &c.ins[4], &c.outs[0]};
    case OpKind::kMatmulResidual: return {&c.ins[0], &c.ins[3], &c.outs[0]};
    case OpKind::kMatmulResidualBackward: return {&c.ins[0], &c.ins[1], &c.outs[0], &c.outs[3]};
  }
  return {};
}

using Mutation = std::function<void(BadCall&)>;
struct BadCase {
  std::string name;
  Mutation mutate;
};

void for_all(BadCall& c, const std::function<void(BadTensor&)>& f) {
  for (auto& t : c.ins) f(t);
  for (auto& t : c.outs) f(t);
}

std::vector<BadCase> bad_cases(OpKind op, DLDevice dev, DLDataType dt, bool v11_inputs) {
  const bool fwd = !is_backward_op(op);
  const bool matmul = is_matmul_op(op);
  const bool takes_act = !matmul || op == OpKind::kMatmulAct || op == OpKind::kMatmulActBackward;
  const uint64_t es = dtype_size(dt);
  const int64_t huge = int64_t(1) << 62;
  std::vector<BadCase> v = {
      {"wrong_num_inputs", [](BadCall& c) { c.ins.pop_back(); }},
      {"extra_output",
       [](BadCall& c) {
         c.outs.push_back(c.outs[0]);
         c.outs.back().buffer = kBuffers - 1;
       }},
      {"null_input", [](BadCall& c) { c.ins[1].null = true; }},
      {"dtype_mismatch",
       [dt](BadCall& c) {
         c.ins[1].dtype = dt.bits == 64 ? DLDataType{kDLFloat, 32, 1} : DLDataType{kDLFloat, 64, 1};
       }},
      {"lanes_2", [](BadCall& c) { for_all(c, [](BadTensor& t) { t.dtype.lanes = 2; }); }},
      {"undeclared_dtype", [](BadCall& c) { for_all(c, [](BadTensor& t) {
                                              t.dtype = {kDLInt, 32, 1};
                                            }); }},
      {"device_id_mismatch", [](BadCall& c) { c.ins[1].dev.device_id += 1; }},
      {"device_type_mismatch",
       [dev](BadCall& c) { c.ins[1].dev.device_type = dev.device_type == kDLCPU ? kDLCUDA : kDLCPU; }},
      {"negative_stride",
       [es](BadCall& c) {
         // Rows walked backwards from the last one: every address stays inside the buffer.
         BadTensor& t = c.ins[1];
         t.strides = {-t.shape[1], 1};
         t.byte_offset = uint64_t(t.shape[0] - 1) * uint64_t(t.shape[1]) * es;
       }},
      {"negative_size", [](BadCall& c) { c.ins[1].shape[0] = -c.ins[1].shape[0]; }},
      {"wrong_output_shape", [](BadCall& c) { c.outs[0].shape.back() += 1; }},
      {"output_partial_overlap",
       [es](BadCall& c) {
         c.outs[0].buffer = c.ins[1].buffer;
         c.outs[0].byte_offset = es;
       }},
      {"bias_not_broadcastable",
       [op, fwd](BadCall& c) {
         // The backwards of matmul learn the bias's shape from grad_bias alone.
         if (fwd) c.ins[2].shape = {N + 1};
         if (op == OpKind::kAddMulBackward) c.ins[3].shape = {N + 1};
         if (!fwd) c.outs[2].shape = {N + 1};
       }},
  };
  if (fwd)
    v.push_back({"null_output", [](BadCall& c) { c.outs[0].null = true; }});
  else
    v.push_back({"outputs_overlap", [](BadCall& c) { c.outs[1].buffer = c.outs[0].buffer; }});
  if (matmul) {
    v.push_back({"k_mismatch", [fwd](BadCall& c) { c.ins[fwd ? 1 : 2].shape = {K + 1, N}; }});
    v.push_back({"ndim1_operand", [fwd](BadCall& c) { c.ins[fwd ? 0 : 1].shape = {K}; }});
    if (op == OpKind::kMatmulBackward || op == OpKind::kMatmulActBackward)
      v.push_back({"saved_out_shape", [](BadCall& c) { c.ins[3].shape = {M, N + 1}; }});
  }
  if (takes_act) {
    v.push_back({"unknown_activation_typed", [](BadCall& c) {
                   c.typed = true;
                   c.typed_activation = 99;
                 }});
    v.push_back({"negative_activation", [](BadCall& c) { c.attrs[0].value.i64 = -1; }});
    v.push_back({"missing_activation", [](BadCall& c) { c.attrs.erase(c.attrs.begin()); }});
  }
  if (op == OpKind::kMatmulAct) {
    v.push_back({"wrong_pre_shape", [](BadCall& c) { c.outs[1].shape = {M, N + 1}; }});
    v.push_back({"pre_is_out", [](BadCall& c) { c.outs[1].buffer = c.outs[0].buffer; }});
  }
  if (op == OpKind::kMatmulActBackward) {
    v.push_back({"out_and_pre_both_given", [](BadCall& c) { c.ins[4].null = false; }});
    v.push_back({"out_and_pre_both_null", [](BadCall& c) { c.ins[3].null = true; }});
    v.push_back({"out_with_gelu_erf", [](BadCall& c) { c.attrs[0].value.i64 = DLFUSE_ACT_GELU_ERF; }});
    v.push_back({"out_with_silu_typed", [](BadCall& c) {
                   c.typed = true;
                   c.typed_activation = DLFUSE_ACT_SILU;
                 }});
    v.push_back({"wrong_pre_shape", [](BadCall& c) {
                   c.ins[3].null = true;
                   c.ins[4].null = false;
                   c.ins[4].shape = {M, N + 1};
                 }});
  }
  if (op == OpKind::kMatmulResidual) {
    v.push_back({"residual_not_broadcastable", [](BadCall& c) { c.ins[3].shape = {N + 1}; }});
    v.push_back({"residual_in_place_shifted", [es](BadCall& c) {
                   c.outs[0].buffer = c.ins[3].buffer;
                   c.outs[0].byte_offset = es;
                 }});
    v.push_back({"out_is_bias", [](BadCall& c) {
                   c.ins[2].shape = {M, N};
                   c.outs[0].buffer = c.ins[2].buffer;
                 }});
  }
  if (op == OpKind::kMatmulResidualBackward)
    v.push_back({"grad_residual_not_broadcastable", [](BadCall& c) { c.outs[3].shape = {M + 1, N}; }});
  if (op == OpKind::kAddMulBackward) {
    v.push_back({"out_and_x_given", [](BadCall& c) {
                   to_out_form(c);
                   c.ins[1].null = false;
                 }});
    v.push_back({"out_form_with_gelu_erf", [](BadCall& c) {
                   to_out_form(c);
                   c.attrs[0].value.i64 = DLFUSE_ACT_GELU_ERF;
                 }});
    v.push_back({"out_form_grad_out_shape", [](BadCall& c) {
                   to_out_form(c);
                   c.ins[0].shape = {M, N + 1};
                 }});
    v.push_back({"out_form_grad_x_not_broadcastable", [](BadCall& c) {
                   to_out_form(c);
                   c.outs[0].shape = {M + 1, N};
                 }});
    v.push_back({"neither_x_nor_out", [](BadCall& c) {
                   to_out_form(c);
                   c.ins[4].null = true;
                 }});
    // A valid call of the out form: a kernel that does not take ABI 1.1's inputs must never
    // see it (docs/ops.md, "What a plugin of ABI 1.0 sees"), so it is refused, UNSUPPORTED.
    if (!v11_inputs)
      v.push_back({"out_form_to_v10_kernel", [](BadCall& c) {
                     to_out_form(c);
                     c.expect = DLFUSE_STATUS_UNSUPPORTED;
                   }});
  }
  if (!matmul) {
    v.push_back({"multiplier_wrong_type", [](BadCall& c) { c.attrs[1] = attr_i(DLFUSE_ATTR_MULTIPLIER, 2); }});
    if (fwd) {
      v.push_back({"out_is_y", [](BadCall& c) { c.outs[0].buffer = c.ins[1].buffer; }});
      v.push_back({"in_place_shifted", [es](BadCall& c) {
                     c.outs[0].buffer = c.ins[0].buffer;
                     c.outs[0].byte_offset = es;
                   }});
    }
  }
  // Last: if wrongly accepted these may take the process down.
  v.push_back({"stride_overflow", [huge](BadCall& c) { c.ins[1].strides = {huge, 1}; }});
  v.push_back({"size_overflow_bytes", [huge, op](BadCall& c) {
                 // 2^62 rows in every tensor that has M rows: consistent shapes whose byte size overflows.
                 for (BadTensor* t : tensors_with_m_rows(c, op)) t->shape[0] = huge;
               }});
  v.push_back({"numel_overflow", [](BadCall& c) {
                 c.ins[1].shape = {int64_t(1) << 32, int64_t(1) << 32, c.ins[1].shape[0], c.ins[1].shape[1]};
               }});
  return v;
}

dlfuse_status_t call(dlfuse_registry_t reg, OpKind op, BadCall& c, void* const* buffers) {
  std::vector<const DLTensor*> ins;
  std::vector<DLTensor*> outs;
  auto build = [&](BadTensor& t) -> DLTensor* {
    if (t.null) return nullptr;
    t.dl = DLTensor{};
    t.dl.data = buffers[t.buffer];
    t.dl.device = t.dev;
    t.dl.ndim = int32_t(t.shape.size());
    t.dl.dtype = t.dtype;
    t.dl.shape = t.shape.data();
    t.dl.strides = t.strides.empty() ? nullptr : t.strides.data();
    t.dl.byte_offset = t.byte_offset;
    return &t.dl;
  };
  for (auto& t : c.ins) ins.push_back(build(t));
  for (auto& t : c.outs) outs.push_back(build(t));
  if (c.typed) {
    const auto act = dlfuse_activation_t(c.typed_activation);
    switch (op) {
      case OpKind::kAddMul: return dlfuse_add_mul_activation(reg, ins[0], ins[1], ins[2], 0.5, act, outs[0], nullptr);
      case OpKind::kMatmulAct:
        return dlfuse_matmul_add_activation(reg, ins[0], ins[1], ins[2], act, outs[0], outs[1], 0, nullptr);
      case OpKind::kMatmulActBackward:
        return dlfuse_matmul_add_activation_backward(reg, ins[0], ins[1], ins[2], ins[3], ins[4], act, outs[0], outs[1],
                                                     outs[2], 0, nullptr);
      default:
        return dlfuse_add_mul_activation_backward(reg, ins[0], ins[1], ins[2], ins[3], 0.5, act, outs[0], outs[1],
                                                  outs[2], nullptr);
    }
  }
  dlfuse_op_t h = nullptr;
  const dlfuse_status_t st = dlfuse_op_get(reg, op_name(op), &h);
  if (st != DLFUSE_STATUS_OK) return st;
  return dlfuse_op_call(h, ins.data(), int32_t(ins.size()), outs.data(), int32_t(outs.size()),
                        c.attrs.empty() ? nullptr : c.attrs.data(), int32_t(c.attrs.size()), nullptr);
}

}  // namespace

std::vector<BadOutcome> run_bad_inputs(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype, OpKind op,
                                       bool v11_inputs) {
  std::vector<BadOutcome> results;
  std::vector<DeviceBuffer> bufs(kBuffers);
  void* ptrs[kBuffers];
  const std::vector<unsigned char> zeros(kBufferBytes, 0);
  for (int i = 0; i < kBuffers; ++i) {
    std::string err;
    if (!bufs[size_t(i)].allocate(reg, dev, kBufferBytes, &err) ||
        !bufs[size_t(i)].upload(zeros.data(), kBufferBytes, &err)) {
      results.push_back({"bad:setup", false, err});
      return results;
    }
    ptrs[i] = bufs[size_t(i)].ptr();
  }
  for (const BadCase& bc : bad_cases(op, dev, dtype, v11_inputs)) {
    BadCall c = base_call(op, dev, dtype);
    bc.mutate(c);
    // A failing lookup leaves a message we recognise, so a refusal that sets no message of
    // its own cannot pass on a stale one.
    dlfuse_op_t unused;
    dlfuse_op_get(reg, "conformance_marker_no_such_op", &unused);
    const std::string marker = dlfuse_last_error();
    const dlfuse_status_t st = call(reg, op, c, ptrs);
    dlfuse_device_synchronize(reg, dev, nullptr);
    const std::string msg = dlfuse_last_error();
    BadOutcome o{"bad:" + bc.name, false, ""};
    if (st == DLFUSE_STATUS_OK)
      o.detail = "accepted (returned OK); it must be refused";
    else if (msg.empty() || msg == marker)
      o.detail = std::string(dlfuse_status_string(st)) + " but no message";
    else if (c.expect != DLFUSE_STATUS_OK && st != c.expect)
      o.detail = std::string(dlfuse_status_string(st)) + " (expected " + dlfuse_status_string(c.expect) + "): " + msg;
    else {
      o.pass = true;
      o.detail = std::string(dlfuse_status_string(st)) + ": " + msg;
    }
    results.push_back(o);
  }
  return results;
}

}  // namespace dlfuse_conformance

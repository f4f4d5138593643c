// One call of one kernel: what it computes (CaseSpec), and its execution on a device with
// seeded inputs, poisoned outputs and a check against the float64 reference (PreparedCall).
#ifndef DLFUSE_CONFORMANCE_OP_CASE_H_
#define DLFUSE_CONFORMANCE_OP_CASE_H_

#include <dlfuse/dlfuse.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include "device.h"
#include "host_tensor.h"

namespace dlfuse_conformance {

// ABI 1.1's ops come after 1.0's: the enumerators seed the sweep, so old values stay.
enum class OpKind {
  kMatmul,
  kMatmulBackward,
  kAddMul,
  kAddMulBackward,
  kMatmulAct,
  kMatmulActBackward,
  kMatmulResidual,
  kMatmulResidualBackward,
};
constexpr OpKind kAllOps[] = {
    OpKind::kMatmul,    OpKind::kMatmulBackward,    OpKind::kAddMul,         OpKind::kAddMulBackward,
    OpKind::kMatmulAct, OpKind::kMatmulActBackward, OpKind::kMatmulResidual, OpKind::kMatmulResidualBackward};
const char* op_name(OpKind op);
// The ops whose operands are a [..., M, K] and b [..., K, N] (CaseSpec's M, K, N, batches).
bool is_matmul_op(OpKind op);
bool is_backward_op(OpKind op);
// The activations whose derivative out gives (docs/ops.md, "Reading out instead").
bool derivative_from_out(int act);
bool parse_op(const std::string& name, OpKind* op);
const char* activation_name(int act);
bool parse_activation(const std::string& name, int* act);

enum class Special {
  kNone,
  kNanInf,      // NaN and +-Inf among the forward's inputs
  kReluSelect,  // backward: NaN/Inf gradients where relu is flat, NaN where it passes
  kLeftTail,    // add_mul: pre = x, every point of the 2^-14 grid from -3 down (y, bias 0)
};

struct CaseSpec {
  std::string name;
  OpKind op = OpKind::kMatmul;
  // matmul: a = a_batch + [M, K], b = b_batch + [K, N]
  std::vector<int64_t> a_batch, b_batch;
  int64_t M = 4, K = 4, N = 4;
  // add_mul: the shapes of x and y
  std::vector<int64_t> x_shape, y_shape;
  std::vector<int64_t> bias_shape;
  std::vector<int64_t> residual_shape;  // matmul_add_residual(_backward)
  // By role ("a", "b", "bias", "out", "grad_out", "x", "grad_x", ...); default compact, 0.
  std::map<std::string, Layout> layout;
  std::map<std::string, int64_t> offset;  // byte_offset, in elements
  std::set<std::string> absent;           // optional outputs passed as NULL ("pre" too)
  int act = DLFUSE_ACT_RELU;
  double multiplier = 1.0;
  bool in_place = false;  // add_mul forward: out is x; matmul_add_residual: out is residual
  // Backwards of ABI 1.1: d_pre read from the forward's out (add_mul: x, y, bias NULL;
  // matmul_add_activation: pre NULL) instead of from x, y, bias or pre.
  bool from_out = false;
  // add_mul backward through dlfuse_op_call with ABI 1.1's five inputs, out NULL.
  bool v11_inputs = false;
  Special special = Special::kNone;
  bool generic_call = false;  // dlfuse_op_call instead of the typed function
  bool allow_tf32 = false;
  // Every input in [0.5, 1): long sums of same-signed terms, where accumulating in the
  // storage dtype stalls far outside the tolerance (docs/ops.md, "Tolerances").
  bool positive = false;
  // 2^26 elements or more, for the large-problem paths of GPU plugins: run with --large only
  // (ConformOptions::large), as they take minutes on a CPU.
  bool large = false;
  // The grid of GEMM shapes whose rows are not 16-byte aligned (cases.cpp): run with --grid
  // only (ConformOptions::grid), as its float64 reference takes minutes on a CPU.
  bool grid = false;
  std::string note;  // how a generated (sweep) case was built, for its failure report
};

// Shape summary for tables, e.g. "2x1x5x7 @ 3x7x4" or "16x16".
std::string shape_summary(const CaseSpec& spec);

class PreparedCall {
 public:
  PreparedCall(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype) : reg_(reg), dev_(dev), dtype_(dtype) {}
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;

  // What came back from the device after a call: every output buffer (the in-place one
  // is x's) and every input buffer, whole, guard slots included.
  struct Readback {
    std::vector<HostTensor> outs, ins;  // absent outputs: an empty tensor
    std::vector<std::string> out_roles, in_roles;
  };

  // Builds seeded inputs, poisons the outputs, places both on the device.
  bool prepare(const CaseSpec& spec, uint64_t seed, std::string* err);
  // Uploads the inputs and the poisoned outputs again, for another run of the same call.
  bool reset(std::string* err);
  // One call of the kernel; enqueued, not synchronized.
  dlfuse_status_t invoke(void* stream = nullptr);
  dlfuse_status_t synchronize() { return dlfuse_device_synchronize(reg_, dev_, nullptr); }
  // Copies every buffer back; `sync` false skips the device synchronize first (a CPU
  // plugin's kernel must be complete when it returns).
  bool download(Readback* rb, std::string* err, bool sync = true) const;
  // Checks a readback against the float64 reference (computed once per call) and that
  // nothing outside the outputs' views or in the inputs changed.
  void check(const Readback& rb, CheckStats* stats);
  // Brings the outputs back and checks them. False with *err when the check could not run.
  bool verify(CheckStats* stats, std::string* err, Readback* rb = nullptr);
  // Bytes of all buffers in placement order, for the bit-identity checks.
  size_t total_bytes() const;
  const CaseSpec& spec() const { return spec_; }

 private:
  struct Tensor {
    std::string role;
    HostTensor host;  // what was uploaded
    DeviceBuffer buf;
    std::vector<int64_t> shape, strides;
    DLTensor dl{};
    bool present = true;
  };
  Tensor& add(std::vector<Tensor>& list, const std::string& role, const std::vector<int64_t>& shape);
  void make_inputs(std::mt19937_64& rng);
  void make_matmul_inputs(std::mt19937_64& rng);
  void make_add_mul_inputs(std::mt19937_64& rng);
  void apply_specials();
  void nan_inf_inputs();
  void derive_add_mul_out();
  void relu_select_gradients();
  HostTensor& input(const std::string& role);
  int in_place_input() const { return spec_.op == OpKind::kMatmulResidual ? 3 : 0; }
  bool is_in_place_out(size_t i) const { return spec_.in_place && i == 0; }
  bool place(Tensor& t, std::string* err);
  const DLTensor* in(size_t i) const { return inputs_[i].present ? &inputs_[i].dl : nullptr; }
  DLTensor* out(size_t i);
  Dense dense(const Tensor& t) const { return Dense{t.host.shape(), t.host.values()}; }

  dlfuse_registry_t reg_;
  DLDevice dev_;
  DLDataType dtype_;
  CaseSpec spec_;
  std::vector<Tensor> inputs_, outputs_;
  std::vector<RefOut> ref_;  // the reference, once computed
  Dense hidden_bias_;        // matmul backwards: the forward's bias (it defines `out`/`pre` and grad_bias' shape)
  dlfuse_op_t op_handle_ = nullptr;
};

// "" when a and b hold the same bytes; else where they first differ, e.g.
// "grad_y[0,3]: 1.25 vs 1.5" (a's value first).
std::string first_difference(const PreparedCall::Readback& a, const PreparedCall::Readback& b);

}  // namespace dlfuse_conformance

#endif

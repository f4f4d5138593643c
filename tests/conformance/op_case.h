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

enum class OpKind { kMatmul, kMatmulBackward, kAddMul, kAddMulBackward };
constexpr OpKind kAllOps[] = {OpKind::kMatmul, OpKind::kMatmulBackward, OpKind::kAddMul,
                              OpKind::kAddMulBackward};
const char* op_name(OpKind op);
bool parse_op(const std::string& name, OpKind* op);
const char* activation_name(int act);
bool parse_activation(const std::string& name, int* act);

enum class Special {
  kNone,
  kNanInf,      // NaN and +-Inf among the forward's inputs
  kReluSelect,  // backward: NaN/Inf gradients where relu is flat, NaN where it passes
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
  // By role ("a", "b", "bias", "out", "grad_out", "x", "grad_x", ...); default compact, 0.
  std::map<std::string, Layout> layout;
  std::map<std::string, int64_t> offset;  // byte_offset, in elements
  std::set<std::string> absent;           // optional outputs passed as NULL
  int act = DLFUSE_ACT_RELU;
  double multiplier = 1.0;
  bool in_place = false;     // add_mul forward: out is x
  Special special = Special::kNone;
  bool generic_call = false;  // dlfuse_op_call instead of the typed function
  bool allow_tf32 = false;
};

// Shape summary for tables, e.g. "2x1x5x7 @ 3x7x4" or "16x16".
std::string shape_summary(const CaseSpec& spec);

class PreparedCall {
 public:
  PreparedCall(dlfuse_registry_t reg, DLDevice dev, DLDataType dtype)
      : reg_(reg), dev_(dev), dtype_(dtype) {}
  PreparedCall(const PreparedCall&) = delete;
  PreparedCall& operator=(const PreparedCall&) = delete;

  // Builds seeded inputs, poisons the outputs, places both on the device.
  bool prepare(const CaseSpec& spec, uint64_t seed, std::string* err);
  // One call of the kernel; enqueued, not synchronized.
  dlfuse_status_t invoke();
  dlfuse_status_t synchronize() { return dlfuse_device_synchronize(reg_, dev_, nullptr); }
  // Brings the outputs back and checks them (and that inputs are untouched). False with
  // *err when the check itself could not run.
  bool verify(CheckStats* stats, std::string* err);

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
  void apply_specials();
  bool place(Tensor& t, std::string* err);
  const DLTensor* in(size_t i) const { return &inputs_[i].dl; }
  DLTensor* out(size_t i);
  Dense dense(const Tensor& t) const { return Dense{t.host.shape(), t.host.values()}; }

  dlfuse_registry_t reg_;
  DLDevice dev_;
  DLDataType dtype_;
  CaseSpec spec_;
  std::vector<Tensor> inputs_, outputs_;
  Dense hidden_bias_;  // matmul backward: the forward's bias (it defines `out` and grad_bias' shape)
  dlfuse_op_t op_handle_ = nullptr;
};

}  // namespace dlfuse_conformance

#endif

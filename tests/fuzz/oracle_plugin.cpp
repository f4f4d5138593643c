// oracle_plugin.cpp: libdlfuse_fuzz_oracle.so, the fuzzers' plugin.
//
// It serves the eight ops of ABI 1.1, ABI 1.2's mlp and mlp_backward, and one third-party op (FUZZ_ORACLE_CUSTOM_OP) on
// kDLCPU for several dtypes, and computes nothing: each kernel re-checks, with its own
// code, every promise the registry makes about a call it lets through (docs/abi.md,
// "Validation") and abort()s on the first broken one, so that the fuzzer reports it as a
// crash with the reason on stderr. It also checks the "no kernel for an all-empty output
// set" rule. When a tensor lies inside the arena the harness registered
// (fuzz_oracle_set_arena), it reads or writes both ends of the tensor's byte extent, so
// that ASan sees the extent the kernel was promised.
//
// The checks are deliberately written differently from registry/src (element-by-element
// enumeration for self-overlap, __int128 for extents) so that one shared mistake cannot
// hide itself.
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "dlfuse/plugin.h"
#include "oracle.h"

namespace {

const DLDataType kDtypes[] = {{kDLFloat, 32, 1},  {kDLFloat, 64, 1}, {kDLFloat, 16, 1},
                              {kDLBfloat, 16, 1}, {kDLInt, 8, 1},    {kDLUInt, 32, 1}};
constexpr int kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);

const char* g_arena = nullptr;
size_t g_arena_size = 0;
unsigned long long g_calls = 0;

[[noreturn]] void violated(const dlfuse_kernel_args_t* a, const char* fmt, ...) {
  std::fprintf(stderr, "\nfuzz_oracle: the registry let through an invalid call of '%s': ", a && a->op ? a->op : "?");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::abort();
}

#define ORACLE(cond, ...)                  \
  do {                                     \
    if (!(cond)) violated(a, __VA_ARGS__); \
  } while (0)

struct Extent {
  __int128 lo = 0, hi = 0;  // byte range [lo, hi) in the address space; empty if numel 0
  __int128 numel = 0;
};

int64_t stride_of(const DLTensor* t, int i) {
  if (t->strides) return t->strides[i];
  int64_t s = 1;
  for (int j = t->ndim - 1; j > i; --j) s *= t->shape[j] > 0 ? t->shape[j] : 1;
  return s;
}

// Checks one tensor against the per-tensor rules; returns its extent.
Extent check_tensor(const dlfuse_kernel_args_t* a, const char* what, int idx, const DLTensor* t) {
  ORACLE(t != nullptr, "%s[%d] is NULL", what, idx);
  ORACLE(t->ndim >= 0 && t->ndim <= 16, "%s[%d].ndim = %d", what, idx, t->ndim);
  ORACLE(t->ndim == 0 || t->shape, "%s[%d].shape is NULL with ndim %d", what, idx, t->ndim);
  ORACLE(t->dtype.lanes == 1, "%s[%d] lanes %d", what, idx, t->dtype.lanes);
  bool known = false;
  for (const DLDataType& d : kDtypes) known = known || (d.code == t->dtype.code && d.bits == t->dtype.bits);
  ORACLE(known, "%s[%d] dtype (%d, %d) is not one this plugin declared", what, idx, t->dtype.code, t->dtype.bits);
  ORACLE(t->device.device_type == kDLCPU && t->device.device_id == 0, "%s[%d] device (%d, %d); expected cpu:0", what,
         idx, t->device.device_type, t->device.device_id);
  Extent e;
  __int128 numel = 1;
  for (int i = 0; i < t->ndim; ++i) {
    ORACLE(t->shape[i] >= 0, "%s[%d].shape[%d] = %lld", what, idx, i, (long long)t->shape[i]);
    numel *= t->shape[i];
    ORACLE(numel <= INT64_MAX, "%s[%d] element count overflows int64", what, idx);
    if (t->strides) ORACLE(t->strides[i] >= 0, "%s[%d].strides[%d] = %lld", what, idx, i, (long long)t->strides[i]);
  }
  e.numel = numel;
  ORACLE(t->byte_offset <= (uint64_t)INT64_MAX, "%s[%d].byte_offset = %llu", what, idx,
         (unsigned long long)t->byte_offset);
  if (numel == 0) return e;
  ORACLE(t->data != nullptr, "%s[%d].data is NULL with %lld elements", what, idx, (long long)numel);
  const int64_t item = t->dtype.bits / 8;
  __int128 last = 0;
  for (int i = 0; i < t->ndim; ++i) last += (__int128)(t->shape[i] - 1) * stride_of(t, i);
  const __int128 bytes = (last + 1) * item;
  ORACLE(bytes + (__int128)t->byte_offset <= INT64_MAX, "%s[%d] byte extent overflows int64", what, idx);
  const __int128 first = (__int128)(uintptr_t)t->data + t->byte_offset;
  ORACLE(first + bytes <= (__int128)UINTPTR_MAX, "%s[%d] extent wraps the address space", what, idx);
  ORACLE(first % item == 0, "%s[%d] first element misaligned for %lld-byte items", what, idx, (long long)item);
  e.lo = first;
  e.hi = first + bytes;
  return e;
}

// True when two index tuples of `t` reach one element (enumerated; small tensors only).
bool self_overlaps(const DLTensor* t, bool* checked) {
  __int128 numel = 1;
  for (int i = 0; i < t->ndim; ++i) numel *= t->shape[i];
  *checked = numel <= 4096;
  if (!*checked || numel == 0) return false;
  std::set<int64_t> seen;
  std::vector<int64_t> idx(t->ndim, 0);
  for (int64_t l = 0; l < (int64_t)numel; ++l) {
    int64_t rem = l, off = 0;
    for (int i = t->ndim - 1; i >= 0; --i) {
      idx[i] = rem % t->shape[i];
      rem /= t->shape[i];
      off += idx[i] * stride_of(t, i);
    }
    if (!seen.insert(off).second) return true;
  }
  return false;
}

bool broadcast(const DLTensor* x, const std::vector<int64_t>& s, std::vector<int64_t>* out) {
  const size_t n = std::max<size_t>(x->ndim, s.size());
  std::vector<int64_t> r(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = i + x->ndim >= n ? x->shape[i + x->ndim - n] : 1;
    const int64_t b = i + s.size() >= n ? s[i + s.size() - n] : 1;
    if (a != b && a != 1 && b != 1) return false;
    r[i] = a == 1 ? b : a;
  }
  *out = r;
  return true;
}

std::vector<int64_t> shape_of(const DLTensor* t) { return std::vector<int64_t>(t->shape, t->shape + t->ndim); }

bool broadcasts_to(const DLTensor* x, const std::vector<int64_t>& s) {
  std::vector<int64_t> r;
  return broadcast(x, s, &r) && r == s;
}

// matmul out shape from a and b, checked.
std::vector<int64_t> matmul_shape(const dlfuse_kernel_args_t* a, const DLTensor* A, const DLTensor* B) {
  ORACLE(A->ndim >= 2 && B->ndim >= 2, "matmul operand with ndim < 2 (%d, %d)", A->ndim, B->ndim);
  ORACLE(A->shape[A->ndim - 1] == B->shape[B->ndim - 2], "K differs: %lld vs %lld", (long long)A->shape[A->ndim - 1],
         (long long)B->shape[B->ndim - 2]);
  DLTensor ab = *A;
  ab.ndim = A->ndim - 2;
  std::vector<int64_t> bb(B->shape, B->shape + B->ndim - 2), batch;
  ORACLE(broadcast(&ab, bb, &batch), "batch dims do not broadcast");
  batch.push_back(A->shape[A->ndim - 2]);
  batch.push_back(B->shape[B->ndim - 1]);
  ORACLE(batch.size() <= 16, "out ndim %zu > 16", batch.size());
  return batch;
}

// The complete attribute list, in docs/ops.md's order, with values in range.
void check_attrs(const dlfuse_kernel_args_t* a, const int32_t* keys, int n) {
  ORACLE(a->num_attrs >= 0 && (a->num_attrs == 0 || a->attrs), "attrs %d at %p", a->num_attrs, (const void*)a->attrs);
  ORACLE(a->num_attrs == n, "%d attrs; expected the complete list (%d)", a->num_attrs, n);
  for (int i = 0; i < n; ++i) {
    const dlfuse_attr_t& t = a->attrs[i];
    ORACLE(t.key == keys[i], "attrs[%d] has key %d; expected %d (canonical order)", i, t.key, keys[i]);
    if (t.key == DLFUSE_ATTR_MULTIPLIER) {
      ORACLE(t.type == DLFUSE_ATTR_FLOAT64, "MULTIPLIER has type %d", t.type);
    } else {
      ORACLE(t.type == DLFUSE_ATTR_INT64, "attribute %d has type %d", t.key, t.type);
      const bool act = t.key == DLFUSE_ATTR_ACTIVATION || t.key == DLFUSE_ATTR_OUTPUT_ACTIVATION;
      const int64_t hi = act ? DLFUSE_ACT_COUNT : 2;
      ORACLE(t.value.i64 >= 0 && t.value.i64 < hi, "attribute %d is %lld", t.key, (long long)t.value.i64);
    }
  }
}

bool exactly_same_view(const DLTensor* x, const DLTensor* y) {
  if (x->data != y->data || x->byte_offset != y->byte_offset || x->ndim != y->ndim || x->dtype.code != y->dtype.code ||
      x->dtype.bits != y->dtype.bits)
    return false;
  for (int i = 0; i < x->ndim; ++i)
    if (x->shape[i] != y->shape[i] || (x->shape[i] > 1 && stride_of(x, i) != stride_of(y, i))) return false;
  return true;
}

bool in_arena(const Extent& e) {
  return g_arena && e.numel > 0 && e.lo >= (__int128)(uintptr_t)g_arena &&
         e.hi <= (__int128)(uintptr_t)g_arena + (__int128)g_arena_size;
}

// The ops in the registry's order (dlfuse/ops.def), then the custom one.
enum Op {
  kMatmul,
  kMatmulBwd,
  kAddMul,
  kAddMulBwd,
  kMatmulAct,
  kMatmulActBwd,
  kResidual,
  kResidualBwd,
  kMlp,
  kMlpBwd,
  kCustom
};
const char* const kNames[] = {DLFUSE_OP_MATMUL_ADD_RELU,
                              DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD,
                              DLFUSE_OP_ADD_MUL_ACTIVATION,
                              DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD,
                              DLFUSE_OP_MATMUL_ADD_ACTIVATION,
                              DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD,
                              DLFUSE_OP_MATMUL_ADD_RESIDUAL,
                              DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD,
                              DLFUSE_OP_MLP,
                              DLFUSE_OP_MLP_BACKWARD,
                              FUZZ_ORACLE_CUSTOM_OP};
// add_mul_activation_backward takes ABI 1.1's 5 inputs (this plugin declares the flag).
const int kIn[] = {3, 4, 3, 5, 3, 5, 4, 3, 15, 16}, kOut[] = {1, 3, 1, 3, 2, 3, 1, 4, 7, 15};
// Bit i: outputs[i] may be NULL (gradients; matmul_add_activation's pre; mlp's h0..h5).
const unsigned kOptionalOut[] = {0, 7, 0, 7, 2, 7, 0, 15, 0x7e, 0x7fff};
// Bit i: inputs[i] may be NULL; which combinations, the op's shape check says (mlp: w1..w6
// and b1..b6; mlp_backward: w1..w6, h0..h5 and out).
const unsigned kOptionalIn[] = {0, 0, 0, 0x1e, 0, 0x18, 0, 0, 0x7efc, 0xfff8};

bool invertible_from_out(int64_t act) {
  return act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH;
}

void check_grads_ab(const dlfuse_kernel_args_t* a, const DLTensor* A, const DLTensor* B) {
  if (a->outputs[0]) ORACLE(shape_of(a->outputs[0]) == shape_of(A), "grad_a shape differs from a's");
  if (a->outputs[1]) ORACLE(shape_of(a->outputs[1]) == shape_of(B), "grad_b shape differs from b's");
}

bool has_shape(const DLTensor* t, std::vector<int64_t> s) { return t && shape_of(t) == s; }
// A tensor of a layer that does not exist: NULL or [0].
bool unused(const DLTensor* t) { return !t || (t->ndim == 1 && t->shape[0] == 0); }

// mlp and mlp_backward: the layers are the weights given from w0 on, none after a NULL one;
// every tensor of a layer has the shape that layer's weight gives it.
void check_mlp(const dlfuse_kernel_args_t* a, bool bwd) {
  static const int32_t kKeys[] = {DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ATTR_ALLOW_TF32};
  check_attrs(a, kKeys, 3);
  const DLTensor* const* in = a->inputs;
  DLTensor* const* out = a->outputs;
  const DLTensor* x = in[bwd ? 1 : 0];
  const DLTensor* const* w = in + (bwd ? 2 : 1);
  ORACLE(x && x->ndim == 2, "x is not 2-D");
  int L = 0;
  while (L < 7 && w[L]) ++L;
  ORACLE(L >= 1, "w0 is NULL");
  for (int i = L; i < 7; ++i) ORACLE(!w[i], "w%d given after a NULL w%d", i, L);
  std::vector<int64_t> width{x->shape[1]};
  for (int i = 0; i < L; ++i) {
    ORACLE(w[i]->ndim == 2 && w[i]->shape[0] == width.back(), "w%d does not continue the layers", i);
    width.push_back(w[i]->shape[1]);
  }
  const int64_t M = x->shape[0];
  const std::vector<int64_t> last{M, width[L]};
  if (!bwd) {
    for (int i = 0; i < 7; ++i)
      ORACLE(i < L ? has_shape(in[8 + i], {width[i + 1]}) : !in[8 + i], "b%d wrong for %d layers", i, L);
    ORACLE(has_shape(out[0], last), "out has the wrong shape");
    for (int i = 0; i < 6; ++i)
      ORACLE(i < L - 1 ? !out[1 + i] || has_shape(out[1 + i], {M, width[i + 1]}) : unused(out[1 + i]),
             "h%d wrong for %d layers", i, L);
    return;
  }
  const int64_t act = a->attrs[0].value.i64, out_act = a->attrs[1].value.i64;
  ORACLE(L == 1 || invertible_from_out(act), "ACTIVATION %lld has no derivative from its output", (long long)act);
  ORACLE(invertible_from_out(out_act), "OUTPUT_ACTIVATION %lld has no derivative from its output", (long long)out_act);
  ORACLE(has_shape(in[0], last), "grad_out has the wrong shape");
  for (int i = 0; i < 6; ++i)
    ORACLE(i < L - 1 ? has_shape(in[9 + i], {M, width[i + 1]}) : unused(in[9 + i]), "h%d wrong for %d layers", i, L);
  ORACLE(in[15] ? has_shape(in[15], last) : out_act == DLFUSE_ACT_IDENTITY, "out wrong or missing");
  ORACLE(!out[0] || shape_of(out[0]) == shape_of(x), "grad_x's shape differs from x's");
  for (int i = 0; i < 7; ++i) {
    const DLTensor *gw = out[1 + i], *gb = out[8 + i];
    if (i >= L) {
      ORACLE(unused(gw) && unused(gb), "gradients of layer %d, which does not exist", i);
      continue;
    }
    ORACLE(!gw || shape_of(gw) == shape_of(w[i]), "grad_w%d's shape differs from w%d's", i, i);
    ORACLE(!gb || has_shape(gb, {width[i + 1]}), "grad_b%d has the wrong shape", i);
  }
}

// Shapes, NULL combinations and attributes of one known op.
void check_op(const dlfuse_kernel_args_t* a, int op) {
  const DLTensor* const* in = a->inputs;
  DLTensor* const* out = a->outputs;
  static const int32_t kTf32[] = {DLFUSE_ATTR_ALLOW_TF32};
  static const int32_t kActTf32[] = {DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_ALLOW_TF32};
  static const int32_t kActMul[] = {DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_MULTIPLIER};
  if (op == kMatmul || op == kMatmulAct || op == kResidual) {
    const std::vector<int64_t> s = matmul_shape(a, in[0], in[1]);
    ORACLE(broadcasts_to(in[2], s), "bias does not broadcast to out");
    ORACLE(shape_of(out[0]) == s, "out has the wrong shape");
    if (op == kMatmulAct && out[1]) ORACLE(shape_of(out[1]) == s, "pre's shape differs from out's");
    if (op == kResidual) ORACLE(broadcasts_to(in[3], s), "residual does not broadcast to out");
    if (op == kMatmulAct)
      check_attrs(a, kActTf32, 2);
    else
      check_attrs(a, kTf32, 1);
  } else if (op == kMatmulBwd || op == kMatmulActBwd || op == kResidualBwd) {
    const std::vector<int64_t> s = matmul_shape(a, in[1], in[2]);
    ORACLE(shape_of(in[0]) == s, "grad_out shape wrong");
    if (op == kMatmulBwd) ORACLE(shape_of(in[3]) == s, "out shape wrong");
    check_grads_ab(a, in[1], in[2]);
    if (out[2]) ORACLE(broadcasts_to(out[2], s), "grad_bias does not broadcast to out");
    if (op == kResidualBwd && out[3]) ORACLE(broadcasts_to(out[3], s), "grad_residual does not broadcast to out");
    if (op == kMatmulActBwd) {
      ORACLE((in[3] == nullptr) != (in[4] == nullptr), "out %p and pre %p: expected exactly one", (const void*)in[3],
             (const void*)in[4]);
      ORACLE(shape_of(in[3] ? in[3] : in[4]) == s, "%s shape wrong", in[3] ? "out" : "pre");
      check_attrs(a, kActTf32, 2);
      if (in[3])
        ORACLE(invertible_from_out(a->attrs[0].value.i64), "out form with activation %lld",
               (long long)a->attrs[0].value.i64);
    } else {
      check_attrs(a, kTf32, 1);
    }
  } else if (op == kMlp || op == kMlpBwd) {
    check_mlp(a, op == kMlpBwd);
  } else if (op == kAddMul) {
    std::vector<int64_t> xy, s;
    ORACLE(broadcast(in[0], shape_of(in[1]), &xy), "x and y do not broadcast");
    ORACLE(broadcast(in[2], xy, &s), "bias does not broadcast with x, y");
    ORACLE(shape_of(out[0]) == s, "out shape wrong");
    check_attrs(a, kActMul, 2);
  } else if (op == kAddMulBwd) {
    check_attrs(a, kActMul, 2);
    if (in[4]) {  // the out form: x, y and bias absent, outputs reduce to their shapes
      ORACLE(!in[1] && !in[2] && !in[3], "out given together with x %p, y %p, bias %p", (const void*)in[1],
             (const void*)in[2], (const void*)in[3]);
      const std::vector<int64_t> s = shape_of(in[4]);
      ORACLE(shape_of(in[0]) == s, "grad_out's shape differs from out's");
      for (int i = 0; i < 3; ++i)
        if (out[i]) ORACLE(broadcasts_to(out[i], s), "grad %d does not broadcast to out", i);
      ORACLE(invertible_from_out(a->attrs[0].value.i64), "out form with activation %lld",
             (long long)a->attrs[0].value.i64);
      return;
    }
    ORACLE(in[1] && in[2] && in[3], "out is NULL and so is one of x %p, y %p, bias %p", (const void*)in[1],
           (const void*)in[2], (const void*)in[3]);
    std::vector<int64_t> xy, s;
    ORACLE(broadcast(in[1], shape_of(in[2]), &xy), "x and y do not broadcast");
    ORACLE(broadcast(in[3], xy, &s), "bias does not broadcast with x, y");
    ORACLE(shape_of(in[0]) == s, "grad_out shape wrong");
    for (int i = 0; i < 3; ++i)
      if (out[i]) ORACLE(shape_of(out[i]) == shape_of(in[1 + i]), "grad %d shape wrong", i);
  }
}

dlfuse_status_t kernel(void*, void* kernel_data, const dlfuse_kernel_args_t* a) {
  const int op = static_cast<int>(reinterpret_cast<intptr_t>(kernel_data));
  __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
  ORACLE(a->struct_size >= sizeof(dlfuse_kernel_args_t), "args struct_size %zu", a->struct_size);
  ORACLE(a->err && a->err_size > 0, "no error buffer");
  ORACLE(a->op && std::strcmp(a->op, kNames[op]) == 0, "op name '%s' reached the kernel of '%s'",
         a->op ? a->op : "(null)", kNames[op]);
  const bool known = op < kCustom;
  if (known) {
    ORACLE(a->num_inputs == kIn[op] && a->num_outputs == kOut[op], "%d inputs, %d outputs; expected %d, %d",
           a->num_inputs, a->num_outputs, kIn[op], kOut[op]);
  } else {
    ORACLE(a->num_inputs >= 0 && a->num_inputs <= 16 && a->num_outputs >= 1 && a->num_outputs <= 16,
           "%d inputs, %d outputs", a->num_inputs, a->num_outputs);
  }
  ORACLE(a->num_inputs == 0 || a->inputs, "inputs NULL");
  ORACLE(a->outputs, "outputs NULL");

  std::vector<Extent> in(a->num_inputs), out(a->num_outputs);
  const DLTensor* first = nullptr;
  for (int i = 0; i < a->num_inputs; ++i) {
    if (!a->inputs[i]) {
      ORACLE(known && (kOptionalIn[op] >> i & 1u), "input %d is NULL", i);
      continue;
    }
    in[i] = check_tensor(a, "inputs", i, a->inputs[i]);
    if (!first) first = a->inputs[i];
  }
  bool any_nonempty = false;
  for (int i = 0; i < a->num_outputs; ++i) {
    const DLTensor* t = a->outputs[i];
    if (!t) {
      ORACLE(!known || (kOptionalOut[op] >> i & 1u), "required output %d is NULL", i);
      continue;
    }
    out[i] = check_tensor(a, "outputs", i, t);
    any_nonempty = any_nonempty || out[i].numel > 0;
    if (!first) first = t;
    bool checked = false;
    ORACLE(!self_overlaps(t, &checked), "outputs[%d] has two elements at one address", i);
  }
  ORACLE(any_nonempty, "the kernel ran although no present output has an element");
  for (int i = 0; i < a->num_inputs + a->num_outputs; ++i) {
    const DLTensor* t = i < a->num_inputs ? a->inputs[i] : a->outputs[i - a->num_inputs];
    if (!t) continue;
    ORACLE(t->dtype.code == first->dtype.code && t->dtype.bits == first->dtype.bits, "tensors of mixed dtypes");
  }
  // Outputs overlap nothing, except out being exactly x (add_mul_activation) or exactly
  // residual (matmul_add_residual).
  const int in_place = op == kAddMul ? 0 : (op == kResidual ? 3 : -1);
  for (int i = 0; i < a->num_outputs; ++i) {
    if (!a->outputs[i] || out[i].numel == 0) continue;
    for (int j = 0; j < a->num_outputs; ++j)
      if (j != i && a->outputs[j] && out[j].numel > 0)
        ORACLE(out[i].hi <= out[j].lo || out[j].hi <= out[i].lo, "outputs %d and %d overlap", i, j);
    for (int j = 0; j < a->num_inputs; ++j) {
      if (!a->inputs[j] || in[j].numel == 0) continue;
      if (out[i].hi <= in[j].lo || in[j].hi <= out[i].lo) continue;
      ORACLE(i == 0 && j == in_place && exactly_same_view(a->outputs[0], a->inputs[j]), "output %d overlaps input %d",
             i, j);
    }
  }
  if (known)
    check_op(a, op);
  else
    ORACLE(a->num_attrs >= 0 && (a->num_attrs == 0 || a->attrs), "attrs %d at NULL", a->num_attrs);
  // Touch both ends of every extent that lies in the harness's arena.
  volatile char sink = 0;
  for (int i = 0; i < a->num_inputs; ++i)
    if (a->inputs[i] && in_arena(in[i])) {
      sink = sink + reinterpret_cast<const char*>((uintptr_t)in[i].lo)[0];
      sink = sink + reinterpret_cast<const char*>((uintptr_t)in[i].hi)[-1];
    }
  for (int i = 0; i < a->num_outputs; ++i)
    if (a->outputs[i] && in_arena(out[i])) {
      reinterpret_cast<char*>((uintptr_t)out[i].lo)[0] = 1;
      reinterpret_cast<char*>((uintptr_t)out[i].hi)[-1] = 2;
    }
  (void)sink;
  return DLFUSE_STATUS_OK;
}

dlfuse_kernel_t make(Op id, uint32_t flags = 0) {
  return dlfuse_kernel_t{sizeof(dlfuse_kernel_t),
                         kNames[id],
                         kDLCPU,
                         kNumDtypes,
                         kDtypes,
                         1000,
                         kernel,
                         reinterpret_cast<void*>(static_cast<intptr_t>(id)),
                         flags,
                         nullptr,
                         nullptr};
}

const dlfuse_kernel_t kKernels[] = {
    make(kMatmul),    make(kMatmulBwd),    make(kAddMul),   make(kAddMulBwd, DLFUSE_KERNEL_TAKES_V1_1_INPUTS),
    make(kMatmulAct), make(kMatmulActBwd), make(kResidual), make(kResidualBwd),
    make(kMlp),       make(kMlpBwd),       make(kCustom)};

int g_state;

dlfuse_status_t p_open(const dlfuse_host_info_t*, void** state, char*, size_t) {
  *state = &g_state;
  return DLFUSE_STATUS_OK;
}
void p_close(void*) {}
dlfuse_status_t p_kernels(void*, const dlfuse_kernel_t** k, int32_t* n, char*, size_t) {
  *k = kKernels;
  *n = sizeof(kKernels) / sizeof(kKernels[0]);
  return DLFUSE_STATUS_OK;
}
dlfuse_status_t p_count(void*, int32_t* c, char*, size_t) {
  *c = 1;
  return DLFUSE_STATUS_OK;
}
dlfuse_status_t p_alloc(void*, int32_t, size_t, void** p, char* err, size_t n) {
  *p = nullptr;
  std::snprintf(err, n, "fuzz_oracle: no memory services");
  return DLFUSE_STATUS_UNSUPPORTED;
}
dlfuse_status_t p_free(void*, int32_t, void*, char* err, size_t n) {
  std::snprintf(err, n, "fuzz_oracle: no memory services");
  return DLFUSE_STATUS_UNSUPPORTED;
}
dlfuse_status_t p_copy(void*, int32_t, dlfuse_copy_kind_t, void*, size_t, const void*, size_t, size_t, void*, char* err,
                       size_t n) {
  std::snprintf(err, n, "fuzz_oracle: no memory services");
  return DLFUSE_STATUS_UNSUPPORTED;
}
dlfuse_status_t p_sync(void*, int32_t, void*, char*, size_t) { return DLFUSE_STATUS_OK; }

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "fuzz_oracle",
                                 "1.0.0",
                                 kDLCPU,
                                 p_open,
                                 p_close,
                                 p_kernels,
                                 p_count,
                                 p_alloc,
                                 p_free,
                                 p_copy,
                                 p_sync};

}  // namespace

extern "C" {
DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &kPlugin; }
DLFUSE_EXPORT void fuzz_oracle_set_arena(const void* base, size_t size) {
  g_arena = static_cast<const char*>(base);
  g_arena_size = size;
}
DLFUSE_EXPORT unsigned long long fuzz_oracle_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }
}

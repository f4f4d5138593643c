// fuzz_validation: libFuzzer target over the registry's call validation.
//
// The input bytes are decoded into up to 8 DLTensor descriptors (ndim, shape, strides,
// dtype, byte_offset, data, device: mostly plausible values, sometimes raw ones: negative,
// huge, overflowing, NULL, misaligned, unknown dtypes and devices) and one call of the
// public API: a typed function of ABI 1.1 (the eight ops, and
// dlfuse_add_mul_activation_backward_from_out), or dlfuse_op_call with random tensor counts
// (add_mul_activation_backward: 4 or 5 inputs), NULL entries where an op takes optional
// inputs (mostly the combinations docs/ops.md allows), outputs aliasing inputs, and
// attributes in any order (the eight ops, ABI 1.2's mlp and mlp_backward, mostly with
// stacks of layers that fit together, a third-party op, an unknown op name), or a device
// service.
//
// Registry 1 holds only the oracle plugin (oracle_plugin.cpp), which abort()s if any call
// it receives breaks a promise of docs/abi.md ("Validation"). Registry 2 holds the test
// plugin (tests/plugins/testref), which really computes: it is called only when every
// tensor lies inside the harness's arena by the harness's own arithmetic and is small, so
// ASan checks the kernels' memory accesses on fuzzed-but-valid layouts; its outcome must
// agree with the oracle registry's on the same tensors (validation is the registry's).
//
// Every non-OK status must be a dlfuse_status_t and come with a non-empty
// dlfuse_last_error(). Each thread's registry calls remember the layouts of the last 8 valid
// calls of each op (registry/src/layout_cache.hpp); an outcome must not depend on that
// history: each call of the oracle is judged after the thread forgot the op's layouts (8
// other valid layouts replaced them), then again at once (a repeat of its own layout), then
// with its tensors moved (same layouts, other data and byte_offset) both as a repeat and
// after forgetting; all must agree, status and message, and now and then with a new
// thread's first call. Each dlfuse_op_call is also given to dlfuse_op_infer_outputs with the
// same inputs and attributes: a refusal is a status with a message, and a call that passed
// validation must pass inference, each output it was given having the inferred shape (a
// REDUCIBLE one: a shape that broadcasts to it), and its attributes to dlfuse_op_backward_plan
// (check_backward_plan). Paths of the plugins come from the
// environment (FUZZ_ORACLE_PLUGIN, FUZZ_TESTREF_PLUGIN) or from the build (compile
// definitions).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "dlfuse/dlfuse.h"
#include "oracle.h"

namespace {

constexpr size_t kArenaSize = 1 << 16;
constexpr int kPool = 8;

dlfuse_registry_t g_oracle_reg = nullptr;
dlfuse_registry_t g_ref_reg = nullptr;
char* g_arena = nullptr;
fuzz_oracle_calls_fn g_oracle_calls = nullptr;
unsigned long long g_ref_calls = 0, g_ok = 0, g_refused = 0;

const char* path_from(const char* env, const char* built) {
  const char* e = std::getenv(env);
  return e && *e ? e : built;
}

dlfuse_registry_t make_registry(const char* plugin) {
  dlfuse_registry_options_t o{sizeof(dlfuse_registry_options_t), DLFUSE_DISCOVER_NONE, nullptr};
  dlfuse_registry_t r = nullptr;
  if (dlfuse_registry_create(&o, &r) != DLFUSE_STATUS_OK ||
      dlfuse_registry_load(r, plugin, nullptr) != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "fuzz_validation: cannot load %s: %s\n", plugin, dlfuse_last_error());
    std::abort();
  }
  return r;
}

// A tensor descriptor and the storage its pointers point to.
struct Desc {
  DLTensor t{};
  int64_t shape[17] = {};
  int64_t strides[17] = {};
};

int64_t pick_dim(FuzzedDataProvider& p) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b < 200) return b % 5;
  if (b < 215) return 1 + (b % 64);
  switch (b % 6) {
    case 0: return -1;
    case 1: return INT64_MAX;
    case 2: return int64_t{1} << 32;
    case 3: return INT64_MIN;
    default: return p.ConsumeIntegral<int64_t>();
  }
}

int64_t pick_stride(FuzzedDataProvider& p) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b < 200) return b % 13;
  switch (b % 5) {
    case 0: return -1;
    case 1: return INT64_MAX;
    case 2: return int64_t{1} << 62;
    default: return p.ConsumeIntegral<int64_t>();
  }
}

void decode(FuzzedDataProvider& p, Desc* d) {
  DLTensor& t = d->t;
  const uint8_t nd = p.ConsumeIntegral<uint8_t>();
  if (nd < 240)
    t.ndim = nd % 5;
  else if (nd < 248)
    t.ndim = 16 + (nd % 3);  // 16 ok, 17 and 18 not
  else
    t.ndim = p.ConsumeIntegral<int32_t>();
  const int n = t.ndim < 0 ? 0 : (t.ndim > 17 ? 17 : t.ndim);
  for (int i = 0; i < n; ++i) d->shape[i] = pick_dim(p);
  t.shape = p.ConsumeIntegral<uint8_t>() < 250 ? d->shape : nullptr;
  if (p.ConsumeBool()) {
    for (int i = 0; i < n; ++i) d->strides[i] = pick_stride(p);
    t.strides = d->strides;
  } else {
    t.strides = nullptr;
  }
  static const DLDataType kTypes[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1},  {kDLBfloat, 16, 1},
                                      {kDLInt, 8, 1},    {kDLUInt, 32, 1},  {kDLInt, 64, 1},    {kDLFloat, 32, 4},
                                      {kDLBool, 8, 1},   {kDLFloat, 8, 1},  {kDLComplex, 64, 1}};
  const uint8_t dt = p.ConsumeIntegral<uint8_t>();
  if (dt < 160)
    t.dtype = kTypes[0];
  else if (dt < 240)
    t.dtype = kTypes[dt % (sizeof(kTypes) / sizeof(kTypes[0]))];
  else
    t.dtype = DLDataType{p.ConsumeIntegral<uint8_t>(), p.ConsumeIntegral<uint8_t>(), p.ConsumeIntegral<uint16_t>()};
  const uint8_t bo = p.ConsumeIntegral<uint8_t>();
  if (bo < 160)
    t.byte_offset = 0;
  else if (bo < 240)
    t.byte_offset = bo % 40;
  else
    t.byte_offset = p.ConsumeIntegral<uint64_t>();
  const uint8_t da = p.ConsumeIntegral<uint8_t>();
  const size_t off = p.ConsumeIntegral<uint16_t>() % kArenaSize;
  if (da < 215)
    t.data = g_arena + (off & ~size_t{7});
  else if (da < 235)
    t.data = g_arena + off;
  else if (da < 245)
    t.data = nullptr;
  else
    t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(p.ConsumeIntegral<uint64_t>()));
  const uint8_t dv = p.ConsumeIntegral<uint8_t>();
  if (dv < 240)
    t.device = DLDevice{kDLCPU, 0};
  else
    t.device =
        DLDevice{static_cast<DLDeviceType>(p.ConsumeIntegralInRange<int32_t>(0, 20)), p.ConsumeIntegral<int32_t>()};
}

// The harness's own extent: true when the tensor is safe to compute on (lies in the
// arena) and small; `elems` receives its element count.
bool fits_arena(const DLTensor* t, __int128* elems) {
  if (!t) return true;
  if (t->ndim < 0 || t->ndim > 16 || (t->ndim > 0 && !t->shape) || t->dtype.bits == 0 || t->dtype.bits % 8)
    return false;
  __int128 n = 1, last = 0, compact = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] < 0 || t->shape[i] > 4096) return false;
    const __int128 s = t->strides ? t->strides[i] : compact;
    if (s < 0 || s > 4096) return false;
    compact *= t->shape[i] > 0 ? t->shape[i] : 1;
    n *= t->shape[i];
    if (t->shape[i] > 0) last += (t->shape[i] - 1) * s;
  }
  *elems = n;
  if (n == 0) return true;
  if (n > 256) return false;
  const __int128 lo = (__int128)(uintptr_t)t->data + t->byte_offset;
  const __int128 hi = lo + (last + 1) * (t->dtype.bits / 8);
  return t->data && lo >= (__int128)(uintptr_t)g_arena && hi <= (__int128)(uintptr_t)g_arena + kArenaSize;
}

void expect_status(dlfuse_status_t s, const char* what) {
  if (s == DLFUSE_STATUS_OK) {
    ++g_ok;
    return;
  }
  ++g_refused;
  if (s < DLFUSE_STATUS_INVALID_ARGUMENT || s > DLFUSE_STATUS_INTERNAL) {
    std::fprintf(stderr, "fuzz_validation: %s returned %d, not a dlfuse_status_t\n", what, static_cast<int>(s));
    std::abort();
  }
  const char* e = dlfuse_last_error();
  if (!e || !*e) {
    std::fprintf(stderr, "fuzz_validation: %s returned %s with an empty dlfuse_last_error()\n", what,
                 dlfuse_status_string(s));
    std::abort();
  }
}

struct Outcome {
  dlfuse_status_t status;
  std::string message;
};

Outcome outcome_of(dlfuse_status_t s) { return {s, s == DLFUSE_STATUS_OK ? std::string() : dlfuse_last_error()}; }

void expect_same(const Outcome& a, const Outcome& b, const char* what) {
  if (a.status == b.status && a.message == b.message) return;
  std::fprintf(stderr, "fuzz_validation: %s: outcome depends on the thread's history:\n  %s: %s\n  %s: %s\n", what,
               dlfuse_status_string(a.status), a.message.c_str(), dlfuse_status_string(b.status), b.message.c_str());
  std::abort();
}

// C callers may pass any int as a dlfuse_activation_t; call the typed functions through
// pointer types that say int32_t, as such a caller's compiler would.
using AmaFn = dlfuse_status_t (*)(dlfuse_registry_t, const DLTensor*, const DLTensor*, const DLTensor*, double, int32_t,
                                  DLTensor*, void*);
using AmaBwdFn = dlfuse_status_t (*)(dlfuse_registry_t, const DLTensor*, const DLTensor*, const DLTensor*,
                                     const DLTensor*, double, int32_t, DLTensor*, DLTensor*, DLTensor*, void*);
using AmaBwdOutFn = dlfuse_status_t (*)(dlfuse_registry_t, const DLTensor*, const DLTensor*, double, int32_t, DLTensor*,
                                        DLTensor*, DLTensor*, void*);
using MaaFn = dlfuse_status_t (*)(dlfuse_registry_t, const DLTensor*, const DLTensor*, const DLTensor*, int32_t,
                                  DLTensor*, DLTensor*, int32_t, void*);
using MaaBwdFn = dlfuse_status_t (*)(dlfuse_registry_t, const DLTensor*, const DLTensor*, const DLTensor*,
                                     const DLTensor*, const DLTensor*, int32_t, DLTensor*, DLTensor*, DLTensor*,
                                     int32_t, void*);

// The known ops in the registry's order (dlfuse/ops.def), a third-party
// op the oracle serves, and a name nobody serves.
// ABI 1.2's ops come after the unknown name, so that inputs saved before them decode as they did.
enum Op { kMatmul, kMatmulBwd, kAddMul, kAddMulBwd, kMatmulAct, kMatmulActBwd, kResidual, kResidualBwd, kKnown };
constexpr int kCustomOp = kKnown, kUnknownOp = kKnown + 1, kMlpOp = kKnown + 2, kMlpBwdOp = kKnown + 3,
              kNumOps = kKnown + 4;
const char* const kOpNames[] = {DLFUSE_OP_MATMUL_ADD_RELU,
                                DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD,
                                DLFUSE_OP_ADD_MUL_ACTIVATION,
                                DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD,
                                DLFUSE_OP_MATMUL_ADD_ACTIVATION,
                                DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD,
                                DLFUSE_OP_MATMUL_ADD_RESIDUAL,
                                DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD,
                                FUZZ_ORACLE_CUSTOM_OP,
                                "no_such_op_fuzz",
                                DLFUSE_OP_MLP,
                                DLFUSE_OP_MLP_BACKWARD};
// Inputs and outputs of each op (add_mul_activation_backward: ABI 1.1's 5), then custom,
// unknown, mlp, mlp_backward.
const int kIn[] = {3, 4, 3, 5, 3, 5, 4, 3, 2, 2, 15, 16}, kOut[] = {1, 3, 1, 3, 2, 3, 1, 4, 1, 1, 7, 15};
const int kAttrs[] = {1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3};
// The ops of dlfuse/ops.def (testref serves them; the registry knows their rules).
bool core_op(int op) { return op != kCustomOp && op != kUnknownOp; }
bool mlp_op(int op) { return op == kMlpOp || op == kMlpBwdOp; }

// Kinds of call: one per typed function, then dlfuse_op_call, then the device services.
enum Kind { kTypedFromOut = kKnown, kGeneric, kServices, kKinds };

struct Call {
  int kind;  // Kind, or an Op: that op's typed function
  int op;    // Op, kCustomOp, kUnknownOp, kMlpOp or kMlpBwdOp
  std::vector<const DLTensor*> in;
  std::vector<DLTensor*> out;
  int32_t n_in = 0, n_out = 0;
  bool in_null = false, out_null = false;
  std::vector<dlfuse_attr_t> attrs;
  int32_t n_attrs = 0;
  bool attrs_null = false;
  int64_t act = 0, tf32 = 0;
  double mul = 1.0;
};

dlfuse_op_t g_oracle_ops[kNumOps], g_ref_ops[kNumOps];
unsigned long long g_valid[kNumOps];  // first judgments that said OK, by op

dlfuse_status_t run(dlfuse_registry_t reg, const Call& c) {
  const DLTensor* const* in = c.in_null ? nullptr : c.in.data();
  DLTensor* const* out = c.out_null ? nullptr : c.out.data();
  const int32_t tf32 = static_cast<int32_t>(c.tf32), act = static_cast<int32_t>(c.act);
  const auto& i = c.in;
  const auto& o = c.out;
  switch (c.kind) {
    case kMatmul: return dlfuse_matmul_add_relu(reg, i[0], i[1], i[2], o[0], tf32, nullptr);
    case kMatmulBwd:
      return dlfuse_matmul_add_relu_backward(reg, i[0], i[1], i[2], i[3], o[0], o[1], o[2], tf32, nullptr);
    case kAddMul:
      return reinterpret_cast<AmaFn>(&dlfuse_add_mul_activation)(reg, i[0], i[1], i[2], c.mul, act, o[0], nullptr);
    case kAddMulBwd:
      return reinterpret_cast<AmaBwdFn>(&dlfuse_add_mul_activation_backward)(reg, i[0], i[1], i[2], i[3], c.mul, act,
                                                                             o[0], o[1], o[2], nullptr);
    case kTypedFromOut:
      return reinterpret_cast<AmaBwdOutFn>(&dlfuse_add_mul_activation_backward_from_out)(reg, i[0], i[4], c.mul, act,
                                                                                         o[0], o[1], o[2], nullptr);
    case kMatmulAct:
      return reinterpret_cast<MaaFn>(&dlfuse_matmul_add_activation)(reg, i[0], i[1], i[2], act, o[0], o[1], tf32,
                                                                    nullptr);
    case kMatmulActBwd:
      return reinterpret_cast<MaaBwdFn>(&dlfuse_matmul_add_activation_backward)(reg, i[0], i[1], i[2], i[3], i[4], act,
                                                                                o[0], o[1], o[2], tf32, nullptr);
    case kResidual: return dlfuse_matmul_add_residual(reg, i[0], i[1], i[2], i[3], o[0], tf32, nullptr);
    case kResidualBwd:
      return dlfuse_matmul_add_residual_backward(reg, i[0], i[1], i[2], o[0], o[1], o[2], o[3], tf32, nullptr);
    default: {
      dlfuse_op_t op = (reg == g_oracle_reg ? g_oracle_ops : g_ref_ops)[c.op];
      if (!op) {  // the unknown name: op_get's refusal is the outcome
        return dlfuse_op_get(reg, kOpNames[c.op], &op);
      }
      return dlfuse_op_call(op, in, c.n_in, out, c.n_out, c.attrs_null ? nullptr : c.attrs.data(), c.n_attrs, nullptr);
    }
  }
}

// forget() for mlp and mlp_backward: one layer of K = N = 0 over M = 1..8 rows (every
// output empty, so no kernel runs), all gradients NULL.
void forget_mlp(int op) {
  for (int v = 0; v < 8; ++v) {
    int64_t mk[2] = {v + 1, 0}, kn[2] = {0, 0}, n[1] = {0};
    auto make = [](int64_t* shape, int32_t ndim) {
      DLTensor t{};
      t.ndim = ndim;
      t.shape = shape;
      t.dtype = DLDataType{kDLFloat, 32, 1};
      t.device = DLDevice{kDLCPU, 0};
      return t;
    };
    DLTensor X = make(mk, 2), W = make(kn, 2), B = make(n, 1), O = make(mk, 2), G = make(mk, 2);
    std::vector<const DLTensor*> in(size_t(kIn[op]), nullptr);
    std::vector<DLTensor*> out(size_t(kOut[op]), nullptr);
    if (op == kMlpOp) {
      in[0] = &X, in[1] = &W, in[8] = &B, out[0] = &O;
    } else {
      in[0] = &G, in[1] = &X, in[2] = &W;
    }
    dlfuse_attr_t relu{};
    relu.key = DLFUSE_ATTR_ACTIVATION;
    relu.type = DLFUSE_ATTR_INT64;
    relu.value.i64 = DLFUSE_ACT_RELU;
    if (dlfuse_op_call(g_oracle_ops[op], in.data(), kIn[op], out.data(), kOut[op], &relu, 1, nullptr) !=
        DLFUSE_STATUS_OK) {
      std::fprintf(stderr, "fuzz_validation: a valid call of %s with empty tensors was refused: %s\n", kOpNames[op],
                   dlfuse_last_error());
      std::abort();
    }
  }
}

// Makes this thread forget every layout it remembers of the op (registry/src/layout_cache.cpp
// keeps the last 8 valid ones per thread and op): 8 valid calls of distinct layouts, with
// empty tensors (no kernel runs), replace them all. The next call of the fuzzed layout then
// takes the full checks, as a thread's first call does.
void forget(int op) {
  if (mlp_op(op)) return forget_mlp(op);
  if (op >= kKnown) return;
  constexpr int kRemembered = 8;
  for (int v = 0; v < kRemembered; ++v) {
    int64_t mk[2] = {v + 1, 0}, kn[2] = {0, 0}, mn[2] = {v + 1, 0};  // K = 0: no data
    auto make = [](int64_t* shape) {
      DLTensor t{};
      t.ndim = 2;
      t.shape = shape;
      t.dtype = DLDataType{kDLFloat, 32, 1};
      t.device = DLDevice{kDLCPU, 0};
      return t;
    };
    DLTensor A = make(mk), B = make(kn), O = make(mn), G = make(mn), P = make(mn), Q = make(mn);
    // Backward calls with every gradient NULL: valid, and nothing to compute.
    std::vector<DLTensor*> out(kOut[op], nullptr);
    std::vector<const DLTensor*> in;
    switch (op) {
      case kMatmul:
        in = {&A, &B, &G};
        out[0] = &O;
        break;
      case kMatmulBwd: in = {&G, &A, &B, &P}; break;
      case kAddMul:
        in = {&G, &P, &Q};
        out[0] = &O;
        break;
      case kAddMulBwd: in = {&G, nullptr, nullptr, nullptr, &P}; break;
      case kMatmulAct:
        in = {&A, &B, &G};
        out[0] = &O;
        break;
      case kMatmulActBwd: in = {&G, &A, &B, nullptr, &P}; break;
      case kResidual:
        in = {&A, &B, &G, &P};
        out[0] = &O;
        break;
      default: in = {&G, &A, &B}; break;
    }
    dlfuse_attr_t relu{};
    relu.key = DLFUSE_ATTR_ACTIVATION;
    relu.type = DLFUSE_ATTR_INT64;
    relu.value.i64 = DLFUSE_ACT_RELU;
    const bool act = kAttrs[op] == 2;  // the ops whose ACTIVATION is required
    if (dlfuse_op_call(g_oracle_ops[op], in.data(), kIn[op], out.data(), kOut[op], act ? &relu : nullptr, act ? 1 : 0,
                       nullptr) != DLFUSE_STATUS_OK) {
      std::fprintf(stderr, "fuzz_validation: a valid call of %s with empty tensors was refused: %s\n", kOpNames[op],
                   dlfuse_last_error());
      std::abort();
    }
  }
}

void report() {
  std::fprintf(stderr,
               "fuzz_validation: %llu calls OK, %llu refused; oracle checked %llu kernel calls, testref ran %llu\n",
               g_ok, g_refused, g_oracle_calls ? g_oracle_calls() : 0ull, g_ref_calls);
  std::fprintf(stderr, "fuzz_validation: valid calls (oracle, first judgment) per op:");
  for (int op = 0; op < kNumOps; ++op) std::fprintf(stderr, " %s %llu;", kOpNames[op], g_valid[op]);
  std::fprintf(stderr, "\n");
}

int32_t pick_count(FuzzedDataProvider& p, int32_t usual) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b < 180) return usual;
  if (b < 240) return b % 18;  // 0..17
  if (b < 248) return -1 - (b % 3);
  return p.ConsumeIntegral<int32_t>();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_arena = static_cast<char*>(std::malloc(kArenaSize));
  std::memset(g_arena, 0, kArenaSize);
  const char* oracle = path_from("FUZZ_ORACLE_PLUGIN", FUZZ_ORACLE_PLUGIN);
  g_oracle_reg = make_registry(oracle);
  g_ref_reg = make_registry(path_from("FUZZ_TESTREF_PLUGIN", FUZZ_TESTREF_PLUGIN));
  // The registry loads RTLD_LOCAL: reach the oracle's hooks through a handle to that file.
  void* h = dlopen(oracle, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  auto set_arena = h ? reinterpret_cast<fuzz_oracle_set_arena_fn>(dlsym(h, "fuzz_oracle_set_arena")) : nullptr;
  g_oracle_calls = h ? reinterpret_cast<fuzz_oracle_calls_fn>(dlsym(h, "fuzz_oracle_calls")) : nullptr;
  if (!set_arena || !g_oracle_calls) {
    std::fprintf(stderr, "fuzz_validation: the oracle's hooks are missing in %s\n", oracle);
    std::abort();
  }
  // Both plugins serve every known op; the oracle, the custom one too. The unknown name
  // keeps no handle: op_get's outcome is the call's.
  for (int op = 0; op < kNumOps; ++op) {
    if (op == kUnknownOp) continue;
    if (dlfuse_op_get(g_oracle_reg, kOpNames[op], &g_oracle_ops[op]) != DLFUSE_STATUS_OK ||
        (core_op(op) && dlfuse_op_get(g_ref_reg, kOpNames[op], &g_ref_ops[op]) != DLFUSE_STATUS_OK)) {
      std::fprintf(stderr, "fuzz_validation: op_get(%s) failed: %s\n", kOpNames[op], dlfuse_last_error());
      std::abort();
    }
  }
  set_arena(g_arena, kArenaSize);
  std::atexit(report);
  return 0;
}

namespace {

// The dtypes tests/plugins/testref serves; the oracle serves these and more.
bool testref_dtype(DLDataType d) {
  return (d.code == kDLFloat && (d.bits == 32 || d.bits == 64 || d.bits == 16)) ||
         (d.code == kDLBfloat && d.bits == 16);
}

// Validation is the registry's, whoever serves the op: on a call both plugins have a kernel
// for (grad_out, or a, or x, is every known op's first argument and fixes the dtype), the
// statuses agree, and an INVALID_ARGUMENT that names no plugin is word for word the same
// (UNSUPPORTED lists what each registry offers).
void expect_agree(const Outcome& oracle, const Outcome& ref, const Call& c) {
  const DLTensor* first = c.in[0];
  if (first && !testref_dtype(first->dtype)) return;
  const bool names_plugin =
      oracle.message.find("plugin '") != std::string::npos || ref.message.find("plugin '") != std::string::npos;
  if (oracle.status == ref.status &&
      (oracle.status != DLFUSE_STATUS_INVALID_ARGUMENT || names_plugin || oracle.message == ref.message))
    return;
  std::fprintf(stderr, "fuzz_validation: %s: the oracle's and testref's registries disagree:\n  %s: %s\n  %s: %s\n",
               kOpNames[c.op], dlfuse_status_string(oracle.status), oracle.message.c_str(),
               dlfuse_status_string(ref.status), ref.message.c_str());
  std::abort();
}

// Whether the call hands c.in[i] to the registry (the typed functions of
// add_mul_activation_backward take 4 of the 5, a generic call n_in).
bool passes_input(const Call& c, int i) {
  if (c.kind == kAddMulBwd) return i < 4;
  if (c.kind == kTypedFromOut) return i == 0 || i == 4;
  return c.kind != kGeneric || i < c.n_in;
}

// Matmul ops with shapes that fit together: random shapes almost never do for four or
// more tensors, and then no valid non-empty call (nor an in-place residual) would reach
// the kernels. Each argument gets its own descriptor, compact, with M, K, N in 1..4, the
// first descriptor's dtype, and its fuzzed data and byte_offset made aligned. Roles: A [M, K], B [K, N], V [N] (bias
// and its gradient), O [M, N].
void cohere(FuzzedDataProvider& p, Call* c, Desc* pool, int n_desc) {
  static const char* const kRoles[kKnown][2] = {
      {}, {}, {}, {}, {"ABV", "OO"}, {"OABOO", "ABV"}, {"ABVO", "O"}, {"OAB", "ABVO"}};
  if (c->op < kMatmulAct || c->op >= kKnown || n_desc < kIn[c->op] + kOut[c->op]) return;
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b >= 96) return;
  const int64_t m = 1 + b % 4, k = 1 + (b >> 2) % 4, n = 1 + (b >> 4) % 4;
  int next = 0;
  for (int side = 0; side < 2; ++side) {
    const char* roles = kRoles[c->op][side];
    for (int i = 0; roles[i]; ++i) {
      Desc& d = pool[next++];
      d.t.shape = d.shape;
      d.t.strides = nullptr;
      d.t.dtype = pool[0].t.dtype;
      d.t.device = DLDevice{kDLCPU, 0};
      // Aligned and inside the arena (up to 4x4 float64 past it), else most calls fail on
      // placement: what the other modes test.
      const uintptr_t base = reinterpret_cast<uintptr_t>(g_arena), x = reinterpret_cast<uintptr_t>(d.t.data);
      const uintptr_t at = x >= base && x < base + kArenaSize - 256 ? x - base : (x % (kArenaSize - 256));
      d.t.data = g_arena + (at & ~uintptr_t{7});
      d.t.byte_offset &= 56;
      const char r = roles[i];
      d.t.ndim = r == 'V' ? 1 : 2;
      d.shape[0] = r == 'V' ? n : (r == 'B' ? k : m);
      d.shape[1] = r == 'A' ? k : n;
      if (side == 0)
        c->in[i] = &d.t;
      else
        c->out[i] = &d.t;
    }
  }
}

// One of the first `placed` slots gets one dimension off by one, now and then.
void perturb_one(FuzzedDataProvider& p, Desc* slots, int placed) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b >= 96 || placed == 0) return;
  DLTensor& t = slots[b % placed].t;
  if (t.ndim == 0) return;
  const int d = (b >> 5) % t.ndim;
  t.shape[d] = b & 16 ? t.shape[d] + 1 : t.shape[d] - 1;  // [0]'s -1 stays invalid
}

// mlp and mlp_backward with layers that fit together: random tensors almost never form a
// stack. 1 to 3 layers of widths 1..4 over 1..4 rows, each tensor its own compact
// descriptor from `slots` (the first pool descriptor's dtype) in its own 256-byte slot of
// the arena, the tensors of the layers that do not exist NULL or [0]. Often one of them then
// gets one wrong dimension, or one input is left out, which the registry must refuse where
// the op needs it; sometimes all are left as drawn.
void cohere_mlp(FuzzedDataProvider& p, Call* c, Desc* slots, DLDataType dtype) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b >= 192) return;
  const int L = 1 + b % 3;
  const int64_t M = 1 + (b >> 2) % 4;
  const bool empty_unused = b & 16;
  int64_t width[4];
  for (int i = 0; i <= L; ++i) width[i] = 1 + p.ConsumeIntegralInRange<int>(0, 3);
  size_t slot = p.ConsumeIntegral<uint8_t>() % 128;  // 32 slots past it stay in the arena
  int next = 0;
  auto place = [&](std::initializer_list<int64_t> shape) -> DLTensor* {
    Desc& d = slots[next++];
    d = Desc{};
    d.t.ndim = int32_t(shape.size());
    std::copy(shape.begin(), shape.end(), d.shape);
    d.t.shape = d.shape;
    d.t.dtype = dtype;
    d.t.device = DLDevice{kDLCPU, 0};
    d.t.data = g_arena + slot++ * 256;  // 4 x 4 float64 = 128 bytes at most
    return &d.t;
  };
  auto unused = [&]() -> DLTensor* { return empty_unused ? place({0}) : nullptr; };
  std::fill(c->in.begin(), c->in.end(), nullptr);
  std::fill(c->out.begin(), c->out.end(), nullptr);
  const bool bwd = c->op == kMlpBwdOp;
  const int w0 = bwd ? 2 : 1;
  if (bwd) c->in[0] = place({M, width[L]});
  c->in[w0 - 1] = place({M, width[0]});
  for (int i = 0; i < L; ++i) c->in[size_t(w0 + i)] = place({width[i], width[i + 1]});
  if (!bwd) {
    for (int i = 0; i < L; ++i) c->in[size_t(8 + i)] = place({width[i + 1]});
    c->out[0] = place({M, width[L]});
    for (int i = 0; i < 6; ++i) c->out[size_t(1 + i)] = i < L - 1 ? place({M, width[i + 1]}) : unused();
  } else {
    for (int i = 0; i < 6; ++i) c->in[size_t(9 + i)] = i < L - 1 ? place({M, width[i + 1]}) : unused();
    c->in[15] = place({M, width[L]});
    c->out[0] = place({M, width[0]});
    for (int i = 0; i < 7; ++i) {
      c->out[size_t(1 + i)] = i < L ? place({width[i], width[i + 1]}) : unused();
      c->out[size_t(8 + i)] = i < L ? place({width[i + 1]}) : unused();
    }
  }
  perturb_one(p, slots, next);
  const uint8_t drop = p.ConsumeIntegral<uint8_t>();  // an input left out (outputs: pick_form)
  if (drop < 48) c->in[size_t(drop % kIn[c->op])] = nullptr;
}

// mlp's attributes, mostly a valid set (three keys drawn at random rarely are): ACTIVATION,
// then OUTPUT_ACTIVATION and ALLOW_TF32 where given, activations mostly those the backward
// can take.
void mlp_attrs(FuzzedDataProvider& p, Call* c) {
  const uint8_t b = p.ConsumeIntegral<uint8_t>();
  if (b >= 224) return;
  const int32_t keys[3] = {DLFUSE_ATTR_ACTIVATION, DLFUSE_ATTR_OUTPUT_ACTIVATION, DLFUSE_ATTR_ALLOW_TF32};
  const int64_t from_out[4] = {DLFUSE_ACT_IDENTITY, DLFUSE_ACT_RELU, DLFUSE_ACT_SIGMOID, DLFUSE_ACT_TANH};
  c->n_attrs = 1 + b % 3;
  for (int i = 0; i < c->n_attrs; ++i) {
    const uint8_t v = p.ConsumeIntegral<uint8_t>();
    dlfuse_attr_t& a = c->attrs[size_t(i)];
    a.key = keys[i];
    a.type = DLFUSE_ATTR_INT64;
    a.value.i64 = keys[i] == DLFUSE_ATTR_ALLOW_TF32 ? v % 2 : (v < 192 ? from_out[v % 4] : v % DLFUSE_ACT_COUNT);
  }
  c->attrs_null = false;
}

// The optional inputs' combinations: mostly the valid ones, sometimes anything.
void pick_form(FuzzedDataProvider& p, Call* c) {
  const uint8_t f = p.ConsumeIntegral<uint8_t>();
  if (c->op == kAddMulBwd) {
    if (c->kind == kTypedFromOut || f % 4 == 1)
      c->in[1] = c->in[2] = c->in[3] = nullptr;
    else if (f % 4 == 0)
      c->in[4] = nullptr;
  } else if (c->op == kMatmulActBwd) {
    if (f % 3 < 2) c->in[3 + f % 3] = nullptr;
  } else if (c->op == kMatmulAct) {
    if (f % 2) c->out[1] = nullptr;
  }
  // Gradients (and pre) left out: bit i of a small byte drops outputs[i].
  const uint8_t drop = p.ConsumeIntegral<uint8_t>();
  if (drop < 64)
    for (int i = 0; i < kOut[c->op]; ++i)
      if (drop >> i & 1) c->out[i] = nullptr;
  // Now and then an output and an input are one tensor: in place (exactly x, exactly
  // residual) or not. The input taking the output's descriptor has the output's shape, as
  // a valid in-place residual must.
  const uint8_t alias = p.ConsumeIntegral<uint8_t>();
  const int o = alias % 4 % kOut[c->op], i = alias % 5 % kIn[c->op];
  if (alias < 40)
    c->out[o] = const_cast<DLTensor*>(c->in[i]);
  else if (alias < 80)
    c->in[i] = c->out[o];
}

std::string dims(const int64_t* d, int32_t n) {
  std::string r = "[";
  for (int32_t i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(d[i]);
  return r + "]";
}

bool broadcasts_to(const DLTensor* t, const int64_t* target, int32_t n) {
  if (t->ndim > n) return false;
  for (int32_t i = 1; i <= t->ndim; ++i)
    if (t->shape[t->ndim - i] != 1 && t->shape[t->ndim - i] != target[n - i]) return false;
  return true;
}

// Inference on a generic call's inputs and attributes (see the header): statuses, and its
// agreement with the validation outcome `call_status` of the same call.
void check_inference(const Call& c, dlfuse_status_t call_status) {
  dlfuse_op_t op = g_oracle_ops[c.op];
  dlfuse_op_schema_t s{};
  s.struct_size = sizeof s;
  if (!op || dlfuse_op_schema(op, &s) != DLFUSE_STATUS_OK) return;  // no schema: no inference
  int32_t ndims[DLFUSE_MAX_ARGS];
  int64_t shapes[DLFUSE_MAX_ARGS * DLFUSE_MAX_NDIM];
  DLDataType dtypes[DLFUSE_MAX_ARGS];
  const dlfuse_status_t st =
      dlfuse_op_infer_outputs(op, c.in_null ? nullptr : c.in.data(), c.n_in, c.attrs_null ? nullptr : c.attrs.data(),
                              c.n_attrs, s.num_outputs, ndims, shapes, dtypes);
  expect_status(st, "dlfuse_op_infer_outputs");
  if (call_status != DLFUSE_STATUS_OK || c.n_out != s.num_outputs || c.out_null) return;
  if (st != DLFUSE_STATUS_OK) {
    std::fprintf(stderr, "fuzz_validation: %s passed validation, but inference refused its inputs: %s\n", s.name,
                 dlfuse_last_error());
    std::abort();
  }
  for (int32_t i = 0; i < s.num_outputs; ++i) {
    const DLTensor* o = c.out[size_t(i)];
    const int64_t* want = shapes + size_t(i) * DLFUSE_MAX_NDIM;
    if (!o) continue;
    const bool reducible = s.outputs[i].flags & DLFUSE_ARG_REDUCIBLE;
    bool same = o->ndim == ndims[i];
    for (int32_t d = 0; same && d < ndims[i]; ++d) same = o->shape[d] == want[d];  // a 0-d shape may be NULL
    if (same || (reducible && broadcasts_to(o, want, ndims[i]))) continue;
    std::fprintf(stderr, "fuzz_validation: %s passed validation with output '%s' of shape %s; inference gives %s\n",
                 s.name, s.outputs[i].name, dims(o->shape, o->ndim).c_str(), dims(want, ndims[i]).c_str());
    std::abort();
  }
}

// The backward plan on a generic call's attributes, device type and dtype: a status with a
// message; for a call that passed validation of an op with a backward, a plan that keeps
// grad_out, names only the backward's inputs and writes every required output.
void check_backward_plan(const Call& c, dlfuse_status_t call_status) {
  dlfuse_op_t op = g_oracle_ops[c.op];
  dlfuse_op_schema_t s{};
  s.struct_size = sizeof s;
  if (!op || dlfuse_op_schema(op, &s) != DLFUSE_STATUS_OK) return;
  const DLTensor* like = nullptr;
  for (size_t i = 0; !c.in_null && i < c.in.size() && i < size_t(c.n_in) && !like; ++i) like = c.in[i];
  dlfuse_op_t bwd = nullptr;
  uint32_t keep = 0, write = 0;
  const dlfuse_status_t st = dlfuse_op_backward_plan(
      op, c.attrs_null ? nullptr : c.attrs.data(), c.n_attrs, like ? int32_t(like->device.device_type) : kDLCPU,
      like ? like->dtype : DLDataType{kDLFloat, 32, 1}, &bwd, &keep, &write);
  expect_status(st, "dlfuse_op_backward_plan");
  const size_t len = std::strlen(s.name);
  const bool is_backward = len > 9 && std::strcmp(s.name + len - 9, "_backward") == 0;
  if (st != DLFUSE_STATUS_OK) {
    if (call_status != DLFUSE_STATUS_OK || is_backward) return;
    std::fprintf(stderr, "fuzz_validation: %s passed validation, but its backward plan failed: %s\n", s.name,
                 dlfuse_last_error());
    std::abort();
  }
  dlfuse_op_schema_t b{};
  b.struct_size = sizeof b;
  uint32_t required = 0;
  for (int32_t k = 0; k < s.num_outputs; ++k)
    if (!(s.outputs[k].flags & DLFUSE_ARG_OPTIONAL)) required |= 1u << k;
  if (dlfuse_op_schema(bwd, &b) != DLFUSE_STATUS_OK || !(keep & 1u) || (keep >> b.num_inputs) != 0 ||
      (write & required) != required || (write >> s.num_outputs) != 0) {
    std::fprintf(stderr, "fuzz_validation: %s: backward plan keep 0x%x write 0x%x does not fit its schemas\n", s.name,
                 keep, write);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  Call c;
  const uint8_t k = p.ConsumeIntegral<uint8_t>();
  // The byte ranges of ABI 1.0's kinds are kept, so that the regress-* seeds still replay
  // the calls they were saved for.
  c.kind = k < 100 ? k % 4 : (k < 180 ? kMatmulAct + k % 5 : (k < 240 ? kGeneric : kServices));
  c.op =
      c.kind == kTypedFromOut ? kAddMulBwd : (c.kind < kKnown ? c.kind : p.ConsumeIntegralInRange<int>(0, kUnknownOp));
  if (c.op == kUnknownOp) {  // most of these become ABI 1.2's ops
    const uint8_t b = p.ConsumeIntegral<uint8_t>();
    if (b < 208) c.op = b % 2 ? kMlpOp : kMlpBwdOp;
  }

  if (c.kind == kServices) {  // device services on odd devices: statuses and messages only
    const DLDevice dev{static_cast<DLDeviceType>(p.ConsumeIntegralInRange<int32_t>(-1, 20)),
                       p.ConsumeIntegral<int32_t>()};
    int32_t count = -7;
    expect_status(dlfuse_device_count(g_oracle_reg, dev.device_type, &count), "dlfuse_device_count");
    void* ptr = nullptr;
    expect_status(dlfuse_device_alloc(g_oracle_reg, dev, p.ConsumeIntegral<size_t>(), &ptr), "dlfuse_device_alloc");
    expect_status(dlfuse_device_synchronize(g_oracle_reg, dev, nullptr), "dlfuse_device_synchronize");
    expect_status(dlfuse_device_free(g_oracle_reg, dev, nullptr), "dlfuse_device_free");
    return 0;
  }

  Desc pool[kPool];
  Desc mlp_slots[32];
  const int n_desc = p.ConsumeIntegralInRange<int>(1, kPool);
  for (int i = 0; i < n_desc; ++i) decode(p, &pool[i]);
  auto pick_tensor = [&](bool output) -> DLTensor* {
    const uint8_t b = p.ConsumeIntegral<uint8_t>();
    if (b >= 248) return nullptr;
    if (output && b >= 232) return &pool[0].t;  // in place on the first input, often x
    return &pool[b % n_desc].t;
  };

  // A generic call of add_mul_activation_backward passes ABI 1.1's 5 inputs or 1.0's 4.
  const int usual_in = c.kind == kGeneric && c.op == kAddMulBwd && p.ConsumeBool() ? 4 : kIn[c.op];
  c.n_in = c.kind != kGeneric ? kIn[c.op] : pick_count(p, usual_in);
  c.n_out = c.kind != kGeneric ? kOut[c.op] : pick_count(p, kOut[c.op]);
  c.in.assign(18, nullptr);
  c.out.assign(18, nullptr);
  for (int i = 0; i < 18; ++i) c.in[i] = pick_tensor(false);
  for (int i = 0; i < 18; ++i) c.out[i] = pick_tensor(true);
  if (c.kind > kAddMulBwd) {  // not ABI 1.0's typed calls: their seeds replay
    if (mlp_op(c.op))
      cohere_mlp(p, &c, mlp_slots, pool[0].t.dtype);
    else
      cohere(p, &c, pool, n_desc);
    pick_form(p, &c);
  }
  c.in_null = p.ConsumeIntegral<uint8_t>() >= 250;
  c.out_null = p.ConsumeIntegral<uint8_t>() >= 250;

  const uint8_t av = p.ConsumeIntegral<uint8_t>();
  c.act = av < 200 ? av % 7 : (av < 240 ? av % 9 - 1 : p.ConsumeIntegral<int32_t>());
  c.tf32 = av < 220 ? av % 2 : p.ConsumeIntegral<int32_t>();
  c.mul = p.ConsumeBool() ? p.ConsumeFloatingPoint<double>() : 1.5;
  c.n_attrs = pick_count(p, kAttrs[c.op]);
  c.attrs.resize(18);
  for (int i = 0; i < 18; ++i) {
    dlfuse_attr_t& a = c.attrs[i];
    const uint8_t b = p.ConsumeIntegral<uint8_t>();
    a.key = b < 230 ? 1 + b % (mlp_op(c.op) ? 4 : 3) : p.ConsumeIntegral<int32_t>();
    a.type = b < 200 ? (a.key == DLFUSE_ATTR_MULTIPLIER ? DLFUSE_ATTR_FLOAT64 : DLFUSE_ATTR_INT64)
                     : p.ConsumeIntegralInRange<int32_t>(-1, 3);
    if (a.type == DLFUSE_ATTR_FLOAT64)
      a.value.f64 = p.ConsumeFloatingPoint<double>();
    else
      a.value.i64 = b < 220 ? b % 8 : p.ConsumeIntegral<int64_t>();
  }
  c.attrs_null = p.ConsumeIntegral<uint8_t>() >= 250;
  if (mlp_op(c.op)) mlp_attrs(p, &c);

  // first: this thread forgot the op's layouts, so the full checks run; again: a repeat of
  // the layout when first passed; moved: the same layouts at other addresses, judged once
  // as a repeat and once after forgetting. Now and then a new thread judges first, too.
  forget(c.op);
  const dlfuse_status_t first_status = run(g_oracle_reg, c);
  const Outcome first = outcome_of(first_status);
  expect_status(first_status, kOpNames[c.op]);
  if (first_status == DLFUSE_STATUS_OK) ++g_valid[c.op];
  expect_same(first, outcome_of(run(g_oracle_reg, c)), "the same call again");
  if (c.kind == kGeneric) {
    check_inference(c, first_status);
    check_backward_plan(c, first_status);
  }
  if (p.ConsumeIntegral<uint8_t>() < 4) {
    Outcome fresh{};
    std::thread([&] { fresh = outcome_of(run(g_oracle_reg, c)); }).join();
    expect_same(first, fresh, "the call on a new thread");
  }
  for (int i = 0; i < n_desc; ++i) {  // move tensors, keep their layouts
    const uint8_t m = p.ConsumeIntegral<uint8_t>();
    if (m < 128) continue;
    const size_t off = p.ConsumeIntegral<uint16_t>() % kArenaSize;
    pool[i].t.data = m < 240 ? g_arena + (off & ~size_t{7}) : (m < 248 ? g_arena + off : nullptr);
    if (m >= 224) pool[i].t.byte_offset = m % 2 ? 0 : off % 24;
  }
  const dlfuse_status_t moved_status = run(g_oracle_reg, c);
  const Outcome moved = outcome_of(moved_status);
  expect_status(moved_status, kOpNames[c.op]);
  forget(c.op);
  expect_same(moved, outcome_of(run(g_oracle_reg, c)), "the call with tensors moved");

  // The real kernels, when every tensor the call can reach is in the arena and small.
  if (!core_op(c.op) || c.in_null || c.out_null) return 0;
  __int128 work = 1;
  for (int i = 0; i < kIn[c.op]; ++i) {
    __int128 e = 0;
    if (passes_input(c, i) && !fits_arena(c.in[i], &e)) return 0;
    work += e;
  }
  for (int i = 0; i < kOut[c.op]; ++i) {
    __int128 e = 0;
    if (!fits_arena(c.out[i], &e)) return 0;
    work += e;
  }
  if (work > 2048) return 0;
  ++g_ref_calls;
  const dlfuse_status_t ref_status = run(g_ref_reg, c);
  expect_status(ref_status, kOpNames[c.op]);
  expect_agree(moved, outcome_of(ref_status), c);
  return 0;
}

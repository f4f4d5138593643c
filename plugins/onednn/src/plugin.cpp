// The oneDNN plugin's descriptor, kernel table, device services (host memory), the
// per-thread execution helper and the argument sanity its kernels share.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common.h"
#include "mlp_layers.hpp"

namespace dlfuse_onednn {

void execute(State& st, const CachedPrimitive& p, std::unordered_map<int, dnnl::memory> args) {
  // Scratchpad and stream belong to the calling thread: no lock, no sharing between
  // concurrent calls. The buffer only grows, so a repeated call allocates nothing.
  // initial-exec: the few bytes live in the static TLS surplus glibc keeps for dlopen'd
  // libraries, so no dynamic TLS block is made per thread. With one, GCC 12's
  // LeakSanitizer read a stale DTV entry at exit and crashed ("Tracer caught signal 11")
  // after the conformance threads stage (asan job, 2026-11-23); no __tls_get_addr per call
  // either.
  static thread_local Buffer scratch __attribute__((tls_model("initial-exec")));
  if (p.scratchpad_bytes > 0) {
    scratch.resize((p.scratchpad_bytes + sizeof(float) - 1) / sizeof(float));
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(
        dnnl::memory::desc({int64_t(p.scratchpad_bytes)}, dnnl::memory::data_type::u8, dnnl::memory::format_tag::a),
        st.engine, scratch.get());
  }
  dnnl::stream s(st.engine);
  p.prim.execute(s, args);
  s.wait();
}

namespace {

constexpr size_t kAlign = 64;

// mlp and mlp_backward: one call of the layer kernels per layer (oneDNN has no fused stack).
constexpr dlfuse_plugin::LayerKernels kLayers = {matmul_add_activation, matmul_add_activation_backward};

dlfuse_status_t mlp(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return kit::guarded("onednn", args, [&] {
    dlfuse_plugin::HostScratch scratch;
    return dlfuse_plugin::mlp_forward(state, kLayers, args, scratch);
  });
}

dlfuse_status_t mlp_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept {
  return kit::guarded("onednn", args, [&] {
    dlfuse_plugin::HostScratch scratch;
    return dlfuse_plugin::mlp_backward(state, kLayers, args, scratch);
  });
}

const kit::KernelTable& kernel_table() {
  static const kit::KernelTable table(
      kDLCPU, {{kDLFloat, 32, 1}, {kDLBfloat, 16, 1}, {kDLFloat, 16, 1}}, 100,
      {{DLFUSE_OP_MATMUL_ADD_RELU, matmul_add_relu},
       {DLFUSE_OP_MATMUL_ADD_RELU_BACKWARD, matmul_add_relu_backward},
       {DLFUSE_OP_ADD_MUL_ACTIVATION, add_mul_activation},
       // takes out (ABI 1.1) as a fifth input
       {DLFUSE_OP_ADD_MUL_ACTIVATION_BACKWARD, add_mul_activation_backward, nullptr, DLFUSE_KERNEL_TAKES_V1_1_INPUTS},
       {DLFUSE_OP_MATMUL_ADD_ACTIVATION, matmul_add_activation},
       {DLFUSE_OP_MATMUL_ADD_ACTIVATION_BACKWARD, matmul_add_activation_backward},
       {DLFUSE_OP_MATMUL_ADD_RESIDUAL, matmul_add_residual},
       {DLFUSE_OP_MATMUL_ADD_RESIDUAL_BACKWARD, matmul_add_residual_backward},
       {DLFUSE_OP_MLP, mlp},
       {DLFUSE_OP_MLP_BACKWARD, mlp_backward}});
  return table;
}

dlfuse_status_t check_device(int32_t device_id) {
  if (device_id == 0) return DLFUSE_STATUS_OK;
  kit::invalid("device_id", "0 (the one cpu device)", std::to_string(device_id));
}

dlfuse_status_t open_plugin(const dlfuse_host_info_t* host, void** state, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!state) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "state: expected a pointer, got NULL");
    if (host && DLFUSE_HAS_FIELD(host, dlfuse_host_info_t, abi_major) && host->abi_major != DLFUSE_ABI_MAJOR)
      throw Error(DLFUSE_STATUS_ABI_MISMATCH, "host ABI major " + std::to_string(host->abi_major) +
                                                  ", plugin built for " + std::to_string(DLFUSE_ABI_MAJOR));
    auto st = std::make_unique<State>();
    st->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
    const char* trace = std::getenv("DLFUSE_ONEDNN_TRACE");
    st->trace = trace && *trace && std::strcmp(trace, "0") != 0;
    *state = st.release();
    return DLFUSE_STATUS_OK;
  });
}

void close_plugin(void* state) noexcept {
  State* st = static_cast<State*>(state);
  if (!st) return;
  if (st->trace)
    std::fprintf(stderr, "dlfuse_onednn: primitive cache: %lld built, %lld hits\n", st->built.load(), st->hits.load());
  delete st;
}

dlfuse_status_t get_kernels(void*, const dlfuse_kernel_t** kernels, int32_t* num, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] { return kernel_table().get(kernels, num, "onednn", err, err_size); });
}

dlfuse_status_t device_count(void*, int32_t* count, char* err, size_t err_size) noexcept {
  if (!count)
    return kit::write_error("onednn", err, err_size, DLFUSE_STATUS_INVALID_ARGUMENT,
                            "count: expected a pointer, got NULL");
  *count = 1;
  return DLFUSE_STATUS_OK;
}

dlfuse_status_t alloc(void*, int32_t device_id, size_t nbytes, void** ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    if (!ptr) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "ptr: expected a pointer, got NULL");
    check_device(device_id);
    if (nbytes > std::numeric_limits<size_t>::max() - kAlign)
      throw Error(DLFUSE_STATUS_OUT_OF_MEMORY, "nbytes " + std::to_string(nbytes) + " overflows");
    const size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (!p) throw Error(DLFUSE_STATUS_OUT_OF_MEMORY, "cannot allocate " + std::to_string(nbytes) + " bytes");
    *ptr = p;
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t release(void*, int32_t device_id, void* ptr, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    check_device(device_id);
    std::free(ptr);
    return DLFUSE_STATUS_OK;
  });
}

dlfuse_status_t copy(void*, int32_t device_id, dlfuse_copy_kind_t kind, void* dst, size_t dst_offset, const void* src,
                     size_t src_offset, size_t nbytes, void*, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&]() -> dlfuse_status_t {
    check_device(device_id);
    if (kind != DLFUSE_COPY_HOST_TO_DEVICE && kind != DLFUSE_COPY_DEVICE_TO_HOST &&
        kind != DLFUSE_COPY_DEVICE_TO_DEVICE)
      throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "kind: expected 1, 2 or 3, got " + std::to_string(int(kind)));
    if (nbytes == 0) return DLFUSE_STATUS_OK;
    if (!dst || !src) throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, "copy: NULL src or dst");
    std::memmove(static_cast<char*>(dst) + dst_offset, static_cast<const char*>(src) + src_offset, nbytes);
    return DLFUSE_STATUS_OK;
  });
}

// Kernels finish before they return (oneDNN's CPU stream is waited on): nothing to wait for.
dlfuse_status_t synchronize(void*, int32_t device_id, void*, char* err, size_t err_size) noexcept {
  return guarded(err, err_size, [&] { return check_device(device_id); });
}

const dlfuse_plugin_t kPlugin = {sizeof(dlfuse_plugin_t),
                                 DLFUSE_ABI_MAJOR,
                                 DLFUSE_ABI_MINOR,
                                 "onednn",
                                 DLFUSE_ONEDNN_VERSION,
                                 kDLCPU,
                                 open_plugin,
                                 close_plugin,
                                 get_kernels,
                                 device_count,
                                 alloc,
                                 release,
                                 copy,
                                 synchronize};

}  // namespace

void check_call(const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, bool first_output_required,
                uint32_t optional_inputs) {
  kit::check_call(args, num_inputs, num_outputs, first_output_required, kDLCPU, optional_inputs);
  for (int i = 0; i < num_inputs + num_outputs; ++i) {
    const DLTensor* t = i < num_inputs ? args->inputs[i] : args->outputs[i - num_inputs];
    if (t && t->device.device_id != 0)
      kit::invalid("tensor " + std::to_string(i), "device cpu:0", "cpu:" + std::to_string(t->device.device_id));
  }
}

void check_act_from_out(int act, const char* instead) {
  if (act == DLFUSE_ACT_IDENTITY || act == DLFUSE_ACT_RELU || act == DLFUSE_ACT_SIGMOID || act == DLFUSE_ACT_TANH)
    return;
  kit::invalid(
      "ACTIVATION with out",
      "IDENTITY, RELU, SIGMOID or TANH (its derivative is not a function of out: " + std::string(instead) + ")",
      std::to_string(act));
}

}  // namespace dlfuse_onednn

extern "C" DLFUSE_EXPORT const dlfuse_plugin_t* dlfuse_plugin_v1(void) { return &dlfuse_onednn::kPlugin; }

// What every kernel entry does before its work (find the device, the precision, check each
// WGPUBuffer), and the building blocks the ops share: the GEMM, reductions, pointwise grids.
#ifndef DLFUSE_WEBGPU_OPS_H_
#define DLFUSE_WEBGPU_OPS_H_

#include "layout.h"
#include "kernel_table.h"
#include "matmul_plan.h"
#include "runtime.h"

namespace dlfuse_webgpu {

using namespace dlfuse_plugin;  // strided views, the shared host plans (plugins/common)

struct Call {
  Device* dev = nullptr;
  Prec prec = Prec::kF32;
  int64_t esize = 4;
};

// A call's checks (plugins/common/src/call_checks.hpp) with what only the plugin knows: `names`
// gives each input then each output a name for messages. Checks that all tensors are on one
// WebGPU device of this plugin, each WGPUBuffer is one this plugin allocated
// there and holds the view, that element indices fit the kernels' int32 arithmetic, and
// that the stream is NULL or the device's WGPUQueue (WebGPU has one queue per device).
// Input i may be NULL where bit i of `optional_inputs` is set (never input 0); outputs may
// always be NULL (the caller checks the ones it needs).
Call prepare_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, const char* const* names,
                  uint32_t optional_inputs = 0);

// The GEMM's operands and epilogue (plugins/common/src/matmul_plan.h; kernels/gemm.wgsl).
using MatRef = dlfuse_plugin::MatRef<WGPUBuffer>;
using Epilogue = dlfuse_plugin::Epilogue<WGPUBuffer>;

// C = epilogue(sum over r < R of A_r @ B_r) for nbatch batches of [M, K] @ [K, N].
void gemm(Launch& l, const Call& c, const MatRef& A, const MatRef& B, const MatRef& C, const Epilogue& ep, int64_t M,
          int64_t N, int64_t K, int64_t nbatch, int64_t R, const std::vector<int64_t>& table);

// dst = scale * reduce_to(src) where src has `shape` (strides src_strides) and dst is a
// tensor that broadcasts to `shape`. `src_is_float`: src is a float scratch buffer.
void reduce_into(Launch& l, const Call& c, const Dims& shape, WGPUBuffer src, int64_t src_off, const Dims& src_strides,
                 bool src_is_float, const DLTensor* dst, float scale);

// The pointwise pipeline `entry` of kernels/pointwise.wgsl.
const Pipeline& pointwise(const Call& c, const char* entry);
// Dispatches a pointwise kernel over the grid [n0, n1, n2] (kernels/pointwise.wgsl, grid()):
// prm's first three words are set here, the rest is the kernel's.
void pointwise_dispatch(Launch& l, const Pipeline& p, const std::vector<WGPUBuffer>& bufs, std::vector<int32_t> prm,
                        int64_t n0, int64_t n1, int64_t n2);

// Appends a view's four parameter words (offset, strides of dims 0, 1, 2).
void push_view(std::vector<int32_t>& p, const ClView& v);
int32_t float_bits(float f);

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;

// Every entry point: the add_mul ones above, the matmul ones of
// plugins/common/src/matmul_entries.hpp over this plugin's matmul backend (matmul.cpp).
dlfuse_plugin::FusedOps fused_ops();

inline WGPUBuffer buf_of(const DLTensor* t) { return static_cast<WGPUBuffer>(t->data); }

}  // namespace dlfuse_webgpu

#endif

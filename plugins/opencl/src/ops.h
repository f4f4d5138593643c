// What every kernel entry does before its work: find the device and the queue, the
// precision, and check what only the plugin can know about each cl_mem.
#ifndef DLFUSE_OPENCL_OPS_H_
#define DLFUSE_OPENCL_OPS_H_

#include "layout.h"
#include "kernel_table.h"
#include "matmul_plan.h"
#include "runtime.h"

namespace dlfuse_opencl {

using namespace dlfuse_plugin;  // strided views, the shared host plans (plugins/common)

struct Call {
  Device* dev = nullptr;
  cl_command_queue queue = nullptr;
  Prec prec = Prec::kF32;
  int64_t esize = 4;
};

// A call's checks (plugins/common/src/call_checks.hpp) with what only OpenCL knows: `names`
// gives each input then each output a name for messages. Checks that all tensors are on one
// OpenCL device of this plugin, their cl_mem belongs to its context and holds the view
// (byte_offset + extent within CL_MEM_SIZE), and the stream is a queue of it.
// Input i may be NULL where bit i of `optional_inputs` is set (never input 0); outputs
// may always be NULL (the caller checks the ones it needs).
Call prepare_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, const char* const* names,
                  uint32_t optional_inputs = 0);

// The GEMM's operands and epilogue (plugins/common/src/matmul_plan.h; kernels/gemm.cl).
using MatRef = dlfuse_plugin::MatRef<cl_mem>;
using Epilogue = dlfuse_plugin::Epilogue<cl_mem>;

// C = epilogue(sum over r < R of A_r @ B_r) for nbatch batches of [M, K] @ [K, N]; the
// table (empty when nbatch = R = 1) gives each batch's offsets.
void gemm(Call& c, MatRef A, MatRef B, const MatRef& C, const Epilogue& ep, int64_t M, int64_t N, int64_t K,
          int64_t nbatch, int64_t R, const std::vector<int64_t>& table);

// dst = scale * reduce_to(src) where src has `shape` (strides src_strides) and dst is a
// tensor that broadcasts to `shape`. `src_is_float`: src is a float scratch buffer.
void reduce_into(Call& c, const Dims& shape, cl_mem src, int64_t src_off, const Dims& src_strides, bool src_is_float,
                 const DLTensor* dst, float scale);

dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;

// Every entry point: the add_mul ones above, the matmul ones of
// plugins/common/src/matmul_entries.hpp over this plugin's matmul backend (matmul.cpp).
dlfuse_plugin::FusedOps fused_ops();

inline cl_mem mem_of(const DLTensor* t) { return static_cast<cl_mem>(t->data); }

}  // namespace dlfuse_opencl

#endif

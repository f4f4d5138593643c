// What every kernel entry does before its work: find the device and the queue, the
// precision, and check what only the plugin can know about each cl_mem.
#ifndef DLFUSE_OPENCL_OPS_H_
#define DLFUSE_OPENCL_OPS_H_

#include "layout.h"
#include "runtime.h"

namespace dlfuse_opencl {

struct Call {
  Device* dev = nullptr;
  cl_command_queue queue = nullptr;
  Prec prec = Prec::kF32;
  int64_t esize = 4;
};

// `names` gives each input then each output a name for messages. Checks that all tensors
// are on one OpenCL device of this plugin, their cl_mem belongs to its context and holds
// the view (byte_offset + extent within CL_MEM_SIZE), and the stream is a queue of it.
Call prepare_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs,
                  const char* const* names);

void gemm(Call& c, cl_mem A, int64_t offA, int64_t sam, int64_t sak, cl_mem B, int64_t offB, int64_t sbk,
          int64_t sbn, cl_mem C, int64_t offC, int64_t scm, int64_t scn, cl_mem bias, int64_t offBias, int64_t sbm,
          int64_t sbn2, int flags, int64_t M, int64_t N, int64_t K, int64_t nbatch, int64_t R,
          const std::vector<int64_t>& table);

// dst = scale * reduce_to(src) where src has `shape` (strides src_strides) and dst is a
// tensor that broadcasts to `shape`. `src_is_float`: src is a float scratch buffer.
void reduce_into(Call& c, const Dims& shape, cl_mem src, int64_t src_off, const Dims& src_strides, bool src_is_float,
                 const DLTensor* dst, float scale);

dlfuse_status_t matmul_add_relu(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t matmul_add_relu_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t add_mul_activation(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;
dlfuse_status_t add_mul_activation_backward(void* state, void*, const dlfuse_kernel_args_t* args) noexcept;

inline cl_mem mem_of(const DLTensor* t) { return static_cast<cl_mem>(t->data); }

}  // namespace dlfuse_opencl

#endif

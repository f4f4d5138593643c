#include <climits>
#include <vector>

#include "call_checks.hpp"
#include "ops.h"

namespace dlfuse_opencl {

namespace {

// What only OpenCL knows of a call's tensors (call_checks.hpp): each cl_mem is an object of
// the device's context and holds the view; sub-buffers (CL_MEM_ASSOCIATED_MEMOBJECT) of one
// cl_mem are different handles to the registry, so overlaps through them are caught here.
struct CallChecks {
  static constexpr int32_t kDeviceType = kDLOpenCL;
  static constexpr const char* kDeviceTypeName = "kDLOpenCL";
  static constexpr const char* kBufferName = "cl_mem";
  static constexpr const char* kFp16Missing = "does not report cl_khr_fp16";
  using Call = dlfuse_opencl::Call;

  // Byte ranges in the root buffer, for the overlap check of finish().
  struct Range {
    int i = 0;
    cl_mem root = nullptr, mem = nullptr;
    uint64_t lo = 0, hi = 0;
    bool sub = false;
  };
  std::vector<Range> ranges;

  void check_tensor(Call& c, const DLTensor* t, const std::string& arg, int i) {
    const auto bad = [](const std::string& m) { throw Error(DLFUSE_STATUS_INVALID_ARGUMENT, m); };
    for (int d = 0; d < t->ndim; ++d)
      if (t->shape[d] > INT_MAX / 2)
        throw Error(DLFUSE_STATUS_UNSUPPORTED, arg + ": shape[" + std::to_string(d) + "]: expected below 2^30 " +
                                                   "(this plugin's limit), got " + std::to_string(t->shape[d]));
    const int64_t ext = extent(t);
    if (ext == 0) return;
    if (!c.dev->is_mem(t->data))
      bad(arg + ": data: expected a cl_mem of " + c.dev->label() + ", got a pointer that is no OpenCL object");
    cl_context ctx = nullptr;
    const cl_int rc = clGetMemObjectInfo(mem_of(t), CL_MEM_CONTEXT, sizeof ctx, &ctx, nullptr);
    if (rc != CL_SUCCESS)
      bad(arg + ": data: expected a cl_mem, got an object that is none (" + cl_error_name(rc) + ")");
    if (ctx != c.dev->ctx)
      bad(arg + ": data: expected a cl_mem of " + c.dev->label() +
          "'s context (dlfuse_device_alloc), got one of another context");
    size_t size = 0;
    check_cl(clGetMemObjectInfo(mem_of(t), CL_MEM_SIZE, sizeof size, &size, nullptr),
             "clGetMemObjectInfo(CL_MEM_SIZE)");
    const uint64_t need = t->byte_offset + uint64_t(ext) * uint64_t(c.esize);
    if (need > size)
      bad(arg + ": the view ends at byte " + std::to_string(need) + " (byte_offset " + std::to_string(t->byte_offset) +
          "); expected at most the cl_mem's size " + std::to_string(size));
    cl_mem parent = nullptr;
    size_t origin = 0;
    check_cl(clGetMemObjectInfo(mem_of(t), CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, nullptr),
             "clGetMemObjectInfo(CL_MEM_ASSOCIATED_MEMOBJECT)");
    if (parent)
      check_cl(clGetMemObjectInfo(mem_of(t), CL_MEM_OFFSET, sizeof origin, &origin, nullptr),
               "clGetMemObjectInfo(CL_MEM_OFFSET)");
    ranges.push_back(
        {i, parent ? parent : mem_of(t), mem_of(t), origin + t->byte_offset, origin + need, parent != nullptr});
  }

  void finish(Call& c, const dlfuse_kernel_args_t* args, const char* const* names) {
    // The registry compares views within one cl_mem handle; two sub-buffers (or a buffer
    // and its sub-buffer) are different handles over the same memory, which only OpenCL knows.
    for (const Range& a : ranges) {
      if (a.i < args->num_inputs) continue;  // an output against every other tensor
      for (const Range& b : ranges) {
        if (b.i == a.i || b.mem == a.mem || b.root != a.root || !(a.sub || b.sub)) continue;
        if (a.lo < b.hi && b.lo < a.hi)
          throw Error(DLFUSE_STATUS_INVALID_ARGUMENT,
                      std::string(names[a.i]) + ": expected memory disjoint from " + names[b.i] +
                          "'s, got an overlap through sub-buffers of one cl_mem (bytes " + std::to_string(a.lo) + ".." +
                          std::to_string(a.hi) + " and " + std::to_string(b.lo) + ".." + std::to_string(b.hi) +
                          " of the parent)");
      }
    }
    c.queue = queue_of(*c.dev, args->stream);
  }
};

}  // namespace

Call prepare_call(State* s, const dlfuse_kernel_args_t* args, int num_inputs, int num_outputs, const char* const* names,
                  uint32_t optional_inputs) {
  return dlfuse_plugin::prepare_device_call<CallChecks>(s, args, num_inputs, num_outputs, names, optional_inputs);
}

void gemm(Call& c, MatRef A, MatRef B, const MatRef& C, const Epilogue& ep, int64_t M, int64_t N, int64_t K,
          int64_t nbatch, int64_t R, const std::vector<int64_t>& table) {
  if (M == 0 || N == 0 || nbatch == 0) return;
  int flags = (ep.bias.buf ? 1 : 0) | (ep.residual.buf ? 2 : 0);
  const int64_t offA = A.off, sam = A.rs, sak = A.cs, offB = B.off, sbk = B.rs, sbn = B.cs;
  if (R > INT_MAX / (K / 16 + 1))  // the kernels count k-steps of all R products in an int
    throw Error(DLFUSE_STATUS_UNSUPPORTED, "a gradient summing " + std::to_string(R) + " batch products of K = " +
                                               std::to_string(K) + " exceeds this plugin's 2^31 k-steps");
  // Promise 16-byte aligned rows to the kernel where every row start is a multiple of 4
  // floats (batch offsets from the table included).
  if (c.prec == Prec::kF32) {
    bool a_al = sak == 1 && offA % 4 == 0 && sam % 4 == 0, b_al = sbn == 1 && offB % 4 == 0 && sbk % 4 == 0;
    const size_t row = kTableHeader + size_t(2 * R);
    for (size_t i = 0; i + row <= table.size(); i += row)
      for (size_t j = kTableHeader; j < row; j += 2) {
        a_al = a_al && table[i + j] % 4 == 0;
        b_al = b_al && table[i + j + 1] % 4 == 0;
      }
    flags |= (a_al ? 4 : 0) | (b_al ? 8 : 0);
  }
  MemRef tab;
  if (!table.empty()) tab.m = scratch(*c.dev, table.size() * sizeof(int64_t), table.data());
  // CPU kernel, one product: pack B into k-contiguous 16-column panels first (one read of
  // B; the GEMM then streams 64-byte lines instead of rows N apart, which alias in L1).
  MemRef packed;
  if (c.dev->cpu_kernels && table.empty() && R == 1 && K > 0 && M >= 24) {
    const int64_t np = (N + 15) / 16 * 16;
    packed.m = scratch(*c.dev, size_t(np * K * c.esize));
    KernelRef pk(c.dev->kernel(c.prec, "pack_b"));
    set_args(pk.k, B.buf, cl_long(offB), cl_long(sbk), cl_long(sbn), packed.m, cl_int(N), cl_int(K));
    const size_t pg[3] = {size_t(np), 1, 1}, pl[3] = {16, 1, 1};
    enqueue(c.queue, pk.k, pg, pl, "pack_b");
    B.buf = packed.m;
    flags |= 16;
  }
  // The 64-tile kernel when 128-tiles would not give every compute unit a work-group.
  int tile = 128;
  if (!c.dev->cpu_kernels) {
    const int64_t tiles128 = ((M + 127) / 128) * ((N + 127) / 128) * nbatch;
    tile = c.dev->tile_force ? c.dev->tile_force : tiles128 < c.dev->compute_units ? 64 : 128;
  }
  const char* kname = c.dev->cpu_kernels || tile == 128 ? "gemm" : "gemm64";
  KernelRef k(c.dev->kernel(c.prec, kname));
  const MatRef &bias = ep.bias, &res = ep.residual, &pre = ep.pre;
  set_args(k.k, A.buf, cl_long(offA), cl_long(sam), cl_long(sak), B.buf, cl_long(offB), cl_long(sbk), cl_long(sbn),
           C.buf, cl_long(C.off), cl_long(C.rs), cl_long(C.cs), bias.buf, cl_long(bias.off), cl_long(bias.rs),
           cl_long(bias.cs), res.buf, cl_long(res.off), cl_long(res.rs), cl_long(res.cs), pre.buf, cl_long(pre.off),
           cl_long(pre.rs), cl_long(pre.cs), cl_int(flags), cl_int(ep.act), cl_int(M), cl_int(N), cl_int(K), cl_int(R),
           tab.m);
  size_t global[3], local[3];
  if (c.dev->cpu_kernels) {
    global[0] = size_t((N + 15) / 16);
    global[1] = size_t((M + 5) / 6);
    local[0] = 4;
    local[1] = 4;
  } else {
    global[0] = size_t((N + tile - 1) / tile) * 16;
    global[1] = size_t((M + tile - 1) / tile) * 16;
    local[0] = 16;
    local[1] = 16;
  }
  global[2] = size_t(nbatch);
  local[2] = 1;
  enqueue(c.queue, k.k, global, local, kname);
}

void reduce_into(Call& c, const Dims& shape, cl_mem src, int64_t src_off, const Dims& src_strides, bool src_is_float,
                 const DLTensor* dst, float scale) {
  const int rank = int(shape.size());
  std::string err;
  KernelRef k(c.dev->kernel(c.prec, src_is_float ? "reduce_f" : "reduce_t"));
  const bool ok = for_each_reduction(
      shape, src_strides, src_off, aligned_shape(dst, rank), aligned_strides(dst, rank), elem_offset(dst), &err,
      [&](const ClView& vs, const ClReduced& red, const ClView& vd, int64_t n0, int64_t n1, int64_t n2) {
        set_args(k.k, src, vs, red, mem_of(dst), vd, cl_long(n0), cl_long(n1), cl_long(n2), cl_float(scale));
        size_t global[3] = {size_t(n2), size_t(n1), size_t(n0)}, local[3];
        pointwise_local(*c.dev, n2, n1, local);
        enqueue(c.queue, k.k, global, local, src_is_float ? "reduce_f" : "reduce_t");
        return true;
      });
  if (!ok) throw Error(DLFUSE_STATUS_UNSUPPORTED, err);
}

}  // namespace dlfuse_opencl

// The input-gradient GEMM of an mlp layer with the layer below's ReLU gradient in its
// epilogue (CUTLASS 3.x, sm_90a): dZ = (dY @ W^T) * (h > 0), h the layer below's output,
// and per tile the column sums of dZ, which finish_colsum adds up into the bias gradient.
// Row-major [M, K] dZ is CUTLASS's column-major K x M D, so those are per-row sums of D.
#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"

#include "dgrad_relu.h"

namespace dlfuse_cuda {
namespace {

using namespace cute;

// dReLU from the activation's output: g where h > 0 or h is NaN, else 0 (device_math.cuh's
// rule, so both paths agree bit for bit).
template <class T>
struct DReluFromOut {
  CUTLASS_HOST_DEVICE T operator()(T g, T h) const { return (h > T(0) || h != h) ? g : T(0); }
};
template <class T, int N>
struct DReluFromOut<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& g,
                                                      cutlass::Array<T, N> const& h) const {
    cutlass::Array<T, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = (h[i] > T(0) || h[i] != h[i]) ? g[i] : T(0);
    return r;
  }
};

// The epilogue as a fusion operation: CUTLASS's LinCombDeEltAct (alpha = 1, beta = 0, C
// absent) plus the per-row sums of D left per tile, in float, for a kernel of ours to finish.
// CUTLASS's own LinCombDeEltActDePerRowBias finishes them in the GEMM (the last tile of a
// row block sums the others'): on the H200 that took the GEMM from 64 to 135 us (bfloat16,
// 32768 x 1024 x 512), the per-tile sums alone to 70.
template <class T>
struct DReluRowPartials
    : cutlass::epilogue::fusion::LinCombDeEltAct<cutlass::layout::ColumnMajor, DReluFromOut, T, float, T, T, float> {};

}  // namespace
}  // namespace dlfuse_cuda

namespace cutlass::epilogue::fusion {

// Its visitor tree: D = convert(row_partials(drelu(acc, aux))). Sm90ColReduction with
// FinalReduction off writes a compact float [ceil(N / tile N), M rounded up to tile M] of
// per-tile sums (M-major); null partials switch the reduction off.
template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, class T,
          class CtaTileShapeMNK, class EpilogueTile, class SmemLayoutAtom, class CopyOpS2R>
struct FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>,
                       dlfuse_cuda::DReluRowPartials<T>, CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpS2R>
    : Sm90EVT<
          Sm90Compute<epilogue::thread::Identity, T, float, FloatRoundStyle::round_to_nearest>,
          Sm90EVT<Sm90ColReduction<plus, plus, plus, 0, CtaTileShapeMNK, float, float,
                                   FloatRoundStyle::round_to_nearest, Stride<_1, _0, int64_t>, 4, true, false>,
                  Sm90LinCombDeEltAct<CtaTileShapeMNK, EpilogueTile, StagesC, gemm::TagToStrideC_t<layout::ColumnMajor>,
                                      SmemLayoutAtom, CopyOpS2R, dlfuse_cuda::DReluFromOut, float, float, T, T, float,
                                      8, FloatRoundStyle::round_to_nearest>>> {
  using Impl = Sm90EVT<
      Sm90Compute<epilogue::thread::Identity, T, float, FloatRoundStyle::round_to_nearest>,
      Sm90EVT<Sm90ColReduction<plus, plus, plus, 0, CtaTileShapeMNK, float, float, FloatRoundStyle::round_to_nearest,
                               Stride<_1, _0, int64_t>, 4, true, false>,
              Sm90LinCombDeEltAct<CtaTileShapeMNK, EpilogueTile, StagesC, gemm::TagToStrideC_t<layout::ColumnMajor>,
                                  SmemLayoutAtom, CopyOpS2R, dlfuse_cuda::DReluFromOut, float, float, T, T, float, 8,
                                  FloatRoundStyle::round_to_nearest>>>;
  using Operation = dlfuse_cuda::DReluRowPartials<T>;

  struct Arguments {
    T const* aux_ptr = nullptr;
    gemm::TagToStrideC_t<layout::ColumnMajor> dAux = {};
    float* partials = nullptr;
    // The tree's arguments, leaves first: alpha * acc + beta * C, aux, the activation, the
    // reduction, the conversion.
    operator typename Impl::Arguments() const {
      return {{{{{{0.f}, {nullptr}, {}}, {}, {{{1.f}, {nullptr}, {}}, {}, {}}, {}}, {aux_ptr, T(0), dAux}, {}},
               {partials, 0.f, {}}},
              {}};
    }
  };

  using Impl::Impl;
};

}  // namespace cutlass::epilogue::fusion

namespace dlfuse_cuda {
namespace {

// Ping-pong 64 x 256 tiles: one warp group's epilogue (which loads h) runs beside the
// other's main loop, as the layers' short K (128-1024) wants. On the H200 it took 139 us for
// the DLRM MLP's four fused GEMMs, cooperative 128 x 128 and 128 x 256 tiles 147 and 150.
using TileShape = Shape<_64, _256, _64>;

// W^T's layout: row-major W [K, N] is K-major (CUTLASS RowMajor A over M = K features),
// W = weight.t() (nn.Linear's [N, K] storage) is M-major (ColumnMajor A).
template <class T, class LayoutW>
struct Kernel {
  using Layout = cutlass::layout::ColumnMajor;  // D and h: K x M, K contiguous
  using ClusterShape = Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, Layout, 8, T, Layout, 8,
      cutlass::epilogue::TmaWarpSpecialized, DReluRowPartials<T>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, LayoutW, 8, T, cutlass::layout::ColumnMajor, 8, float,
      TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const DgradRelu& p) {
    typename Gemm::Arguments a;
    a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    a.problem_shape = {int(p.K), int(p.M), int(p.N), 1};
    using SA = typename GemmKernel::StrideA;
    SA sa{};
    if constexpr (std::is_same_v<LayoutW, cutlass::layout::RowMajor>)
      sa = SA{p.ldw, _1{}, 0};
    else
      sa = SA{_1{}, p.ldw, 0};
    a.mainloop = {static_cast<const T*>(p.w), sa, static_cast<const T*>(p.dy),
                  typename GemmKernel::StrideB{p.lddy, _1{}, 0}};
    using SD = typename GemmKernel::StrideD;
    auto& f = a.epilogue.thread;
    f.aux_ptr = static_cast<const T*>(p.h);
    f.dAux = SD{_1{}, p.ldh, 0};
    f.partials = p.partials;
    a.epilogue.ptr_C = nullptr;
    a.epilogue.dC = SD{_1{}, p.lddz, 0};
    a.epilogue.ptr_D = static_cast<T*>(p.dz);
    a.epilogue.dD = SD{_1{}, p.lddz, 0};
    a.hw_info.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count();
    return a;
  }
};

template <class K>
cudaError_t run_with(const DgradRelu& p, const std::function<void*(size_t)>& workspace, cudaStream_t s) {
  typename K::Gemm gemm;
  const auto args = K::arguments(p);
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  const size_t bytes = K::Gemm::get_workspace_size(args);
  void* ws = bytes ? workspace(bytes) : nullptr;
  if (gemm.initialize(args, ws, s) != cutlass::Status::kSuccess) return cudaErrorUnknown;
  if (gemm.run(s) != cutlass::Status::kSuccess) return cudaErrorLaunchFailure;
  return cudaGetLastError();
}

using Bf16Row = Kernel<cutlass::bfloat16_t, cutlass::layout::RowMajor>;
using Bf16Col = Kernel<cutlass::bfloat16_t, cutlass::layout::ColumnMajor>;

}  // namespace

int64_t dgrad_relu_partial_rows(int64_t M) {
  constexpr int64_t tile = size<1>(TileShape{});
  return (M + tile - 1) / tile;
}

int64_t dgrad_relu_partial_cols(int64_t K) {
  constexpr int64_t tile = size<0>(TileShape{});
  return (K + tile - 1) / tile * tile;
}

cudaError_t dgrad_relu(const DgradRelu& p, const std::function<void*(size_t)>& workspace, cudaStream_t s) {
  return p.w_col_major ? run_with<Bf16Col>(p, workspace, s) : run_with<Bf16Row>(p, workspace, s);
}

}  // namespace dlfuse_cuda

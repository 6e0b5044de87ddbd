// scanops CUDA back end, host side: the entry the engine calls for CUDA tensors, registered
// at library load time. It dispatches the problem's (combine kind, dtypes) onto
// CudaRunner<Combine, in_t, out_t>, which sets the device, gathers the stream, the SM count
// and a scratch allocator, and calls launch_scan (compiled in scan_<kind>.cu).
#include "ops/cuda/scan_cuda.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <type_traits>
#include <vector>

#include "ops/cuda/jagged_offsets.h"
#include "ops/cuda/lse_grad.h"
#include "ops/cuda/segmented.h"
#include "ops/dispatch.h"

namespace scanops {
namespace cuda {
namespace {

// Scratch from the caching allocator, held until the scan is enqueued (the allocator is
// stream-ordered, so the kernels may still use it after it is released).
class TensorScratch final : public Scratch {
 public:
  explicit TensorScratch(const at::Tensor& like) : options_(like.options().dtype(at::kByte)) {}
  void* allocate(int64_t bytes) override {
    held_.push_back(at::empty({bytes}, options_));
    return held_.back().mutable_data_ptr();
  }

 private:
  at::TensorOptions options_;
  std::vector<at::Tensor> held_;
};

// Whether scan_cuda.h's instantiation lists hold (Combine, in_t, out_t): checked at compile
// time, so that dispatch.h and the lists cannot drift apart.
template <class Combine, class in_t, class out_t>
constexpr bool is_instantiated() {
  using A = acc_t<in_t>;
  using W = acc_t<in_t, /*kWide=*/true>;
  using V = extremum_t<in_t>;
#define SCANOPS_MATCH(I, O, ACC) \
  (std::is_same_v<in_t, I> && std::is_same_v<out_t, O> && std::is_same_v<ACC, decltype(Combine::value(Combine::identity()))>) ||
  if constexpr (std::is_same_v<Combine, AffineCombine<A>>) {
    return SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(SCANOPS_MATCH) false;
  } else if constexpr (std::is_same_v<Combine, AffineCombine<W>>) {
    return SCANOPS_CUDA_AFFINE_WIDE_TYPES(SCANOPS_MATCH) false;
  } else if constexpr (std::is_same_v<Combine, LogAddExpCombine<A>>) {
    return SCANOPS_CUDA_FLOAT_COMPLEX_TYPES(SCANOPS_MATCH) false;
  } else if constexpr (std::is_same_v<Combine, MaxCombine<V>> ||
                       std::is_same_v<Combine, MinCombine<V>>) {
    return SCANOPS_CUDA_EXTREMUM_TYPES(SCANOPS_MATCH) false;
  } else if constexpr (std::is_same_v<Combine, ProdCombine<W>>) {
    return SCANOPS_CUDA_PROD_TYPES(SCANOPS_MATCH) false;
  } else if constexpr (std::is_same_v<Combine, SumCombine<A>>) {
    return SCANOPS_CUDA_SCAN_TYPES(SCANOPS_MATCH) false;
  } else {
    return false;
  }
#undef SCANOPS_MATCH
}

CompanionLayout layout(const BroadcastStrides& s) { return {s.in_place, s.so, s.sl, s.si}; }

// The launch context of a call on tensor t's device, under the caller's CUDAGuard: ATen's
// current stream, the SM count and compute capability from ATen's cached device properties
// (no driver query per call), and the caller's scratch (alive until its launches are
// enqueued).
LaunchContext launch_context(const at::Tensor& t, TensorScratch& scratch) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(t.device().index());
  return LaunchContext{c10::cuda::getCurrentCUDAStream().stream(), prop->multiProcessorCount,
                       &scratch, prop->major};
}

template <class Combine, class in_t, class out_t>
struct CudaRunner {
  static_assert(is_instantiated<Combine, in_t, out_t>(),
                "add this type pair to the instantiation lists of scan_cuda.h");

  static void run(const ScanProblem& p) {
    const c10::cuda::CUDAGuard guard(p.in.input.device());
    TensorScratch scratch(p.in.input);
    const ProblemData<in_t, out_t> data(p);
    const LaunchContext ctx = launch_context(p.in.input, scratch);
    if (p.segments.defined()) {
      const SegmentedDeviceProblem s{data.input,
                                     data.coeff,
                                     segment_strides(p.in.coeff, p.shape),
                                     data.mask,
                                     segment_strides(p.in.mask, p.shape),
                                     p.segments.reset.t.const_data_ptr<bool>(),
                                     segment_strides(p.segments.reset, p.shape),
                                     data.values,
                                     data.indices,
                                     data.initial,
                                     p.shape.outer,
                                     p.shape.length,
                                     p.shape.inner,
                                     p.spec.flags,
                                     ctx};
      launch_segmented<Combine, in_t, out_t>(s);
      return;
    }
    const DeviceProblem d{data.input,
                          data.coeff,
                          data.mask,
                          data.values,
                          data.indices,
                          p.shape.outer,
                          p.shape.length,
                          p.shape.inner,
                          p.spec.flags,
                          ctx,
                          data.add,
                          data.mul,
                          data.mul_mask,
                          p.in.scale_input,
                          layout(p.in.mask.strides),
                          layout(p.in.coeff.strides),
                          p.epilogue.shift_mul,
                          data.second,
                          data.initial};
    launch_scan<Combine, in_t, out_t>(d);
  }
};

}  // namespace
}  // namespace cuda

void scan_cuda(const ScanProblem& p) { dispatch_scan<cuda::CudaRunner>(p); }

namespace {
// JaggedOffsetsFn: the check and the outputs in one kernel (jagged_offsets.cu) and one read
// of its fault word back to the host, the only synchronisation of the jagged form (the scan
// must not start from offsets that would index out of its tensors).
bool jagged_offsets_cuda(const at::Tensor& offsets, int64_t total, at::Tensor* heads,
                         at::Tensor* as_long) {
  const c10::cuda::CUDAGuard guard(offsets.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const at::Tensor bad = at::zeros({1}, offsets.options().dtype(at::kInt));
  if (heads != nullptr && total > 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(heads->mutable_data_ptr(), 0, static_cast<size_t>(total), stream));
  }
  const cuda::JaggedOffsetsArgs a{
      offsets.const_data_ptr(),
      offsets.scalar_type() == at::kInt,
      offsets.numel(),
      total,
      heads != nullptr ? heads->mutable_data_ptr<bool>() : nullptr,
      as_long != nullptr ? as_long->mutable_data_ptr<int64_t>() : nullptr,
      reinterpret_cast<unsigned*>(bad.mutable_data_ptr<int>()),
      stream,
      at::cuda::getDeviceProperties(offsets.device().index())->multiProcessorCount};
  cuda::launch_jagged_offsets(a);
  return bad.item<int>() == 0;
}
}  // namespace

namespace {
// LseGradFn: float32, any dim (the row kernels where the elements after dim are all one, else
// the column kernels), in one scan (lse_grad.cu); x, y and g made contiguous first (g, the
// incoming gradient, is often an expanded view: a copy costs 8 bytes an element, the
// composite formula 44). float64: the composite formula.
bool lse_grad_cuda(const at::Tensor& x, const at::Tensor& y, const at::Tensor& g, int64_t dim,
                   bool exclusive, bool reverse, at::Tensor& dx) {
  if (x.scalar_type() != at::kFloat) return false;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  const at::Tensor xc = x.contiguous(), yc = y.contiguous(), gc = g.contiguous();
  const c10::cuda::CUDAGuard guard(x.device());
  cuda::TensorScratch scratch(x);
  const cuda::LaunchContext ctx = cuda::launch_context(x, scratch);
  dx = at::empty_like(x, at::MemoryFormat::Contiguous);
  cuda::launch_lse_grad(ctx, cuda::LseGradArgs{xc.const_data_ptr<float>(),
                                               yc.const_data_ptr<float>(),
                                               gc.const_data_ptr<float>(),
                                               dx.mutable_data_ptr<float>(), outer, x.size(dim),
                                               inner, exclusive, reverse});
  return true;
}

// The CUDA kernels read broadcast companions in place (CompanionIndex), fuse the input scaling
// and the epilogue into their loads and stores, read mul one position on in the row
// kernels of linear recurrences whose coefficients and mul are dense (MulNextSink), and start
// every line from its initial state (LineState; OutputSink::line_start in every kernel
// family, CUB's device-side init value on the CUB line path).
bool cuda_shift_mul(const ScanProblem& p) {
  return p.shape.inner == 1 && p.spec.kind == CombineKind::Affine &&
         p.epilogue.mul.scalar_type() != at::kBool && !p.in.coeff.strides.in_place;
}
[[maybe_unused]] const bool registered =
    (register_cuda_backend(Backend{&scan_cuda, BackendCaps{/*broadcast_in_place=*/true,
                                                           /*fused_epilogue=*/true,
                                                           /*line_state=*/true,
                                                           /*segments=*/true, &cuda_shift_mul},
                                       &jagged_offsets_cuda, &lse_grad_cuda}),
     true);
}  // namespace

}  // namespace scanops

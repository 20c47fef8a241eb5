// The CUDA probe's host-side interface (implemented in probe_cuda.cu, CUDA runtime only).
//
//   Payload* p; prepare(site, dtype, shape, ndim, numel, elsize, kModeSummary, &p);  // allocates
//   enqueue(p, x.data_ptr(), stream);   // capturable: stats kernels, D2H, host callback
//   destroy(p);                         // once no captured graph that holds p can replay
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace dynstep {
struct SiteState;
namespace cuda {

// c10::ScalarType values of the supported dtypes (torch/headeronly/core/ScalarType.h order).
enum DType : int { kByte = 0, kChar = 1, kShort = 2, kInt = 3, kLong = 4, kHalf = 5, kFloat = 6, kDouble = 7,
                   kBool = 11, kBFloat16 = 15 };

enum Mode : int {
  kModeSummary = 0,   // device stats only: a few dozen bytes cross the bus
  kModeRecord = 1,    // device stats + the whole tensor into pinned staging
  kModeFullCopy = 2,  // the whole tensor, stats on the host (what a copy-everything probe does)
};

struct Payload;

// Allocates device scratch and pinned staging; callable during a capture (allocations switch the
// thread to relaxed capture mode, as PyTorch's allocator does), never per hit.
cudaError_t prepare(std::shared_ptr<SiteState> site, int dtype, const int64_t* shape, int ndim, int64_t numel,
                    int64_t element_size, int mode, Payload** out);
cudaError_t enqueue(Payload* p, const void* device_ptr, cudaStream_t stream);
int64_t replays(const Payload* p);
void destroy(Payload* p);

}  // namespace cuda
}  // namespace dynstep

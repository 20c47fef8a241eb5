// The CUDA probe's host-side interface (implemented in probe_cuda.cu, CUDA runtime only).
//
//   Capture c; capture_of(stream, &c);
//   std::shared_ptr<Payload> p;
//   prepare(site, dtype, shape, ndim, numel, elsize, kModeSummary, capacity, c.active ? stream : nullptr, &p);
//   enqueue(*p, x.data_ptr(), stream);   // capturable: stats kernel(s) (+ D2H and host callback to record)
//   harvest();                           // stats-only hits: mapped ring -> site rings
//   p.reset();                           // the last owner retires it ...
//   free_retired(current_stream);        // ... and a safe point frees it (not while that stream captures)
//
// Ownership: a Payload is freed once nobody holds its shared_ptr. The glue holds the eager
// payload of a site until the site closes; every captured graph holds its own payloads through a
// CUDA user object (carried into each graph exec instantiated from it) until CUDA destroys the
// graph and its execs and their launches have finished. The last owner may be a CUDA-internal
// thread, which must not call CUDA, so dropping the last reference only queues the payload;
// `free_retired` does the cudaFree / cudaFreeHost later, from a normal thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace dynstep {
namespace cuda {

// c10::ScalarType values of the supported dtypes (torch/headeronly/core/ScalarType.h order).
enum DType : int { kByte = 0, kChar = 1, kShort = 2, kInt = 3, kLong = 4, kHalf = 5, kFloat = 6, kDouble = 7,
                   kBool = 11, kBFloat16 = 15 };

enum Mode : int {
  kModeSummary = 0,   // device stats only, published by the kernel into a mapped ring: no host callback
  kModeRecord = 1,    // device stats + the whole tensor into pinned staging
  kModeFullCopy = 2,  // the whole tensor, stats on the host (what a copy-everything probe does)
  kModeFused = 3,     // stats Inductor's kernels computed (dynstep::publish): the mapped ring only
};

struct Payload;

// Capture state of a stream. `id` is unique over the process's lifetime; valid when `active`.
struct Capture {
  bool active = false;
  unsigned long long id = 0;
};
cudaError_t capture_of(cudaStream_t stream, Capture* out);

// Allocates device scratch and pinned staging; callable during a capture (allocations switch the
// thread to relaxed capture mode, as PyTorch's allocator does), never per hit. With
// `capturing_stream` set (nullptr: not capturing; the legacy default stream never captures), the
// graph being captured on that stream takes a reference to the payload (a CUDA user object), so
// the payload outlives every replay of that graph.
// A stats-only payload (kModeSummary) publishes each hit into a mapped ring of `ring_capacity`
// slots (clamped to 1..65536) that `harvest` reads; other modes ignore it.
cudaError_t prepare(int64_t site, int dtype, const int64_t* shape, int ndim, int64_t numel, int64_t element_size,
                    int mode, int64_t ring_capacity, cudaStream_t capturing_stream, std::shared_ptr<Payload>* out);
cudaError_t enqueue(Payload& p, const void* device_ptr, cudaStream_t stream);

// One fused summary (dynstep::publish): the device addresses of the statistics Inductor's kernels
// wrote for a value — float64 sum and sum of squares, min and max in the value's dtype
// (`value_dtype`, uint8 for bool), int64 NaN and non-finite counts (nullptr for integer values) —
// and the kModeFused payload of its site. enqueue_fused publishes every hit into its payload's mapped
// ring from one thread of a small kernel per 16 hits of a dtype, in order: capturable, no host
// callback, no copy.
struct FusedHit {
  Payload* payload = nullptr;
  const void* sum = nullptr;
  const void* sumsq = nullptr;
  const void* min = nullptr;
  const void* max = nullptr;
  const void* nan = nullptr;
  const void* bad = nullptr;
  int value_dtype = kFloat;
};
cudaError_t enqueue_fused(const FusedHit* hits, int n, cudaStream_t stream);
int64_t replays(const Payload& p);

// Moves the hits stats-only payloads have published since the last harvest into their sites'
// rings (in the order the device ran them), counting slots overwritten before the host read them
// as ring drops. No CUDA call: callable from any normal thread, capturing or not. Returns how
// many hits it moved. Hits still queued on a stream are taken by a later harvest.
int64_t harvest();
// Harvested hits that held a NaN or Inf, since the process started (the flight recorder compares it
// before and after a harvest: only then does it move hits to Python).
int64_t harvested_nonfinite();

// Frees the retired payloads whose eager hits have all landed; returns how many it freed. Call it
// from a normal thread, passing its current stream: nothing is freed while that stream captures
// (cudaFree synchronizes), and never from a host callback or a user-object destructor.
int64_t free_retired(cudaStream_t current);

struct Counts {
  int64_t live = 0;     // allocated and not yet freed (retired ones included)
  int64_t retired = 0;  // no owner left, waiting for free_retired
  int64_t ignored = 0;  // host callbacks that found their site closed or removed, and did nothing
};
Counts counts();

}  // namespace cuda
}  // namespace dynstep

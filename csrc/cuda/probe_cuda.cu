// CUDA side of the native probe. Two paths, both capturable:
// - stats only (summary, the non-finite flag): the device reduces the tensor and its last block
//   publishes the few dozen bytes of stats into a ring in mapped pinned host memory (a seqlock per
//   slot). No host callback and no copy node: a replay pays for the reduction kernel(s) alone, and
//   the host harvests the ring when records are drained (or the site's state is read).
// - record / compare: device stats, an async D2H copy into pinned staging and a host callback
//   (cudaLaunchHostFunc) that runs the native action on the host copy.
//
// Everything `enqueue*` does is capturable: kernel launches, cudaMemcpyAsync into pinned memory
// allocated beforehand, cudaLaunchHostFunc. `prepare` allocates once per (site, shape, dtype,
// mode, capture) and the payload is reused for every later hit and every replay; it never
// synchronises. The host callback never calls Python or the CUDA API: it looks its site up by id
// and writes into the site's ring (probe_state.h), exactly what the CPU kernel writes; a closed
// or removed site's hit is ignored (counted in Counts::ignored).
//
// Lifetime (probe_cuda.h): payloads are shared_ptr-owned by the glue's registry (eager) and by
// each captured graph (a CUDA user object holding a heap shared_ptr). The last owner only pushes
// the payload onto a lock-free retired list, because it may be CUDA's internal thread (a
// user-object destructor must not call CUDA); free_retired frees from a normal thread. An eager
// payload is freed only once every eager hit enqueued on it has run its host callback (the last
// stream operation that touches it). At process exit retired payloads are leaked on purpose.
//
// This file uses only the CUDA runtime and probe_state.h, so `nvcc -c` compiles it on its own
// (csrc/check_nvcc.sh). The torch op glue is csrc/cuda/probe_cuda_op.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <pthread.h>

#include <algorithm>

#include "../probe_state.h"
#include "probe_cuda.h"

namespace dynstep {
namespace cuda {

// Partial stats as the device accumulates them (the Acc of probe_state.h, in device form).
struct DevAcc {
  double sum, sumsq, min, max, absmax;
  unsigned long long nan, inf, count;
};

// One published hit of a stats-only payload, in mapped pinned memory. The device clears `seq`,
// writes the rest, then sets `seq` = index + 1 (system fences between): the host takes a slot
// only when it reads the same `seq` before and after copying it.
struct RingSlot {
  DevAcc acc;
  double shift;
  unsigned long long devseq;  // order of hits across payloads of one device
  unsigned long long seq;
};

// Head of a stats-only payload's mapped memory: hits published so far and the first non-finite
// hit (kept even when its slot is overwritten before the host harvests it).
struct RingHeader {
  unsigned long long count;
  unsigned long long nonfinite_index1;  // index + 1 of the first hit with NaN/Inf, 0: none yet
  unsigned long long nonfinite_nan, nonfinite_inf;
  unsigned int nonfinite_ready;
};

__device__ unsigned long long g_devseq = 0;  // per device: the module's globals are per context

template <typename T> __device__ __forceinline__ double to_double(T v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ double to_double<__half>(__half v) { return static_cast<double>(__half2float(v)); }
template <> __device__ __forceinline__ double to_double<__nv_bfloat16>(__nv_bfloat16 v) {
  return static_cast<double>(__bfloat162float(v));
}
template <> __device__ __forceinline__ double to_double<bool>(bool v) { return v ? 1.0 : 0.0; }

__device__ __forceinline__ void dev_add(DevAcc& a, double v, double shift) {
  if (isnan(v)) { ++a.nan; return; }
  if (isinf(v)) { ++a.inf; return; }
  double d = v - shift;
  a.sum += d;
  a.sumsq += d * d;
  a.min = fmin(a.min, v);
  a.max = fmax(a.max, v);
  a.absmax = fmax(a.absmax, fabs(v));
  ++a.count;
}

__device__ __forceinline__ void dev_merge(DevAcc& a, const DevAcc& b) {
  a.sum += b.sum; a.sumsq += b.sumsq;
  a.min = fmin(a.min, b.min); a.max = fmax(a.max, b.max); a.absmax = fmax(a.absmax, b.absmax);
  a.nan += b.nan; a.inf += b.inf; a.count += b.count;
}

__device__ __forceinline__ DevAcc dev_empty() {
  DevAcc a;
  a.sum = a.sumsq = 0.0;
  a.min = CUDART_INF;
  a.max = -CUDART_INF;
  a.absmax = 0.0;
  a.nan = a.inf = a.count = 0;
  return a;
}

constexpr int kThreads = 256;           // threads of a multi-block stats launch
constexpr int kBlocksPerSM = 4;         // resident blocks per SM a stats launch aims for
constexpr int64_t kMaxRing = 1 << 16;  // slots of a stats-only payload's mapped ring
constexpr int kCounterSlots = 1 << 14;  // payloads of one device with a device-side counter pair

// Per-payload counters in device memory (module globals are per context, i.e. per device), so
// the hot path never does an atomic on mapped host memory. A slot belongs to one live payload;
// `g_ticket` is back to 0 after every launch (its last block resets it), `g_published` only
// grows (a reused slot starts where its last owner stopped: Payload::harvested).
__device__ unsigned int g_ticket[kCounterSlots];
__device__ unsigned long long g_published[kCounterSlots];

// Publish one hit's stats into the mapped ring (one thread).
// `devseq`: the hit's place in the device's order (g_devseq), taken by the caller.
__device__ void publish_at(const DevAcc& a, double shift, int slot_id, RingHeader* head, RingSlot* slots,
                           unsigned long long capacity, unsigned long long devseq) {
  unsigned long long index = atomicAdd(&g_published[slot_id], 1ULL);
  RingSlot* slot = slots + index % capacity;
  volatile unsigned long long* seq = &slot->seq;
  *seq = 0ULL;  // being written
  __threadfence_system();
  slot->acc = a;
  slot->shift = shift;
  slot->devseq = devseq;
  if ((a.nan || a.inf) && atomicCAS(&head->nonfinite_index1, 0ULL, index + 1) == 0ULL) {
    head->nonfinite_nan = a.nan;
    head->nonfinite_inf = a.inf;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned int*>(&head->nonfinite_ready) = 1u;
  }
  __threadfence_system();
  *seq = index + 1;
}

__device__ void publish(const DevAcc& a, double shift, int slot_id, RingHeader* head, RingSlot* slots,
                        unsigned long long capacity) {
  publish_at(a, shift, slot_id, head, slots, capacity, atomicAdd(&g_devseq, 1ULL));
}

template <typename T>
__device__ __forceinline__ double shift_of(const T* x, long long n) {
  double first = n > 0 ? to_double(x[0]) : 0.0;
  return isfinite(first) ? first : 0.0;
}

// -- one-pass statistics ----------------------------------------------------------------------------
// Each thread reads its share in 16-byte vector loads at the value's own width (8 halves, 4 floats,
// ...), folds every vector in the compute type (float for 16/32-bit floating and small integer
// types, double for double and 32/64-bit integers) with the data shifted by the first element, and
// adds the vector's sums into double accumulators; warps fold with shuffles, blocks through shared
// memory, and the last block to finish (a ticket) folds the blocks' partials in double and publishes.
// One kernel node per hit, one read of the tensor.
template <typename T> struct ComputeOf { using type = float; };
template <> struct ComputeOf<double> { using type = double; };
template <> struct ComputeOf<long long> { using type = double; };
template <> struct ComputeOf<int> { using type = double; };

template <typename T> struct IsFloating { static constexpr bool value = false; };
template <> struct IsFloating<double> { static constexpr bool value = true; };
template <> struct IsFloating<float> { static constexpr bool value = true; };
template <> struct IsFloating<__half> { static constexpr bool value = true; };
template <> struct IsFloating<__nv_bfloat16> { static constexpr bool value = true; };

template <typename C, typename T> __device__ __forceinline__ C to_compute(T v) { return static_cast<C>(v); }
template <> __device__ __forceinline__ float to_compute<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_compute<float, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ __forceinline__ float to_compute<float, bool>(bool v) { return v ? 1.0f : 0.0f; }

template <typename C> __device__ __forceinline__ C c_inf();
template <> __device__ __forceinline__ float c_inf<float>() { return CUDART_INF_F; }
template <> __device__ __forceinline__ double c_inf<double>() { return CUDART_INF; }

template <typename C> __device__ __forceinline__ C c_max_finite();
template <> __device__ __forceinline__ float c_max_finite<float>() { return 3.402823466e38f; }
template <> __device__ __forceinline__ double c_max_finite<double>() { return 1.7976931348623157e308; }

// A thread's running statistics: sums in double, extremes in the compute type, 32-bit counts (a
// thread sees far fewer than 2^32 elements; the fold widens them).
template <typename C> struct ThreadAcc {
  double sum, sumsq;
  C min, max;
  unsigned int nan, bad;  // bad: NaN or +-Inf
};

// Fold K consecutive elements: their shifted sums in C, then once into the double sums. Kept to
// a few instructions per element (the 16-bit types are otherwise compute-bound, not memory-bound).
template <typename T, int K, typename C>
__device__ __forceinline__ void fold(const T* v, C shift, ThreadAcc<C>& t) {
  C s = 0, ss = 0;
#pragma unroll
  for (int i = 0; i < K; ++i) {
    const C x = to_compute<C>(v[i]);
    if constexpr (IsFloating<T>::value) {
      const bool is_nan = x != x;
      const bool bad = !(fabs(x) <= c_max_finite<C>());  // NaN compares false too
      t.nan += is_nan;
      t.bad += bad;
      const C d = bad ? C(0) : x - shift;
      s += d;
      ss = fma(d, d, ss);
      t.min = fmin(t.min, bad ? c_inf<C>() : x);
      t.max = fmax(t.max, bad ? -c_inf<C>() : x);
    } else {
      const C d = x - shift;
      s += d;
      ss = fma(d, d, ss);
      t.min = fmin(t.min, x);
      t.max = fmax(t.max, x);
    }
  }
  t.sum += static_cast<double>(s);
  t.sumsq += static_cast<double>(ss);
}

__device__ __forceinline__ void warp_fold(DevAcc& a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a.sum += __shfl_down_sync(0xffffffffu, a.sum, o);
    a.sumsq += __shfl_down_sync(0xffffffffu, a.sumsq, o);
    a.min = fmin(a.min, __shfl_down_sync(0xffffffffu, a.min, o));
    a.max = fmax(a.max, __shfl_down_sync(0xffffffffu, a.max, o));
    a.nan += __shfl_down_sync(0xffffffffu, a.nan, o);
    a.inf += __shfl_down_sync(0xffffffffu, a.inf, o);
  }
}

// The block's fold of `a` (every thread calls it; the result is valid in thread 0).
__device__ __forceinline__ DevAcc block_fold(DevAcc a) {
  __shared__ DevAcc warps[32];
  warp_fold(a);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  if (nwarps == 1) return a;
  if (lane == 0) warps[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < nwarps ? warps[lane] : dev_empty();
    warp_fold(a);
  }
  __syncthreads();  // `warps` may be reused by a later call
  return a;
}

// x: the value (contiguous), n elements. Publishes into the ring (`head` set) or writes the fold to
// `out` and the shift to `shift_out` (record mode: copied to the host next).
template <typename T>
__global__ void __launch_bounds__(kThreads) stats_onepass(const T* __restrict__ x, long long n, DevAcc* partials,
                                                          int slot_id, DevAcc* out, double* shift_out,
                                                          RingHeader* head, RingSlot* slots,
                                                          unsigned long long capacity) {
  using C = typename ComputeOf<T>::type;
  constexpr int V = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  const double shift = shift_of(x, n);
  const C cshift = static_cast<C>(shift);
  ThreadAcc<C> t{0.0, 0.0, c_inf<C>(), -c_inf<C>(), 0u, 0u};
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
  const auto addr = reinterpret_cast<unsigned long long>(x);
  long long head_n = n;  // elements before the first 16-byte boundary (all of them if misaligned for T)
  if (addr % sizeof(T) == 0) {
    const long long to_boundary = static_cast<long long>((16 - addr % 16) % 16 / sizeof(T));
    head_n = to_boundary < n ? to_boundary : n;
  }
  const long long nvec = (n - head_n) / V;
  for (long long i = tid; i < head_n; i += stride) fold<T, 1>(x + i, cshift, t);
  const uint4* vx = reinterpret_cast<const uint4*>(x + head_n);
  long long i = tid;
  for (; i + 3 * stride < nvec; i += 4 * stride) {  // four 16-byte loads in flight per thread
    const uint4 a = vx[i], b = vx[i + stride], c = vx[i + 2 * stride], d = vx[i + 3 * stride];
    fold<T, V>(reinterpret_cast<const T*>(&a), cshift, t);
    fold<T, V>(reinterpret_cast<const T*>(&b), cshift, t);
    fold<T, V>(reinterpret_cast<const T*>(&c), cshift, t);
    fold<T, V>(reinterpret_cast<const T*>(&d), cshift, t);
  }
  for (; i < nvec; i += stride) {
    const uint4 a = vx[i];
    fold<T, V>(reinterpret_cast<const T*>(&a), cshift, t);
  }
  for (long long j = head_n + nvec * V + tid; j < n; j += stride) fold<T, 1>(x + j, cshift, t);

  DevAcc a;
  a.sum = t.sum; a.sumsq = t.sumsq;
  a.min = static_cast<double>(t.min); a.max = static_cast<double>(t.max);
  a.absmax = 0.0; a.nan = t.nan; a.inf = t.bad - t.nan; a.count = 0;
  a = block_fold(a);
  if (gridDim.x > 1) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
      partials[blockIdx.x] = a;
      __threadfence();
      last = atomicAdd(&g_ticket[slot_id], 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    DevAcc f = dev_empty();
    for (int b = threadIdx.x; b < static_cast<int>(gridDim.x); b += blockDim.x) {
      const volatile DevAcc* pb = partials + b;
      DevAcc q;
      q.sum = pb->sum; q.sumsq = pb->sumsq; q.min = pb->min; q.max = pb->max;
      q.nan = pb->nan; q.inf = pb->inf;
      f.sum += q.sum; f.sumsq += q.sumsq; f.min = fmin(f.min, q.min); f.max = fmax(f.max, q.max);
      f.nan += q.nan; f.inf += q.inf;
    }
    a = block_fold(f);
    if (threadIdx.x == 0) g_ticket[slot_id] = 0u;  // ready for the next launch (or replay)
  }
  if (threadIdx.x != 0) return;
  a.count = static_cast<unsigned long long>(n) - a.nan - a.inf;
  a.absmax = a.count ? fmax(fabs(a.min), fabs(a.max)) : 0.0;
  if (head != nullptr) {
    publish(a, shift, slot_id, head, slots, capacity);
  } else {
    *out = a;
    *shift_out = shift;
  }
}

// -- fused summaries: the statistics are already reduced (by Inductor's kernels); fold and publish ---
constexpr int kFusedBatch = 32;  // hits per launch, a lane each: 32 x 88 bytes of parameters, below 4 KiB

struct FusedSite {
  const double* sum;
  const double* sumsq;
  const void* min;               // in the value's dtype (the launch's T)
  const void* max;
  const long long* nan;          // int64 counts, or nullptr for a dtype without NaN/Inf
  const long long* bad;
  long long numel;
  RingHeader* head;
  RingSlot* slots;
  unsigned long long capacity;
  int slot_id;
};

struct FusedBatch {
  FusedSite site[kFusedBatch];
  int n;
};
static_assert(kFusedBatch <= 32, "publish_fused gives each hit a lane of one warp");
static_assert(sizeof(FusedBatch) <= 4096, "kernel parameters: at most 4 KiB before CUDA 12.1");

// One warp, a thread per hit: lane 0 takes the batch's run of device sequence numbers, so they follow
// graph order, and every lane publishes its own hit. (One thread publishing the hits in turn waited for
// each hit's system-scope fences: 31 us per batch of 16 on an H100, 2026-11-26.)
template <typename T>
__global__ void publish_fused(FusedBatch b) {
  const int i = static_cast<int>(threadIdx.x);
  unsigned long long base = 0;
  if (i == 0) base = atomicAdd(&g_devseq, static_cast<unsigned long long>(b.n));
  base = __shfl_sync(0xffffffffu, base, 0);
  if (blockIdx.x != 0 || i >= b.n) return;
  const FusedSite& s = b.site[i];
  DevAcc a = dev_empty();
  a.sum = *s.sum;
  a.sumsq = *s.sumsq;
  a.min = to_double(*static_cast<const T*>(s.min));
  a.max = to_double(*static_cast<const T*>(s.max));
  a.absmax = fmax(fabs(a.min), fabs(a.max));
  const long long bad = s.bad != nullptr ? *s.bad : 0;
  const long long nan = s.nan != nullptr ? *s.nan : 0;
  a.nan = static_cast<unsigned long long>(nan);
  a.inf = static_cast<unsigned long long>(bad - nan);
  a.count = static_cast<unsigned long long>(s.numel - bad);
  publish_at(a, 0.0, s.slot_id, s.head, s.slots, s.capacity, base + static_cast<unsigned long long>(i));
}

// What the host callback reads: device-reduced stats (summary) and the shift they used.
struct HostStats {
  DevAcc acc;
  double shift;
};

struct Payload {
  int64_t site = 0;               // looked up at each callback: a closed site's hits are ignored
  bool captured = false;          // owned by a captured graph; never enqueued eagerly
  int dtype = 0;                  // c10::ScalarType value, kept opaque
  std::vector<int64_t> shape;
  int64_t numel = 0, nbytes = 0;
  int mode = kModeSummary;
  int device = 0;                 // CUDA device the payload's buffers belong to
  int blocks = 1;
  int threads = kThreads;
  int slot_id = -1;               // its device counters (g_ticket, g_published); -1: none
  DevAcc* d_partials = nullptr;   // device scratch: blocks partials + 1 final
  double* d_shift = nullptr;
  HostStats* h_stats = nullptr;   // pinned
  void* h_copy = nullptr;         // pinned staging for the full copy (record / full-copy mode)
  // Stats-only payloads: the mapped ring (header, then `ring_capacity` slots), host and device views.
  int64_t ring_capacity = 0;
  RingHeader* h_head = nullptr;
  RingHeader* d_head = nullptr;
  RingSlot* d_slots = nullptr;
  uint64_t harvested = 0;         // next ring index the host takes (under g_harvest_mu)
  uint64_t published_base = 0;    // g_published[slot_id] when this payload took the slot
  bool nonfinite_taken = false;   // the header's first non-finite hit has been seen by the host
  std::atomic<int64_t> replays{0};
  std::atomic<int64_t> inflight{0};  // eager hits enqueued whose host callback has not run yet
  Payload* next_retired = nullptr;
};

// Trivially destructible, so still valid when a user-object destructor runs during process exit.
static std::atomic<Payload*> g_retired{nullptr};
static std::atomic<int64_t> g_live{0}, g_retired_count{0}, g_ignored{0}, g_harvested_nonfinite{0};

// The last owner of a payload (any thread, CUDA's internal one included): queue it, no CUDA call.
static void retire(Payload* p) {
  Payload* head = g_retired.load(std::memory_order_relaxed);
  do {
    p->next_retired = head;
  } while (!g_retired.compare_exchange_weak(head, p, std::memory_order_release, std::memory_order_relaxed));
  g_retired_count.fetch_add(1);
}

// Destructor of the CUDA user object a captured graph holds: drop that graph's reference.
static void CUDART_CB drop_graph_ref(void* ref) { delete static_cast<std::shared_ptr<Payload>*>(ref); }

static Stats finish(const DevAcc& d, double shift) {
  Acc a;
  a.shift = shift;
  a.sum = d.sum; a.sumsq = d.sumsq;
  a.min = d.min; a.max = d.max; a.absmax = d.absmax;
  a.nan = static_cast<int64_t>(d.nan);
  a.inf = static_cast<int64_t>(d.inf);
  a.count = static_cast<int64_t>(d.count);
  return a.finish();
}

static Stats finish(const HostStats& h) { return finish(h.acc, h.shift); }

// The one dtype dispatch of this file (the CPU side uses AT_DISPATCH): calls f(Tag<T>{}) with the C++
// type stored for `dtype`, or fallback() for a dtype the probe does not handle.
template <typename T> struct Tag { using type = T; };

template <typename F, typename Fallback>
static auto dispatch_dtype(int dtype, F&& f, Fallback&& fallback) {
  switch (dtype) {
    case kDouble: return f(Tag<double>{});
    case kFloat: return f(Tag<float>{});
    case kHalf: return f(Tag<__half>{});
    case kBFloat16: return f(Tag<__nv_bfloat16>{});
    case kLong: return f(Tag<long long>{});
    case kInt: return f(Tag<int>{});
    case kShort: return f(Tag<short>{});
    case kChar: return f(Tag<signed char>{});
    case kByte: return f(Tag<unsigned char>{});
    case kBool: return f(Tag<bool>{});
    default: return fallback();
  }
}

// Host stats over the pinned copy, for the full-copy mode (what a copy-everything probe does).
template <typename T> double host_double(T v) { return static_cast<double>(v); }
template <> double host_double<__half>(__half v) { return static_cast<double>(__half2float(v)); }
template <> double host_double<__nv_bfloat16>(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }

template <typename T>
static Stats host_stats_typed(const void* data, int64_t n) {
  const T* p = static_cast<const T*>(data);
  Acc a;
  double first = host_double(p[0]);
  a.shift = std::isfinite(first) ? first : 0.0;
  for (int64_t i = 0; i < n; ++i) a.add(host_double(p[i]));
  return a.finish();
}

static Stats host_stats(const Payload& p) {
  if (p.numel == 0) return Stats{};
  return dispatch_dtype(
      p.dtype, [&](auto tag) { return host_stats_typed<typename decltype(tag)::type>(p.h_copy, p.numel); },
      [] { return Stats{}; });
}

template <typename T>
static void host_compare_typed(const Payload& p, SiteState& s, int64_t call) {
  const T* v = static_cast<const T*>(p.h_copy);
  CompareRun run;
  for (int64_t i = 0; i < p.numel; ++i) run.step(host_double(v[i]), *s.compare);
  std::string message = run.message(*s.compare, call);
  if (!message.empty()) {
    s.compare_failed = true;
    s.compare_message = std::move(message);
  }
}

// Sticky compare of the host copy against the expected values (caller holds s.mu).
static void host_compare(const Payload& p, SiteState& s, int64_t call) {
  std::string header = header_mismatch(*s.compare, p.shape, p.dtype, call);
  if (!header.empty()) {
    s.compare_failed = true;
    s.compare_message = std::move(header);
    return;
  }
  dispatch_dtype(
      p.dtype, [&](auto tag) { host_compare_typed<typename decltype(tag)::type>(p, s, call); }, [] {});
}

// Marks an eager hit done when the host callback returns: declared first, it is destroyed last,
// after every other use of the payload in the callback.
struct HitDone {
  Payload& p;
  ~HitDone() {
    if (!p.captured) p.inflight.fetch_sub(1, std::memory_order_release);
  }
};

// The host callback: native action on the host copy. No CUDA API, no Python.
static void CUDART_CB on_host(void* user) {
  Payload& p = *static_cast<Payload*>(user);
  HitDone done{p};
  p.replays.fetch_add(1);  // replays of this payload; `call` counts every hit of the site
  std::shared_ptr<SiteState> sp = Registry::get().find(p.site);
  if (!sp || sp->closed.load()) {  // a graph replayed after its probe was closed: ignore the hit
    g_ignored.fetch_add(1);
    return;
  }
  SiteState& s = *sp;
  const int64_t call = s.calls.fetch_add(1);
  const bool copied = p.mode != kModeSummary;
  Stats st = p.mode == kModeFullCopy ? host_stats(p) : (p.numel ? finish(*p.h_stats) : Stats{});
  std::lock_guard<std::mutex> g(s.mu);
  if ((s.actions & kCompare) && s.compare && !s.compare_failed && copied) host_compare(p, s, call);
  if ((st.nan || st.inf) && (s.actions & kNonFiniteFlag)) flag_nonfinite(s, call, st.nan, st.inf);
  if (!(s.actions & (kSummary | kRecord))) return;
  Entry& e = record_hit(s, call, static_cast<uint64_t>(pthread_self()), st, p.shape, p.dtype, p.device);
  if (copied && (s.actions & kRecord) && Registry::get().make_room(&s, p.nbytes)) {
    e.data.resize(static_cast<size_t>(p.nbytes));  // capacity reused after the first replay
    std::memcpy(e.data.data(), p.h_copy, static_cast<size_t>(p.nbytes));
    e.nbytes = p.nbytes;
    e.has_tensor = true;
    Registry::get().account(p.nbytes);
  } else if (copied && (s.actions & kRecord)) {
    ++s.dropped_memory;
  }
}

template <typename T>
static cudaError_t launch_stats(const Payload& p, const void* x, cudaStream_t stream) {
  stats_onepass<T><<<p.blocks, p.threads, 0, stream>>>(static_cast<const T*>(x), p.numel, p.d_partials, p.slot_id,
                                                       p.d_partials + p.blocks, p.d_shift, p.d_head, p.d_slots,
                                                       static_cast<unsigned long long>(p.ring_capacity));
  return cudaGetLastError();
}

// -- device counter slots ---------------------------------------------------------------------------
// Per device: free slots and, per slot, how many hits its last owner published (g_published only
// grows; a new owner's ring indices continue from there). Under slots_mu; leaked on purpose.
struct SlotPool {
  std::vector<int> free_ids;
  std::vector<unsigned long long> published;  // per slot id handed out so far
};
static std::mutex& slots_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
static SlotPool& slot_pool(int device) {
  static auto* pools = new std::vector<SlotPool>();
  if (device >= static_cast<int>(pools->size())) pools->resize(device + 1);
  return (*pools)[device];
}

// A free slot of `device` and where its ring indices start, or -1 when all are taken.
static int take_slot(int device, unsigned long long* base) {
  std::lock_guard<std::mutex> g(slots_mu());
  SlotPool& pool = slot_pool(device);
  if (pool.free_ids.empty()) {
    if (pool.published.size() >= static_cast<size_t>(kCounterSlots)) return -1;
    pool.published.push_back(0);
    *base = 0;
    return static_cast<int>(pool.published.size()) - 1;
  }
  int id = pool.free_ids.back();
  pool.free_ids.pop_back();
  *base = pool.published[id];
  return id;
}

// Give a slot back once nothing more can be published through it (its payload's graphs and hits
// are done), with the count of hits published through it so far.
static void give_slot(int device, int id, unsigned long long published) {
  std::lock_guard<std::mutex> g(slots_mu());
  SlotPool& pool = slot_pool(device);
  pool.published[id] = published;
  pool.free_ids.push_back(id);
}

static cudaError_t launch_stats_any(const Payload& p, const void* x, cudaStream_t stream) {
  return dispatch_dtype(
      p.dtype, [&](auto tag) { return launch_stats<typename decltype(tag)::type>(p, x, stream); },
      [] { return cudaErrorInvalidValue; });
}

// -- harvesting the stats-only rings ----------------------------------------------------------------
// Leaked on purpose, as the Registry: harvesting never runs CUDA, only reads mapped host memory.
static std::mutex& harvest_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
static std::vector<Payload*>& ring_payloads() {  // live stats-only payloads (under harvest_mu)
  static auto* v = new std::vector<Payload*>();
  return *v;
}

struct Taken {
  unsigned long long devseq;
  Payload* p;
  uint64_t index;
  DevAcc acc;
  double shift;
};

static unsigned long long load_seq(const RingSlot& slot) {
  unsigned long long v = *reinterpret_cast<const volatile unsigned long long*>(&slot.seq);
  std::atomic_thread_fence(std::memory_order_acquire);
  return v;
}

// Take what `p`'s ring has published since the last harvest (caller holds harvest_mu). Slots
// overwritten before the host got to them are counted as ring drops of their site.
static void take(Payload& p, std::vector<Taken>& out) {
  const auto* slots = reinterpret_cast<const RingSlot*>(p.h_head + 1);
  const uint64_t cap = static_cast<uint64_t>(p.ring_capacity);
  uint64_t lost = 0;
  for (uint64_t i = p.harvested;; ++i) {
    const RingSlot& slot = slots[i % cap];
    unsigned long long before = load_seq(slot);
    if (before == i + 1) {
      Taken t{slot.devseq, &p, i, slot.acc, slot.shift};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (load_seq(slot) == before) {
        out.push_back(t);
      } else {
        ++lost;  // overwritten while being read: the device has lapped the ring
      }
      p.harvested = i + 1;
    } else if (before > i + 1) {  // lapped: slot holds a later hit; everything before its lap is gone
      uint64_t oldest = before > cap ? before - cap : 0;  // oldest index that may still be in the ring
      if (oldest <= i) oldest = i + 1;
      lost += oldest - i;
      p.harvested = oldest;
      i = oldest - 1;
    } else {
      break;  // not published yet (still queued, or being written)
    }
  }
  if (lost == 0) return;
  p.replays.fetch_add(static_cast<int64_t>(lost));
  std::shared_ptr<SiteState> sp = Registry::get().find(p.site);
  if (!sp || sp->closed.load()) {
    g_ignored.fetch_add(static_cast<int64_t>(lost));
    return;
  }
  sp->calls.fetch_add(static_cast<int64_t>(lost));
  std::lock_guard<std::mutex> g(sp->mu);
  sp->dropped_ring += static_cast<int64_t>(lost);
}

// The first non-finite hit of a payload whose slot was lost before the host saw it still sets the
// site's sticky flag (caller holds harvest_mu).
static void take_nonfinite(Payload& p) {
  if (p.nonfinite_taken) return;
  const volatile RingHeader* h = p.h_head;
  if (h->nonfinite_ready == 0u) return;
  std::atomic_thread_fence(std::memory_order_acquire);
  p.nonfinite_taken = true;
  std::shared_ptr<SiteState> sp = Registry::get().find(p.site);
  if (!sp || sp->closed.load() || !(sp->actions.load() & kNonFiniteFlag)) return;
  std::lock_guard<std::mutex> g(sp->mu);
  flag_nonfinite(*sp, -1, static_cast<int64_t>(h->nonfinite_nan), static_cast<int64_t>(h->nonfinite_inf),
                 "CUDA hit " + std::to_string(h->nonfinite_index1 - 1 - p.published_base) + " of this capture (its summary " +
        "was overwritten before it was read): " + std::to_string(h->nonfinite_nan) + " NaN, " +
        std::to_string(h->nonfinite_inf) + " Inf");
}

// One hit into its site's ring, as the host callback would have written it.
static void deliver(const Taken& t) {
  Payload& p = *t.p;
  p.replays.fetch_add(1);
  std::shared_ptr<SiteState> sp = Registry::get().find(p.site);
  if (!sp || sp->closed.load()) {
    g_ignored.fetch_add(1);
    return;
  }
  SiteState& s = *sp;
  const int64_t call = s.calls.fetch_add(1);
  Stats st = p.numel ? finish(t.acc, t.shift) : Stats{};
  const int64_t a = s.actions.load();
  std::lock_guard<std::mutex> g(s.mu);
  if (st.nan || st.inf) g_harvested_nonfinite.fetch_add(1);
  if ((st.nan || st.inf) && (a & kNonFiniteFlag)) flag_nonfinite(s, call, st.nan, st.inf);
  if (!(a & (kSummary | kRecord))) return;
  record_hit(s, call, 0, st, p.shape, p.dtype, p.device);
}

static int64_t harvest_locked(const std::vector<Payload*>& payloads) {
  std::vector<Taken> taken;
  for (Payload* p : payloads) take(*p, taken);
  // devseq orders hits across payloads of one device (stream order, or the order the device ran them)
  std::sort(taken.begin(), taken.end(), [](const Taken& a, const Taken& b) {
    return a.p->device != b.p->device ? a.p->device < b.p->device : a.devseq < b.devseq;
  });
  for (const Taken& t : taken) deliver(t);
  for (Payload* p : payloads) take_nonfinite(*p);
  return static_cast<int64_t>(taken.size());
}

int64_t harvest() {
  std::lock_guard<std::mutex> g(harvest_mu());
  return harvest_locked(ring_payloads());
}

int64_t harvested_nonfinite() { return g_harvested_nonfinite.load(); }

static void destroy(Payload* p) {
  int previous = -1;
  if (cudaGetDevice(&previous) == cudaSuccess && previous != p->device) cudaSetDevice(p->device);
  if (p->d_partials) cudaFree(p->d_partials);  // synchronizes: the kernels that publish into the ring are done
  else if (p->h_head) cudaDeviceSynchronize();  // a fused payload: its publish kernels are done too
  if (p->d_shift) cudaFree(p->d_shift);
  if (p->h_head) {
    std::lock_guard<std::mutex> g(harvest_mu());
    harvest_locked({p});  // its last hits, before the ring goes
    auto& v = ring_payloads();
    v.erase(std::remove(v.begin(), v.end(), p), v.end());
  }
  // Every launch that could publish through the slot has finished (the synchronisation above):
  // g_published[slot] now equals the ring index the host reached.
  if (p->slot_id >= 0) give_slot(p->device, p->slot_id, p->h_head ? p->harvested : p->published_base);
  if (p->h_head) cudaFreeHost(p->h_head);
  if (p->h_stats) cudaFreeHost(p->h_stats);
  if (p->h_copy) cudaFreeHost(p->h_copy);
  if (previous >= 0 && previous != p->device) cudaSetDevice(previous);
  delete p;
  g_live.fetch_sub(1);
}

cudaError_t capture_of(cudaStream_t stream, Capture* out) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, &out->id);
  out->active = err == cudaSuccess && status == cudaStreamCaptureStatusActive;
  return err;
}

// The graph being captured on `stream` takes one reference to `p`. User objects retained by a
// graph are carried into every graph exec instantiated from it; CUDA releases them once the
// graph and its execs are destroyed and their pending launches have finished.
static cudaError_t hold_in_graph(const std::shared_ptr<Payload>& p, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
#if CUDART_VERSION >= 13000  // CUDA 13 folded _v2/_v3 into cudaStreamGetCaptureInfo
  cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, nullptr, nullptr, nullptr);
#else
  cudaError_t err = cudaStreamGetCaptureInfo_v2(stream, &status, nullptr, &graph, nullptr, nullptr);
#endif
  if (err != cudaSuccess) return err;
  if (status != cudaStreamCaptureStatusActive || graph == nullptr) return cudaErrorStreamCaptureInvalidated;
  auto* ref = new std::shared_ptr<Payload>(p);
  cudaUserObject_t object = nullptr;
  err = cudaUserObjectCreate(&object, ref, drop_graph_ref, 1, cudaUserObjectNoDestructorSync);
  if (err != cudaSuccess) {
    delete ref;
    return err;
  }
  err = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (err != cudaSuccess) cudaUserObjectRelease(object, 1);  // ours again: its destructor drops `ref`
  return err;
}

cudaError_t prepare(int64_t site, int dtype, const int64_t* shape, int ndim, int64_t numel, int64_t element_size,
                    int mode, int64_t ring_capacity, cudaStream_t capturing_stream, std::shared_ptr<Payload>* out) {
  // Allocation is not a stream operation, but global capture mode forbids it on this thread:
  // relax it for these calls, as c10's CUDA caching allocator does.
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  cudaError_t err = cudaSuccess;
  auto* raw = new Payload();
  g_live.fetch_add(1);
  std::shared_ptr<Payload> p(raw, retire);  // from here on, dropping `p` queues the payload for free_retired
  p->site = site;
  p->captured = capturing_stream != nullptr;
  p->dtype = dtype;
  p->shape.assign(shape, shape + ndim);
  p->numel = numel;
  p->nbytes = numel * element_size;
  p->mode = mode;
  if ((err = cudaGetDevice(&p->device)) != cudaSuccess) goto done;
  {
    // One pass: enough blocks to fill the device (a few per SM), each thread taking 16-byte vectors;
    // a small value gets one block of just enough warps (no shared-memory fold, no ticket).
    int sms = 0;
    if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p->device)) != cudaSuccess) goto done;
    const long long per_vector = element_size > 0 && element_size <= 16 ? 16 / element_size : 1;
    const long long vectors = (numel + per_vector - 1) / per_vector;
    const long long want = (vectors + kThreads - 1) / kThreads;
    const long long most = static_cast<long long>(std::max(sms, 1)) * kBlocksPerSM;
    p->blocks = static_cast<int>(want < 1 ? 1 : (want > most ? most : want));
    p->threads = kThreads;
    if (p->blocks == 1) p->threads = static_cast<int>(std::min<long long>(kThreads, std::max<long long>(32, (vectors + 31) / 32 * 32)));
  }
  {
    unsigned long long base = 0;
    p->slot_id = take_slot(p->device, &base);
    if (p->slot_id < 0) { err = cudaErrorMemoryAllocation; goto done; }
    p->published_base = base;
    p->harvested = base;
  }
  if (mode != kModeFused) {  // a fused payload only publishes what Inductor's kernels reduced
    if ((err = cudaMalloc(&p->d_partials, sizeof(DevAcc) * (p->blocks + 1))) != cudaSuccess) goto done;
    if ((err = cudaMalloc(&p->d_shift, sizeof(double))) != cudaSuccess) goto done;
    if ((err = cudaHostAlloc(reinterpret_cast<void**>(&p->h_stats), sizeof(HostStats), cudaHostAllocDefault)) !=
        cudaSuccess)
      goto done;
  }
  if ((mode == kModeRecord || mode == kModeFullCopy) && p->nbytes > 0 &&
      (err = cudaHostAlloc(&p->h_copy, static_cast<size_t>(p->nbytes), cudaHostAllocDefault)) != cudaSuccess)
    goto done;
  if (mode == kModeSummary || mode == kModeFused) {
    p->ring_capacity = ring_capacity < 1 ? 1 : (ring_capacity > kMaxRing ? kMaxRing : ring_capacity);
    size_t bytes = sizeof(RingHeader) + sizeof(RingSlot) * static_cast<size_t>(p->ring_capacity);
    void* mapped = nullptr;
    if ((err = cudaHostAlloc(&mapped, bytes, cudaHostAllocMapped)) != cudaSuccess) goto done;
    std::memset(mapped, 0, bytes);  // host memory: no CUDA call, so fine during a capture
    p->h_head = static_cast<RingHeader*>(mapped);
    void* device_view = nullptr;
    if ((err = cudaHostGetDevicePointer(&device_view, mapped, 0)) != cudaSuccess) goto done;
    p->d_head = static_cast<RingHeader*>(device_view);
    p->d_slots = reinterpret_cast<RingSlot*>(p->d_head + 1);
    std::lock_guard<std::mutex> g(harvest_mu());
    ring_payloads().push_back(raw);
  }
  if (p->captured) err = hold_in_graph(p, capturing_stream);
done:
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  if (err != cudaSuccess) p.reset();  // nothing was enqueued on it: retired, freed at the next safe point
  *out = std::move(p);
  return err;
}

cudaError_t enqueue(Payload& p, const void* device_ptr, cudaStream_t stream) {
  // An eager hit keeps the payload from being freed until its host callback has run. A failed
  // enqueue leaves the count up: the payload then leaks rather than be freed under a copy that
  // may still be in flight.
  if (p.d_head != nullptr) return launch_stats_any(p, device_ptr, stream);  // stats only: published on the device
  if (!p.captured) p.inflight.fetch_add(1, std::memory_order_relaxed);
  cudaError_t err = cudaSuccess;
  if (p.numel > 0 && p.mode != kModeFullCopy) {
    if ((err = launch_stats_any(p, device_ptr, stream)) != cudaSuccess) return err;
    err = cudaMemcpyAsync(&p.h_stats->acc, p.d_partials + p.blocks, sizeof(DevAcc), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
    err = cudaMemcpyAsync(&p.h_stats->shift, p.d_shift, sizeof(double), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
  }
  if (p.mode != kModeSummary && p.nbytes > 0) {
    err = cudaMemcpyAsync(p.h_copy, device_ptr, static_cast<size_t>(p.nbytes), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaLaunchHostFunc(stream, on_host, &p);
}

// Hits of one value dtype, in batches (stream order keeps the batches in order).
static cudaError_t enqueue_fused_run(const FusedHit* hits, int n, cudaStream_t stream) {
  for (int at = 0; at < n; at += kFusedBatch) {
    FusedBatch b{};
    b.n = std::min(kFusedBatch, n - at);
    for (int i = 0; i < b.n; ++i) {
      const FusedHit& h = hits[at + i];
      b.site[i] = FusedSite{static_cast<const double*>(h.sum), static_cast<const double*>(h.sumsq), h.min, h.max,
                            static_cast<const long long*>(h.nan), static_cast<const long long*>(h.bad),
                            h.payload->numel, h.payload->d_head, h.payload->d_slots,
                            static_cast<unsigned long long>(h.payload->ring_capacity), h.payload->slot_id};
    }
    cudaError_t err = dispatch_dtype(
        hits[at].value_dtype,
        [&](auto tag) {
          publish_fused<typename decltype(tag)::type><<<1, 32, 0, stream>>>(b);
          return cudaGetLastError();
        },
        [] { return cudaErrorInvalidValue; });
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t enqueue_fused(const FusedHit* hits, int n, cudaStream_t stream) {
  int start = 0;
  for (int i = 1; i <= n; ++i) {
    if (i < n && hits[i].value_dtype == hits[start].value_dtype) continue;
    cudaError_t err = enqueue_fused_run(hits + start, i - start, stream);
    if (err != cudaSuccess) return err;
    start = i;
  }
  return cudaSuccess;
}

int64_t replays(const Payload& p) { return p.replays.load(); }

int64_t free_retired(cudaStream_t current) {
  if (g_retired.load(std::memory_order_relaxed) == nullptr) return 0;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current, &status) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures: not an error to leave behind
    return 0;
  }
  if (status != cudaStreamCaptureStatusNone) return 0;
  Payload* list = g_retired.exchange(nullptr, std::memory_order_acquire);
  if (list == nullptr) return 0;
  // A capture in another thread in global mode would forbid cudaFree here: relax, as prepare does.
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  int64_t freed = 0;
  while (list != nullptr) {
    Payload* p = list;
    list = p->next_retired;
    g_retired_count.fetch_sub(1);
    if (p->inflight.load(std::memory_order_acquire) > 0) {
      retire(p);  // an eager hit has not landed yet: try again at the next safe point
      continue;
    }
    destroy(p);
    ++freed;
  }
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  return freed;
}

Counts counts() {
  Counts c;
  c.live = g_live.load();
  c.retired = g_retired_count.load();
  c.ignored = g_ignored.load();
  return c;
}

}  // namespace cuda
}  // namespace dynstep

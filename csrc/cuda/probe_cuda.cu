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

constexpr int kThreads = 256;
constexpr int64_t kMaxRing = 1 << 16;  // slots of a stats-only payload's mapped ring

__device__ void block_reduce(DevAcc& mine, DevAcc* shared) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) dev_merge(shared[threadIdx.x], shared[threadIdx.x + step]);
    __syncthreads();
  }
  mine = shared[0];
}

template <typename T>
__device__ __forceinline__ double shift_of(const T* x, long long n) {
  double first = n > 0 ? to_double(x[0]) : 0.0;
  return isfinite(first) ? first : 0.0;
}

// Publish one hit's stats into the mapped ring (one thread).
__device__ void publish(const DevAcc& a, double shift, RingHeader* head, RingSlot* slots, unsigned long long capacity) {
  unsigned long long index = atomicAdd(&head->count, 1ULL);
  RingSlot* slot = slots + index % capacity;
  volatile unsigned long long* seq = &slot->seq;
  *seq = 0ULL;  // being written
  __threadfence_system();
  slot->acc = a;
  slot->shift = shift;
  slot->devseq = atomicAdd(&g_devseq, 1ULL);
  if ((a.nan || a.inf) && atomicCAS(&head->nonfinite_index1, 0ULL, index + 1) == 0ULL) {
    head->nonfinite_nan = a.nan;
    head->nonfinite_inf = a.inf;
    __threadfence_system();
    *reinterpret_cast<volatile unsigned int*>(&head->nonfinite_ready) = 1u;
  }
  __threadfence_system();
  *seq = index + 1;
}

// Stats-only hit of a small tensor (one block): reduce and publish, one kernel node.
template <typename T>
__global__ void stats_publish(const T* x, long long n, RingHeader* head, RingSlot* slots, unsigned long long capacity) {
  __shared__ DevAcc shared[kThreads];
  const double shift = shift_of(x, n);
  DevAcc a = dev_empty();
  for (long long i = threadIdx.x; i < n; i += blockDim.x) dev_add(a, to_double(x[i]), shift);
  block_reduce(a, shared);
  if (threadIdx.x == 0) publish(a, shift, head, slots, capacity);
}

// Pass 1: each block reduces a grid-stride slice into partials[blockIdx.x].
template <typename T>
__global__ void stats_partial(const T* x, long long n, DevAcc* partials, double* shift_out) {
  __shared__ DevAcc shared[kThreads];
  const double shift = shift_of(x, n);
  DevAcc a = dev_empty();
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    dev_add(a, to_double(x[i]), shift);
  }
  block_reduce(a, shared);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = a;
    if (blockIdx.x == 0) *shift_out = shift;
  }
}

// Pass 2: one block folds the partials into `out` (record mode: copied to the host next), or
// publishes them into the mapped ring (stats only: `head` set).
__global__ void stats_final(const DevAcc* partials, int blocks, DevAcc* out, const double* shift, RingHeader* head,
                            RingSlot* slots, unsigned long long capacity) {
  __shared__ DevAcc shared[kThreads];
  DevAcc a = dev_empty();
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) dev_merge(a, partials[i]);
  block_reduce(a, shared);
  if (threadIdx.x == 0) {
    if (head != nullptr) publish(a, *shift, head, slots, capacity);
    else *out = a;
  }
}

// -- fused summaries: the statistics are already reduced (by Inductor's kernels); fold and publish ---
constexpr int kFusedBatch = 16;  // hits per launch: the kernel's parameters stay far below 4 KiB

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
};

struct FusedBatch {
  FusedSite site[kFusedBatch];
  int n;
};

// One thread publishes the batch in order, so the device sequence numbers follow graph order.
template <typename T>
__global__ void publish_fused(FusedBatch b) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int i = 0; i < b.n; ++i) {
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
    publish(a, 0.0, s.head, s.slots, s.capacity);
  }
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
  bool nonfinite_taken = false;   // the header's first non-finite hit has been seen by the host
  std::atomic<int64_t> replays{0};
  std::atomic<int64_t> inflight{0};  // eager hits enqueued whose host callback has not run yet
  Payload* next_retired = nullptr;
};

// Trivially destructible, so still valid when a user-object destructor runs during process exit.
static std::atomic<Payload*> g_retired{nullptr};
static std::atomic<int64_t> g_live{0}, g_retired_count{0}, g_ignored{0};

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
  if ((st.nan || st.inf) && (s.actions & kNonFiniteFlag) && !s.nonfinite_seen) {
    s.nonfinite_seen = true;
    if (s.compare_message.empty())
      s.compare_message = "call " + std::to_string(call) + ": " + std::to_string(st.nan) + " NaN, " +
          std::to_string(st.inf) + " Inf";
  }
  if (!(s.actions & (kSummary | kRecord))) return;
  Entry& e = claim_slot(s);
  e.seq = Registry::get().next_seq();
  e.call = call;
  e.thread = static_cast<uint64_t>(pthread_self());
  e.stats = st;
  e.shape = p.shape;
  e.dtype = p.dtype;
  e.device = p.device;
  e.has_tensor = false;
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
  const T* data = static_cast<const T*>(x);
  const auto capacity = static_cast<unsigned long long>(p.ring_capacity);
  if (p.d_head != nullptr && p.blocks == 1) {  // stats only, small: one kernel node
    stats_publish<T><<<1, kThreads, 0, stream>>>(data, p.numel, p.d_head, p.d_slots, capacity);
    return cudaGetLastError();
  }
  stats_partial<T><<<p.blocks, kThreads, 0, stream>>>(data, p.numel, p.d_partials, p.d_shift);
  stats_final<<<1, kThreads, 0, stream>>>(p.d_partials, p.blocks, p.d_partials + p.blocks, p.d_shift, p.d_head,
                                          p.d_slots, capacity);
  return cudaGetLastError();
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
  if (sp->nonfinite_seen) return;
  sp->nonfinite_seen = true;
  if (sp->compare_message.empty())
    sp->compare_message = "CUDA hit " + std::to_string(h->nonfinite_index1 - 1) + " of this capture (its summary " +
        "was overwritten before it was read): " + std::to_string(h->nonfinite_nan) + " NaN, " +
        std::to_string(h->nonfinite_inf) + " Inf";
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
  if ((st.nan || st.inf) && (a & kNonFiniteFlag) && !s.nonfinite_seen) {
    s.nonfinite_seen = true;
    if (s.compare_message.empty())
      s.compare_message = "call " + std::to_string(call) + ": " + std::to_string(st.nan) + " NaN, " +
          std::to_string(st.inf) + " Inf";
  }
  if (!(a & (kSummary | kRecord))) return;
  Entry& e = claim_slot(s);
  e.seq = Registry::get().next_seq();
  e.call = call;
  e.thread = 0;
  e.stats = st;
  e.shape = p.shape;
  e.dtype = p.dtype;
  e.device = p.device;
  e.has_tensor = false;
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
  long long want = (numel + kThreads - 1) / kThreads;
  p->blocks = static_cast<int>(want < 1 ? 1 : (want > 1024 ? 1024 : want));
  if ((err = cudaGetDevice(&p->device)) != cudaSuccess) goto done;
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
                            static_cast<unsigned long long>(h.payload->ring_capacity)};
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

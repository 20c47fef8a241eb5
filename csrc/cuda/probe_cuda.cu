// CUDA side of the native probe: device stats in one pass, async D2H into pinned staging, and a
// host callback (cudaLaunchHostFunc) that runs the native action on the host copy.
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

#include "../probe_state.h"
#include "probe_cuda.h"

namespace dynstep {
namespace cuda {

// Partial stats as the device accumulates them (the Acc of probe_state.h, in device form).
struct DevAcc {
  double sum, sumsq, min, max, absmax;
  unsigned long long nan, inf, count;
};

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

__device__ void block_reduce(DevAcc& mine, DevAcc* shared) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step >>= 1) {
    if (threadIdx.x < step) dev_merge(shared[threadIdx.x], shared[threadIdx.x + step]);
    __syncthreads();
  }
  mine = shared[0];
}

// Pass 1: each block reduces a grid-stride slice into partials[blockIdx.x].
template <typename T>
__global__ void stats_partial(const T* x, long long n, DevAcc* partials, double* shift_out) {
  __shared__ DevAcc shared[kThreads];
  double first = to_double(x[0]);
  double shift = isfinite(first) ? first : 0.0;
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

// Pass 2: one block folds the partials into `out`, the few bytes that cross the bus.
__global__ void stats_final(const DevAcc* partials, int blocks, DevAcc* out) {
  __shared__ DevAcc shared[kThreads];
  DevAcc a = dev_empty();
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) dev_merge(a, partials[i]);
  block_reduce(a, shared);
  if (threadIdx.x == 0) *out = a;
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

static Stats finish(const HostStats& h) {
  Acc a;
  a.shift = h.shift;
  a.sum = h.acc.sum; a.sumsq = h.acc.sumsq;
  a.min = h.acc.min; a.max = h.acc.max; a.absmax = h.acc.absmax;
  a.nan = static_cast<int64_t>(h.acc.nan);
  a.inf = static_cast<int64_t>(h.acc.inf);
  a.count = static_cast<int64_t>(h.acc.count);
  return a.finish();
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
  switch (p.dtype) {
    case kDouble: return host_stats_typed<double>(p.h_copy, p.numel);
    case kFloat: return host_stats_typed<float>(p.h_copy, p.numel);
    case kHalf: return host_stats_typed<__half>(p.h_copy, p.numel);
    case kBFloat16: return host_stats_typed<__nv_bfloat16>(p.h_copy, p.numel);
    case kLong: return host_stats_typed<long long>(p.h_copy, p.numel);
    case kInt: return host_stats_typed<int>(p.h_copy, p.numel);
    case kShort: return host_stats_typed<short>(p.h_copy, p.numel);
    case kChar: return host_stats_typed<signed char>(p.h_copy, p.numel);
    case kByte: return host_stats_typed<unsigned char>(p.h_copy, p.numel);
    case kBool: return host_stats_typed<bool>(p.h_copy, p.numel);
    default: return Stats{};
  }
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
  switch (p.dtype) {
    case kDouble: return host_compare_typed<double>(p, s, call);
    case kFloat: return host_compare_typed<float>(p, s, call);
    case kHalf: return host_compare_typed<__half>(p, s, call);
    case kBFloat16: return host_compare_typed<__nv_bfloat16>(p, s, call);
    case kLong: return host_compare_typed<long long>(p, s, call);
    case kInt: return host_compare_typed<int>(p, s, call);
    case kShort: return host_compare_typed<short>(p, s, call);
    case kChar: return host_compare_typed<signed char>(p, s, call);
    case kByte: return host_compare_typed<unsigned char>(p, s, call);
    case kBool: return host_compare_typed<bool>(p, s, call);
    default: return;
  }
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
  stats_partial<T><<<p.blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), p.numel, p.d_partials, p.d_shift);
  stats_final<<<1, kThreads, 0, stream>>>(p.d_partials, p.blocks, p.d_partials + p.blocks);
  return cudaGetLastError();
}

static cudaError_t launch_stats_any(const Payload& p, const void* x, cudaStream_t stream) {
  switch (p.dtype) {
    case kDouble: return launch_stats<double>(p, x, stream);
    case kFloat: return launch_stats<float>(p, x, stream);
    case kHalf: return launch_stats<__half>(p, x, stream);
    case kBFloat16: return launch_stats<__nv_bfloat16>(p, x, stream);
    case kLong: return launch_stats<long long>(p, x, stream);
    case kInt: return launch_stats<int>(p, x, stream);
    case kShort: return launch_stats<short>(p, x, stream);
    case kChar: return launch_stats<signed char>(p, x, stream);
    case kByte: return launch_stats<unsigned char>(p, x, stream);
    case kBool: return launch_stats<bool>(p, x, stream);
    default: return cudaErrorInvalidValue;
  }
}

static void destroy(Payload* p) {
  int previous = -1;
  if (cudaGetDevice(&previous) == cudaSuccess && previous != p->device) cudaSetDevice(p->device);
  if (p->d_partials) cudaFree(p->d_partials);
  if (p->d_shift) cudaFree(p->d_shift);
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
                    int mode, cudaStream_t capturing_stream, std::shared_ptr<Payload>* out) {
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
  if ((err = cudaMalloc(&p->d_partials, sizeof(DevAcc) * (p->blocks + 1))) != cudaSuccess) goto done;
  if ((err = cudaMalloc(&p->d_shift, sizeof(double))) != cudaSuccess) goto done;
  if ((err = cudaHostAlloc(reinterpret_cast<void**>(&p->h_stats), sizeof(HostStats), cudaHostAllocDefault)) != cudaSuccess)
    goto done;
  if (mode != kModeSummary && p->nbytes > 0 &&
      (err = cudaHostAlloc(&p->h_copy, static_cast<size_t>(p->nbytes), cudaHostAllocDefault)) != cudaSuccess)
    goto done;
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

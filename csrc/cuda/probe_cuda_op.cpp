// CUDA kernel for dynstep::probe: the torch glue around probe_cuda.cu (built only against a
// CUDA-enabled torch, into the same extension as probe_cpu.cpp so both share one site registry).
//
// Each (site, shape, dtype, mode, capture id, device) gets one Payload: device scratch, pinned
// staging and the host callback's argument, allocated on the first hit and reused by every later
// hit and every replay. Who owns it (see probe_cuda.h):
// - eager hits (capture id 0) share one payload per key, owned here until the site is closed;
// - a payload made while a stream captures is owned by that capture's graph (a CUDA user object,
//   carried into its graph execs); this table only watches it (weak_ptr), so it is freed when
//   the graph is destroyed, whether or not the site was closed.
// Closing a site (close_site / remove_site) drops this table's references; a graph that captured
// the site may still replay afterwards: its host callbacks find the site closed and do nothing.
// Stats-only hits reach the site's ring when harvested (drain, site_state, cuda_replays); record
// and compare hits through a host callback. Payloads nobody holds are freed at the next safe point (collect_cuda: a probe call, a
// registration, a close, a drain, cuda_payloads) from a thread whose stream is not capturing.
#include <torch/extension.h>

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <iterator>
#include <map>
#include <optional>
#include <tuple>

#include "../probe_state.h"
#include "probe_cuda.h"

namespace dynstep {

void python_fallback(const at::Tensor& x, int64_t site);  // probe_cpu.cpp
void publish_python(const std::vector<at::Tensor>& stats, at::IntArrayRef sites, c10::SymIntArrayRef shapes,
                    at::IntArrayRef ranks, at::IntArrayRef dtypes);  // probe_publish.cpp
bool native_dtype_supported(at::ScalarType t);            // probe_cpu.cpp
void collect_cuda();

namespace {

// (site, shape, dtype, mode, capture id or 0 for eager hits, device): a payload's buffers live on one device.
using Key = std::tuple<int64_t, std::vector<int64_t>, int, int, unsigned long long, int>;

// Owned for eager payloads, watched for captured ones (their graph owns them).
struct Held {
  std::shared_ptr<cuda::Payload> owned;
  std::weak_ptr<cuda::Payload> watched;
  std::shared_ptr<cuda::Payload> get() const { return owned ? owned : watched.lock(); }
};

// Leaked on purpose (as the Registry): nothing is torn down, or freed, during process exit.
std::mutex& table_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::map<Key, Held>& table() {
  static auto* t = new std::map<Key, Held>();
  return *t;
}

// What a payload is made for: a value's shape, dtype and device, or a tensor's.
struct Value {
  std::vector<int64_t> shape;
  int dtype;
  int64_t numel, element_size;
  int device;
};

Value value_of(const at::Tensor& x) {
  return Value{x.sizes().vec(), static_cast<int>(x.scalar_type()), x.numel(), static_cast<int64_t>(x.element_size()),
               static_cast<int>(x.get_device())};
}

std::shared_ptr<cuda::Payload> payload_for(const std::shared_ptr<SiteState>& s, const Value& v, int mode,
                                           cudaStream_t stream, const cuda::Capture& capture) {
  Key key{s->id, v.shape, v.dtype, mode, capture.active ? capture.id : 0, v.device};
  std::lock_guard<std::mutex> g(table_mu());
  if (s->closed.load()) return nullptr;  // closed since this hit looked it up: keep nothing for it
  auto it = table().find(key);
  if (it != table().end()) {
    if (auto p = it->second.get()) return p;
  }
  std::shared_ptr<cuda::Payload> p;
  C10_CUDA_CHECK(cuda::prepare(s->id, v.dtype, v.shape.data(), static_cast<int>(v.shape.size()), v.numel,
                               v.element_size, mode, s->capacity, capture.active ? stream : nullptr, &p));
  table()[key] = capture.active ? Held{nullptr, p} : Held{p, {}};
  return p;
}

void probe_cuda(const at::Tensor& x_in, int64_t site) {
  auto sp = Registry::get().find(site);
  if (sp && sp->closed.load()) return;
  if (!sp || !native_dtype_supported(x_in.scalar_type()) || x_in.layout() != at::kStrided) {
    python_fallback(x_in, site);
    return;
  }
  SiteState& s = *sp;
  const int64_t a = s.actions;
  c10::cuda::CUDAGuard guard(x_in.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cuda::Capture capture;
  C10_CUDA_CHECK(cuda::capture_of(stream, &capture));
  const bool capturing = capture.active;
  if (!capturing) collect_cuda();
  if ((a & kWhenCapture) && !capturing) return;
  if (!capturing && (a & (kPrint | kNan | kPythonHit | kCompare))) {
    python_fallback(x_in, site);  // eager: the Python kernel does print/nan/compare exactly
    return;
  }
  if (a & (kPrint | kPythonHit)) {
    TORCH_WARN_ONCE("dynstep: probe site ", site, ": print and pause actions do not run at CUDA "
                    "graph replay (host callbacks never enter Python); record, summary, compare, the "
                    "nan check (through the non-finite flag, read after the replay) and the flag do");
  }
  TORCH_CHECK_VALUE(!(a & kRejectNonContig) || x_in.is_contiguous(), "dynstep probe: input of shape ",
                    x_in.sizes(), " is not contiguous; pass non_contiguous=\"copy\"");
  // non_contiguous="copy": under capture this copy lives in the graph's memory pool.
  at::Tensor x = x_in.contiguous();
  if (!(a & (kSummary | kRecord | kNonFiniteFlag | kCompare))) {
    s.calls.fetch_add(1);
    return;
  }
  // compare needs the values on the host: it rides on the record copy
  const int mode = (a & (kRecord | kCompare)) ? cuda::kModeRecord : cuda::kModeSummary;
  std::shared_ptr<cuda::Payload> p = payload_for(sp, value_of(x), mode, stream, capture);
  if (p) C10_CUDA_CHECK(cuda::enqueue(*p, x.const_data_ptr(), stream));
}

int64_t parts_of(int64_t code) { return (code == 5 || code == 6 || code == 7 || code == 15) ? 6 : 4; }

int64_t element_size_of(int64_t code) {
  switch (code) {
    case 7: case 4: return 8;
    case 6: case 3: return 4;
    case 5: case 15: case 2: return 2;
    default: return 1;
  }
}

// A site's statistics as the device kernel reads them (backends/stats_pass.py makes the sums float64 and
// the counts int64 on CUDA; min and max keep the value's dtype).
cuda::FusedHit fused_hit(cuda::Payload* p, const at::Tensor* parts, int64_t n) {
  TORCH_CHECK(parts[0].scalar_type() == at::kDouble && parts[1].scalar_type() == at::kDouble &&
                  parts[2].scalar_type() == parts[3].scalar_type() &&
                  (n == 4 || (parts[4].scalar_type() == at::kLong && parts[5].scalar_type() == at::kLong)),
              "dynstep::publish on CUDA: expected float64 sums, min/max of one dtype and int64 counts");
  cuda::FusedHit h;
  h.payload = p;
  h.sum = parts[0].const_data_ptr();
  h.sumsq = parts[1].const_data_ptr();
  h.min = parts[2].const_data_ptr();
  h.max = parts[3].const_data_ptr();
  h.nan = n == 6 ? parts[4].const_data_ptr() : nullptr;
  h.bad = n == 6 ? parts[5].const_data_ptr() : nullptr;
  h.value_dtype = static_cast<int>(parts[2].scalar_type());
  return h;
}

// dynstep::publish on CUDA: the statistics Inductor's kernels left on the device, published into each
// site's mapped ring by a small kernel (capturable; under CUDA graphs the addresses are the graph's).
void publish_cuda(at::TensorList stats, at::IntArrayRef sites, c10::SymIntArrayRef shapes, at::IntArrayRef ranks,
                  at::IntArrayRef dtypes) {
  c10::cuda::CUDAGuard guard(stats[0].device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cuda::Capture capture;
  C10_CUDA_CHECK(cuda::capture_of(stream, &capture));
  if (!capture.active) collect_cuda();
  std::vector<std::shared_ptr<cuda::Payload>> held;  // alive until the launch is enqueued
  std::vector<cuda::FusedHit> hits;
  size_t part = 0, dim = 0;
  for (size_t i = 0; i < sites.size(); ++i) {
    Value v{{}, static_cast<int>(dtypes[i]), 1, element_size_of(dtypes[i]), static_cast<int>(stats[0].get_device())};
    for (int64_t k = 0; k < ranks[i]; ++k) v.shape.push_back(shapes[dim + k].expect_int());
    for (int64_t d : v.shape) v.numel *= d;
    dim += static_cast<size_t>(ranks[i]);
    const size_t first = part;
    part += static_cast<size_t>(parts_of(dtypes[i]));
    auto sp = Registry::get().find(sites[i]);
    if (!sp || sp->closed.load()) continue;
    if (!capture.active && (sp->actions.load() & (kPrint | kNan | kPythonHit | kCompare)))
      return publish_python(stats.vec(), sites, shapes, ranks, dtypes);  // eager: Python takes the batch
    std::shared_ptr<cuda::Payload> p = payload_for(sp, v, cuda::kModeFused, stream, capture);
    if (!p) continue;
    hits.push_back(fused_hit(p.get(), stats.data() + first, parts_of(dtypes[i])));
    held.push_back(std::move(p));
  }
  if (!hits.empty()) C10_CUDA_CHECK(cuda::enqueue_fused(hits.data(), static_cast<int>(hits.size()), stream));
}

}  // namespace

void collect_cuda() {
  if (cuda::counts().retired == 0) return;  // also keeps a CPU-only process from touching CUDA
  // Freeing synchronizes the device: never while holding the GIL (drain, close come from Python).
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
  {
    std::lock_guard<std::mutex> g(table_mu());  // forget payloads whose graphs are gone
    for (auto it = table().begin(); it != table().end();)
      it = (!it->second.owned && it->second.watched.expired()) ? table().erase(it) : std::next(it);
  }
  cuda::free_retired(c10::cuda::getCurrentCUDAStream());
}

void release_cuda_site(int64_t site) {
  std::vector<std::shared_ptr<cuda::Payload>> dropped;  // released outside the lock
  {
    std::lock_guard<std::mutex> g(table_mu());
    for (auto it = table().begin(); it != table().end();) {
      if (std::get<0>(it->first) == site) {
        if (it->second.owned) dropped.push_back(std::move(it->second.owned));
        it = table().erase(it);
      } else {
        ++it;
      }
    }
  }
  dropped.clear();
  collect_cuda();
}

void harvest_cuda() { cuda::harvest(); }

std::tuple<int64_t, int64_t> harvest_cuda_counted() {
  const int64_t taken = cuda::harvest();
  return {taken, cuda::harvested_nonfinite()};
}

int64_t cuda_replays(int64_t site) {
  cuda::harvest();
  std::lock_guard<std::mutex> g(table_mu());
  int64_t n = 0;
  for (auto& kv : table())
    if (std::get<0>(kv.first) == site)
      if (auto p = kv.second.get()) n += cuda::replays(*p);
  return n;
}

std::tuple<int64_t, int64_t, int64_t> cuda_payloads() {
  collect_cuda();
  cuda::Counts c = cuda::counts();
  return {c.live, c.retired, c.ignored};
}

}  // namespace dynstep

TORCH_LIBRARY_IMPL(dynstep, CUDA, m) {
  m.impl("probe", &dynstep::probe_cuda);
  m.impl("publish", &dynstep::publish_cuda);
}

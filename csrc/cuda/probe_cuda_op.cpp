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

std::shared_ptr<cuda::Payload> payload_for(const std::shared_ptr<SiteState>& s, const at::Tensor& x, int mode,
                                           cudaStream_t stream, const cuda::Capture& capture) {
  Key key{s->id, x.sizes().vec(), static_cast<int>(x.scalar_type()), mode, capture.active ? capture.id : 0,
          static_cast<int>(x.get_device())};
  std::lock_guard<std::mutex> g(table_mu());
  if (s->closed.load()) return nullptr;  // closed since this hit looked it up: keep nothing for it
  auto it = table().find(key);
  if (it != table().end()) {
    if (auto p = it->second.get()) return p;
  }
  std::shared_ptr<cuda::Payload> p;
  auto shape = x.sizes().vec();
  C10_CUDA_CHECK(cuda::prepare(s->id, static_cast<int>(x.scalar_type()), shape.data(), static_cast<int>(shape.size()),
                               x.numel(), x.element_size(), mode, s->capacity, capture.active ? stream : nullptr,
                               &p));
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
  std::shared_ptr<cuda::Payload> p = payload_for(sp, x, mode, stream, capture);
  if (p) C10_CUDA_CHECK(cuda::enqueue(*p, x.const_data_ptr(), stream));
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

TORCH_LIBRARY_IMPL(dynstep, CUDA, m) { m.impl("probe", &dynstep::probe_cuda); }

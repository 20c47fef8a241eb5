// CUDA kernel for dynstep::probe: the torch glue around probe_cuda.cu (built only against a
// CUDA-enabled torch, into the same extension as probe_cpu.cpp so both share one site registry).
//
// Each (site, shape, dtype, capture) gets one Payload: its device scratch and pinned staging are
// allocated on the first hit and reused by every later hit and every replay of the captured graph.
// Payloads live until the site is closed (TensorProbe.close: only once no graph that captured
// them can replay) — a captured graph holds raw pointers into them.
#include <torch/extension.h>

#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <tuple>

#include "../probe_state.h"
#include "probe_cuda.h"

namespace dynstep {

void python_fallback(const at::Tensor& x, int64_t site);  // probe_cpu.cpp
bool native_dtype_supported(at::ScalarType t);            // probe_cpu.cpp

namespace {

using Key = std::tuple<int64_t, std::vector<int64_t>, int, int, unsigned long long>;
std::mutex g_mu;
std::map<Key, cuda::Payload*> g_payloads;

cuda::Payload* payload_for(const std::shared_ptr<SiteState>& s, const at::Tensor& x, int mode,
                           unsigned long long capture_id) {
  Key key{s->id, x.sizes().vec(), static_cast<int>(x.scalar_type()), mode, capture_id};
  std::lock_guard<std::mutex> g(g_mu);
  auto it = g_payloads.find(key);
  if (it != g_payloads.end()) return it->second;
  cuda::Payload* p = nullptr;
  auto shape = x.sizes().vec();
  C10_CUDA_CHECK(cuda::prepare(s, static_cast<int>(x.scalar_type()), shape.data(), static_cast<int>(shape.size()),
                               x.numel(), x.element_size(), mode, &p));
  g_payloads[key] = p;
  return p;
}

void probe_cuda(const at::Tensor& x_in, int64_t site) {
  auto sp = Registry::get().find(site);
  if (!sp || !native_dtype_supported(x_in.scalar_type()) || x_in.layout() != at::kStrided) {
    python_fallback(x_in, site);
    return;
  }
  SiteState& s = *sp;
  const int64_t a = s.actions;
  c10::cuda::CUDAGuard guard(x_in.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture_id));
  const bool capturing = status == cudaStreamCaptureStatusActive;
  if ((a & kWhenCapture) && !capturing) return;
  if (!capturing && (a & (kPrint | kNan | kPythonHit | kCompare))) {
    python_fallback(x_in, site);  // eager: the Python kernel does print/nan/compare exactly
    return;
  }
  if (a & (kPrint | kNan | kPythonHit)) {
    TORCH_WARN_ONCE("dynstep: probe site ", site, ": print, nan and pause actions do not run at CUDA "
                    "graph replay (host callbacks never enter Python); record, summary, compare and "
                    "the non-finite flag do");
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
  cuda::Payload* p = payload_for(sp, x, mode, capturing ? capture_id : 0);
  C10_CUDA_CHECK(cuda::enqueue(p, x.const_data_ptr(), stream));
}

}  // namespace

void release_cuda_site(int64_t site) {
  std::lock_guard<std::mutex> g(g_mu);
  for (auto it = g_payloads.begin(); it != g_payloads.end();) {
    if (std::get<0>(it->first) == site) {
      cuda::destroy(it->second);
      it = g_payloads.erase(it);
    } else {
      ++it;
    }
  }
}

int64_t cuda_replays(int64_t site) {
  std::lock_guard<std::mutex> g(g_mu);
  int64_t n = 0;
  for (auto& kv : g_payloads)
    if (std::get<0>(kv.first) == site) n += cuda::replays(kv.second);
  return n;
}

}  // namespace dynstep

TORCH_LIBRARY_IMPL(dynstep, CUDA, m) { m.impl("probe", &dynstep::probe_cuda); }

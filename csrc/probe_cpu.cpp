// Native CPU kernel for dynstep::probe(Tensor x, int site) -> () and the small pybind11 surface
// Python uses to configure sites and drain rings (typed in dynstep/_native_ext.pyi).
//
// The op schema lives in dynstep/ops/schema.py and its Python kernel in dynstep/probe/runtime.py; this file only adds a CPU kernel
// that takes precedence over the CompositeExplicitAutograd Python kernel.
//
// The hot path never enters Python: it computes the stats in one pass, writes them (and for
// `record` a copy of the data) into the site's preallocated ring, and updates the sticky compare
// and non-finite flags. Python drains rings lazily (dynstep/probe/rings.py: drain_native) when a
// session or TensorProbe is read. Python is entered from the kernel only when an action needs it:
// print (every `every`-th hit), a non-finite value with the `nan` action, a site flagged
// kPythonHit, or a site/dtype the native side does not know (full Python fallback).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <c10/util/SmallVector.h>
#include <pthread.h>

#include <cstdio>
#include <sstream>

#include "probe_kernels.h"
#include "probe_state.h"

namespace dynstep {

void collect_native();  // below: frees CUDA payloads nobody holds (a no-op in a CPU build)
void harvest_native();  // below: stats-only CUDA hits published on the device -> site rings

namespace {

namespace py = pybind11;
using cpu::compare;
using cpu::py_tuple;
using cpu::stats_and_copy;

// Leaked on purpose: destroying a Python object after interpreter shutdown would crash.
py::object* g_on_hit = nullptr;       // runtime.native_hit(x, site, call, stats)
py::object* g_fallback = nullptr;     // runtime.on_probe(x, site): the full Python kernel

const char* dtype_name(at::ScalarType t) { return dynstep::dtype_name(static_cast<int>(t)); }

bool native_dtype(at::ScalarType t) {  // the dtypes dtype_name knows (probe_state.h)
  switch (t) {
    case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
    case at::kHalf: case at::kFloat: case at::kDouble: case at::kBool: case at::kBFloat16:
      return true;
    default:
      return false;
  }
}

void check_against_expected(const at::Tensor& x, SiteState& s, int64_t call) {
  std::string header = header_mismatch(*s.compare, x.sizes().vec(), static_cast<int>(x.scalar_type()), call);
  if (!header.empty()) {
    s.compare_failed = true;
    s.compare_message = std::move(header);
    return;
  }
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, x.scalar_type(), "dynstep_compare",
                             [&] { compare<scalar_t>(x, s, call); });
}

py::tuple stats_tuple(const Stats& st) {  // needs the GIL
  return py::make_tuple(st.min, st.max, st.mean, st.std, st.absmax, st.nan, st.inf, st.count);
}

template <typename T>
py::object to_py(T&& v) { return py::cast(std::forward<T>(v)); }
py::object to_py(Stats& st) { return stats_tuple(st); }

// The kernel runs without the GIL (torch.ops releases it): take it before touching any object.
template <typename... Args>
void call_python(py::object* fn, Args&&... args) {
  py::gil_scoped_acquire gil;
  (*fn)(to_py(std::forward<Args>(args))...);
}

// Per-site bound on the copies kept for deferred summaries (ring capacity x bytes per hit): with
// the default summary ring of 1024 hits, tensors up to 1 KiB have their stats computed at drain.
constexpr int64_t kDeferredSummaryBytes = int64_t(1) << 20;

void probe_cpu(const at::Tensor& x, int64_t site) {
  auto sp = Registry::get().find_cached(site);
  const bool strided = x.layout() == at::kStrided && !x.is_quantized();
  if (!sp || !strided || !native_dtype(x.scalar_type())) {
    TORCH_CHECK(g_fallback, "dynstep native probe: Python fallback not installed");
    call_python(g_fallback, x, site);
    return;
  }
  SiteState& s = *sp;
  const int64_t a = s.actions;
  if (a & kWhenCapture) return;  // a CPU tensor is never part of a CUDA stream capture
  if (s.closed.load(std::memory_order_relaxed)) return;
  TORCH_CHECK_VALUE(!(a & kRejectNonContig) || x.is_contiguous(),
                    "dynstep probe: input of shape ", py_tuple(x.sizes()), " with strides ",
                    py_tuple(x.strides()), " is not contiguous; pass non_contiguous=\"copy\" to "
                    "probe a contiguous copy, or probe x.contiguous() yourself");
  const int64_t call = s.calls.fetch_add(1);
  if ((a & ~(kRejectNonContig | kWhenCapture)) == 0) return;

  bool python_hit = (a & kPythonHit) || ((a & kPrint) && call % s.every == 0);
  const bool keep = (a & (kSummary | kRecord)) != 0;
  const int64_t nbytes = x.numel() * static_cast<int64_t>(x.element_size());
  Stats st;
  {
    std::lock_guard<std::mutex> g(s.mu);
    uint8_t* dst = nullptr;
    Entry* e = nullptr;
    bool summary_copy = false;
    const bool decides_now = (a & (kNan | kCompare | kNonFiniteFlag)) != 0;
    if (keep && !python_hit) {
      e = &claim_slot(s);
      if ((a & kRecord) && nbytes > 0) {
        if (Registry::get().make_room(&s, nbytes)) {
          e->data.resize(static_cast<size_t>(nbytes));  // keeps capacity: no allocation after warm-up
          dst = e->data.data();
        } else {
          ++s.dropped_memory;
        }
      } else if (!(a & kRecord) && !decides_now && nbytes > 0 && nbytes * s.capacity <= kDeferredSummaryBytes) {
        // A summary of a small tensor: a copy now and the stats when the ring is read, as for a
        // record (a copy of n bytes costs a fraction of a stats pass). Never handed out as a
        // tensor and bounded by the ring: at most kDeferredSummaryBytes per site.
        e->data.resize(static_cast<size_t>(nbytes));
        dst = e->data.data();
        summary_copy = true;
      }
    }
    // A record-only hit is a plain copy; its stats are computed from the copy when Python
    // drains the ring, off the model's path. Anything that decides at hit time needs them now.
    const bool lazy = dst != nullptr && !python_hit && !decides_now;
    if (x.numel() > 0) {
      AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, x.scalar_type(), "dynstep_probe", [&] {
        if (lazy) {
          cpu::copy_only<scalar_t>(x, dst);
        } else {
          st = stats_and_copy<scalar_t>(x, dst);
        }
      });
    }
    if ((a & kNan) && (st.nan || st.inf)) python_hit = true;
    if (e) {
      if (python_hit) {  // Python handles this hit (nan raise/warn): undo the slot
        Registry::get().release(*e);
        s.head = (s.head - 1 + s.capacity) % s.capacity;
        --s.size;
      } else {
        fill_hit(*e, call, static_cast<uint64_t>(pthread_self()), st, x.sizes(), static_cast<int>(x.scalar_type()), -1);
        const bool record_copy = dst != nullptr && !summary_copy;
        e->has_tensor = record_copy || ((a & kRecord) && nbytes == 0);
        e->stats_pending = lazy && x.numel() > 0;
        e->nbytes = record_copy ? nbytes : 0;
        if (record_copy) Registry::get().account(nbytes);
      }
    }
    if ((a & kCompare) && s.compare && !s.compare_failed) check_against_expected(x, s, call);
    if ((a & kNonFiniteFlag) && (st.nan || st.inf)) flag_nonfinite(s, call, st.nan, st.inf);
  }
  if (python_hit) call_python(g_on_hit, x, site, call, st);
}

// ---- the direct call Inductor's Python wrapper makes (dynstep/probe/fastpath.py) ------------------
//
// `torch.ops.dynstep.probe.default(buf, site)` from Python parses its arguments against the
// schema, boxes them, computes the dispatch key set and releases the GIL: about 1.5 µs here
// (bench/probe_overhead.py: calls), several times what the kernel does on a small tensor. Inductor's generated wrapper calls this
// instead. It goes through the dispatcher only when something above the CPU kernel could act:
// a non-CPU or non-strided tensor (the CUDA kernel), a Python tensor subclass or fake tensor, or
// an active TorchDispatchMode. It shows up in torch.profiler as dynstep::probe, like the op.

bool direct_ok(const at::Tensor& x) {
  return x.device().is_cpu() && x.layout() == at::kStrided &&
         !x.key_set().has(c10::DispatchKey::Python) &&
         !c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python);
}

// Large tensors: release the GIL for the pass over the data, as torch.ops does for every call.
constexpr int64_t kReleaseGilBytes = int64_t(1) << 16;

void probe_dispatch(const at::Tensor& x, int64_t site) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dynstep::probe", "")
                       .typed<void(const at::Tensor&, int64_t)>();
  py::gil_scoped_release no_gil;
  op.call(x, site);
}

void probe_direct(const at::Tensor& x, int64_t site) {
  if (!direct_ok(x)) {
    probe_dispatch(x, site);
    return;
  }
  RECORD_FUNCTION("dynstep::probe", std::vector<c10::IValue>({x, site}));
  if (x.numel() * static_cast<int64_t>(x.element_size()) >= kReleaseGilBytes) {
    py::gil_scoped_release no_gil;
    probe_cpu(x, site);
  } else {
    probe_cpu(x, site);
  }
}

// A METH_FASTCALL function rather than a pybind11 def: no overload resolution or argument
// casters on the hot path (as a pybind11 def, the call measured twice as long on a small tensor). Errors reach
// Python as torch.ops would raise them (torch/csrc/Exceptions.h: HANDLE_TH_ERRORS).
PyObject* probe_fastcall(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2 || !THPVariable_Check(args[0]) || !PyLong_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "dynstep_native.probe(x: Tensor, site: int) takes a tensor and an int");
    return nullptr;
  }
  const int64_t site = PyLong_AsLongLong(args[1]);
  if (site == -1 && PyErr_Occurred()) return nullptr;
  probe_direct(THPVariable_Unpack(args[0]), site);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_probe_def = {"probe", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(probe_fastcall)),
                           METH_FASTCALL,
                           "probe(x, site): dynstep::probe without the Python->dispatcher path "
                           "(Inductor's Python wrapper calls this through dynstep.fastpath)"};

// ---- the pybind11 surface (dynstep/_native_ext.pyi) ----------------------------------------

void register_site(int64_t site, int64_t actions, int64_t capacity, int64_t every) {
  Registry::get().add(site, actions, capacity, every);
  collect_native();
}

void set_compare(int64_t site, const at::Tensor& expected, double rtol, double atol, bool equal_nan) {
  auto s = Registry::get().find(site);
  TORCH_CHECK(s, "dynstep: site ", site, " is not registered natively");
  auto c = std::make_unique<Compare>();
  at::Tensor e = expected.detach().to(at::kCPU).contiguous();
  at::Tensor d = e.to(at::kDouble);
  c->expected.assign(d.const_data_ptr<double>(), d.const_data_ptr<double>() + d.numel());
  c->shape = e.sizes().vec();
  c->dtype = static_cast<int>(e.scalar_type());
  c->rtol = rtol; c->atol = atol; c->equal_nan = equal_nan;
  std::lock_guard<std::mutex> g(s->mu);
  s->compare = std::move(c);
}

py::tuple site_state(int64_t site) {
  harvest_native();
  auto s = Registry::get().find(site);
  TORCH_CHECK(s, "dynstep: site ", site, " is not registered natively");
  std::lock_guard<std::mutex> g(s->mu);
  return py::make_tuple(s->calls.load(), s->nonfinite_seen, s->compare_failed, s->compare_message,
                        s->size, s->dropped_ring, s->dropped_memory, s->nonfinite_call, s->nonfinite_nan,
                        s->nonfinite_inf);
}

void reset_flags(int64_t site) {
  auto s = Registry::get().find(site);
  if (!s) return;
  std::lock_guard<std::mutex> g(s->mu);
  s->nonfinite_seen = s->compare_failed = false;
  s->nonfinite_call = -1;
  s->nonfinite_nan = s->nonfinite_inf = 0;
  s->compare_message.clear();
}

// Entries of one site (or all with site < 0), oldest first, and the drop counts since the last
// drain: ([(site, seq, call, thread, stats, shape, dtype, tensor|None, device)], {site: (ring, memory)}).
py::tuple drain(int64_t only) {
  harvest_native();
  collect_native();
  py::list out;
  py::dict dropped;
  for (auto& sp : Registry::get().all()) {
    if (only >= 0 && sp->id != only) continue;
    SiteState& s = *sp;
    std::lock_guard<std::mutex> g(s.mu);
    for (int64_t k = 0; k < s.size; ++k) {
      Entry& e = s.ring[static_cast<size_t>((s.head - s.size + k + 2 * s.capacity) % s.capacity)];
      py::object t = py::none();
      const auto options = at::TensorOptions().dtype(static_cast<at::ScalarType>(e.dtype));
      if (e.stats_pending) {  // a record-only hit or a small summary: its stats, from the copy taken at the hit
        at::Tensor held = at::from_blob(e.data.data(), e.shape, options);
        AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, held.scalar_type(), "dynstep_drain",
                                   [&] { e.stats = stats_and_copy<scalar_t>(held, nullptr); });
        e.stats_pending = false;
      }
      if (e.has_tensor) {
        at::Tensor copy = at::empty(e.shape, options);
        if (e.nbytes) std::memcpy(copy.mutable_data_ptr(), e.data.data(), static_cast<size_t>(e.nbytes));
        t = py::cast(copy);
        Registry::get().account(-e.nbytes);
        e.has_tensor = false;
        e.nbytes = 0;
      }
      out.append(py::make_tuple(s.id, e.seq, e.call, e.thread, stats_tuple(e.stats), py::tuple(py::cast(e.shape)),
                                dtype_name(static_cast<at::ScalarType>(e.dtype)), t,
                                e.device < 0 ? std::string("cpu") : "cuda:" + std::to_string(e.device)));
    }
    s.size = 0;
    if (s.dropped_ring || s.dropped_memory) {
      dropped[py::int_(s.id)] = py::make_tuple(s.dropped_ring, s.dropped_memory);
      s.dropped_ring = s.dropped_memory = 0;
    }
  }
  return py::make_tuple(out, dropped);
}

py::tuple stats_of(const at::Tensor& x) {
  TORCH_CHECK(native_dtype(x.scalar_type()), "dynstep: dtype ", x.scalar_type(), " not supported natively");
  Stats st;
  if (x.numel() > 0) {
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, x.scalar_type(), "dynstep_stats",
                               [&] { st = stats_and_copy<scalar_t>(x, nullptr); });
  }
  return stats_tuple(st);
}

}  // namespace

// Used by the CUDA glue (csrc/cuda/probe_cuda_op.cpp) for hits it hands to Python.
void python_fallback(const at::Tensor& x, int64_t site) {
  TORCH_CHECK(g_fallback, "dynstep native probe: Python fallback not installed");
  call_python(g_fallback, x, site);
}

bool native_dtype_supported(at::ScalarType t) { return native_dtype(t); }

#ifdef DYNSTEP_WITH_CUDA
// csrc/cuda/probe_cuda_op.cpp: CUDA payloads of a site, and freeing those nobody holds any more.
void release_cuda_site(int64_t site);
void collect_cuda();
void harvest_cuda();
std::tuple<int64_t, int64_t> harvest_cuda_counted();
int64_t cuda_replays(int64_t site);
std::tuple<int64_t, int64_t, int64_t> cuda_payloads();
#endif

void harvest_native() {
#ifdef DYNSTEP_WITH_CUDA
  harvest_cuda();
#endif
}

// Safe points for freeing CUDA payloads (registration, close, drain); nothing in a CPU build.
void collect_native() {
#ifdef DYNSTEP_WITH_CUDA
  collect_cuda();
#endif
}

void close_native(int64_t site) {
  Registry::get().close(site);  // first: hits and replays from here on are ignored
#ifdef DYNSTEP_WITH_CUDA
  release_cuda_site(site);
#endif
}

void remove_native(int64_t site) {
  Registry::get().remove(site);
#ifdef DYNSTEP_WITH_CUDA
  release_cuda_site(site);
#endif
}

void add_publish(pybind11::module& m);  // csrc/probe_publish.cpp: dynstep::publish's callbacks and direct entry
void add_flight_lines(pybind11::module& m);  // csrc/flight_lines.cpp: a flight dump's records.jsonl lines

}  // namespace dynstep

TORCH_LIBRARY_IMPL(dynstep, CPU, m) { m.impl("probe", &dynstep::probe_cpu); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace dynstep;
  m.doc() = "dynstep native probe: site registry, record rings and the CPU kernel's state";
  m.def("set_callbacks", [](py::object on_hit, py::object fallback) {
    g_on_hit = new py::object(std::move(on_hit));
    g_fallback = new py::object(std::move(fallback));
  });
  m.def("register_site", &register_site, py::arg("site"), py::arg("actions"), py::arg("capacity"),
        py::arg("every") = 1);
  m.def("close_site", &close_native);
  m.def("remove_site", &remove_native);
#ifdef DYNSTEP_WITH_CUDA
  m.def("cuda_replays", &cuda_replays);
  m.def("cuda_payloads", &cuda_payloads);
  m.attr("WITH_CUDA") = true;
#else
  m.attr("WITH_CUDA") = false;
#endif
  m.def("is_registered", [](int64_t site) { return Registry::get().find(site) != nullptr; });
  m.def("set_compare", &set_compare);
  m.def("site_state", &site_state);
  m.def("reset_flags", &reset_flags);
  m.def("drain", &drain, py::arg("site") = -1);
  // (hits moved, hits with NaN/Inf harvested so far): CUDA stats-only hits published on the device ->
  // their sites' native rings, nothing handed to Python; (0, 0) in a CPU build.
  m.def("harvest", []() -> std::tuple<int64_t, int64_t> {
#ifdef DYNSTEP_WITH_CUDA
    return harvest_cuda_counted();
#else
    return {0, 0};
#endif
  });
  m.def("next_seq", []() { return Registry::get().next_seq(); });
  m.def("set_memory_cap", [](int64_t bytes) { Registry::get().set_cap(bytes); });
  m.def("memory", []() { return py::make_tuple(Registry::get().held(), Registry::get().cap()); });
  m.def("stats_of", &stats_of);
  // __module__ set, so torch.fx can name it when a graph calls it (dynstep.backends.probe_pass.direct_probe_calls)
  m.add_object("probe", py::reinterpret_steal<py::object>(
                            PyCFunction_NewEx(&g_probe_def, nullptr, m.attr("__name__").ptr())));
  add_publish(m);
  add_flight_lines(m);
  m.attr("ACTION_BITS") = py::dict(
      py::arg("summary") = int64_t(kSummary), py::arg("record") = int64_t(kRecord),
      py::arg("print") = int64_t(kPrint), py::arg("nan") = int64_t(kNan),
      py::arg("compare") = int64_t(kCompare), py::arg("python") = int64_t(kPythonHit),
      py::arg("when_capture") = int64_t(kWhenCapture), py::arg("reject_non_contiguous") = int64_t(kRejectNonContig),
      py::arg("nonfinite_flag") = int64_t(kNonFiniteFlag));
}

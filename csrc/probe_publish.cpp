// Native CPU kernel of dynstep::publish(Tensor[] stats, int[] sites, SymInt[] shapes, int[] ranks,
// int[] dtypes) -> (): the statistics Inductor's kernels computed for fused summary probes
// (backends/stats_pass.py), folded into one hit per site and written into the site's ring exactly as
// the probe kernel writes a summary hit (csrc/probe_cpu.cpp), so sessions, records() and reports
// cannot tell the two apart. Per site, `stats` holds (sum, sumsq, min, max[, nan, bad]): float64 sums
// of the finite values and of their squares, min and max in the value's dtype, and for floating
// dtypes the NaN and non-finite counts (dynstep/probe/fused.py folds them the same way in Python).
//
// Also `publish(...)` on the extension: the same kernel called straight from Inductor's Python
// wrapper (dynstep/probe/fastpath.py), the dispatcher only for what must not bypass it.
#include <torch/extension.h>

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <pthread.h>

#include <cmath>

#include "probe_kernels.h"
#include "probe_state.h"

namespace dynstep {
namespace {

namespace py = pybind11;

py::object* g_on_published = nullptr;   // fused.published(site, call, stats, shape, dtype, device)
py::object* g_publish_fallback = nullptr;  // fused.on_publish: the Python kernel

bool floating_code(int64_t code) { return code == 5 || code == 6 || code == 7 || code == 15; }
int64_t parts_of(int64_t code) { return floating_code(code) ? 6 : 4; }

// A 0-dim statistic, read in its own dtype.
double number(const at::Tensor& t) {
  double out = 0.0;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "dynstep_publish",
                             [&] { out = cpu::as_double<scalar_t>(*t.const_data_ptr<scalar_t>()); });
  return out;
}

int64_t count(const at::Tensor& t) {
  return t.scalar_type() == at::kLong ? *t.const_data_ptr<int64_t>() : static_cast<int64_t>(number(t));
}

// Acc::finish over the folded numbers (shift 0): the Stats the probe kernel gives for the same value.
Stats fold(const at::Tensor* const* parts, int64_t numel, bool floating) {
  Acc acc;
  acc.sum = number(*parts[0]);
  acc.sumsq = number(*parts[1]);
  acc.min = number(*parts[2]);
  acc.max = number(*parts[3]);
  acc.absmax = std::fmax(std::fabs(acc.min), std::fabs(acc.max));
  const int64_t bad = floating ? count(*parts[5]) : 0;
  acc.nan = floating ? count(*parts[4]) : 0;
  acc.inf = bad - acc.nan;
  acc.count = numel - bad;
  return acc.finish();
}

struct Hit {
  int64_t site, call;
  Stats stats;
  std::vector<int64_t> shape;
  int dtype;
};

// One site's hit into its ring; false when it must go to Python instead (a streaming session).
bool keep(SiteState& s, Hit& h) {
  const int64_t a = s.actions;
  if (a & kPythonHit) return false;
  if (!(a & kSummary)) return true;
  std::lock_guard<std::mutex> g(s.mu);
  record_hit(s, h.call, static_cast<uint64_t>(pthread_self()), h.stats, h.shape, h.dtype, -1);
  return true;
}

void to_python(const std::vector<Hit>& hits) {
  py::gil_scoped_acquire gil;
  for (const Hit& h : hits) {
    const Stats& st = h.stats;
    (*g_on_published)(h.site, h.call, py::make_tuple(st.min, st.max, st.mean, st.std, st.absmax, st.nan, st.inf,
                                                     st.count),
                      py::tuple(py::cast(h.shape)), h.dtype, "cpu");
  }
}

// Tensors are passed by pointer from here on: a copy of an at::Tensor that Python owns costs a
// refcount round trip through the Python interpreter when it is dropped.
using Parts = std::vector<const at::Tensor*>;

void python_publish(const Parts& stats, at::IntArrayRef sites, const std::vector<int64_t>& shapes,
                    at::IntArrayRef ranks, at::IntArrayRef dtypes) {
  TORCH_CHECK(g_publish_fallback, "dynstep native publish: Python kernel not installed");
  py::gil_scoped_acquire gil;
  std::vector<at::Tensor> copies;
  for (const at::Tensor* t : stats) copies.push_back(*t);
  (*g_publish_fallback)(copies, sites.vec(), shapes, ranks.vec(), dtypes.vec());
}

void publish_parts(const Parts& stats, at::IntArrayRef sites, const std::vector<int64_t>& dims,
                   at::IntArrayRef ranks, at::IntArrayRef dtypes) {
  c10::SmallVector<std::shared_ptr<SiteState>, 16> states;
  for (int64_t site : sites) {
    states.push_back(Registry::get().find_cached(site));
    if (!states.back()) return python_publish(stats, sites, dims, ranks, dtypes);  // a site Python alone knows
  }
  std::vector<Hit> slow;  // hits that go to Python, in order, after the ring writes
  size_t part = 0, dim = 0;
  for (size_t i = 0; i < sites.size(); ++i) {
    Hit h{sites[i], 0, Stats{}, std::vector<int64_t>(dims.begin() + dim, dims.begin() + dim + ranks[i]),
          static_cast<int>(dtypes[i])};
    dim += static_cast<size_t>(ranks[i]);
    const at::Tensor* const* parts = stats.data() + part;
    part += static_cast<size_t>(parts_of(dtypes[i]));
    SiteState& s = *states[i];
    if (s.closed.load(std::memory_order_relaxed)) continue;
    h.call = s.calls.fetch_add(1);
    int64_t numel = 1;
    for (int64_t d : h.shape) numel *= d;
    h.stats = fold(parts, numel, floating_code(dtypes[i]));
    if (!keep(s, h)) slow.push_back(std::move(h));
  }
  if (!slow.empty()) to_python(slow);
}

void publish_cpu(at::TensorList stats, at::IntArrayRef sites, c10::SymIntArrayRef shapes, at::IntArrayRef ranks,
                 at::IntArrayRef dtypes) {
  std::vector<int64_t> dims;
  dims.reserve(shapes.size());
  for (const c10::SymInt& d : shapes) dims.push_back(d.expect_int());
  Parts parts;
  for (const at::Tensor& t : stats) parts.push_back(&t);
  publish_parts(parts, sites, dims, ranks, dtypes);
}

// ---- the direct call from Inductor's Python wrapper ------------------------------------------------

bool direct_ok(const Parts& stats) {
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) return false;
  for (const at::Tensor* t : stats)
    if (!t->device().is_cpu() || t->key_set().has(c10::DispatchKey::Python)) return false;
  return true;
}

bool int_list(PyObject* seq, std::vector<int64_t>* out) {
  PyObject* fast = PySequence_Fast(seq, "expected a list of ints");
  if (!fast) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) break;
    out->push_back(v);
  }
  Py_DECREF(fast);
  return !PyErr_Occurred();
}

// Borrowed: the list (and so each tensor) outlives the call.
bool tensor_list(PyObject* seq, Parts* out) {
  PyObject* fast = PySequence_Fast(seq, "expected a list of tensors");
  if (!fast) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    if (!THPVariable_Check(item)) {
      PyErr_SetString(PyExc_TypeError, "dynstep_native.publish: stats must be tensors");
      break;
    }
    out->push_back(&THPVariable_Unpack(item));
  }
  Py_DECREF(fast);
  return !PyErr_Occurred();
}

void publish_dispatch(const Parts& parts, const std::vector<int64_t>& sites,
                      const std::vector<int64_t>& shapes, const std::vector<int64_t>& ranks,
                      const std::vector<int64_t>& dtypes) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("dynstep::publish", "")
                       .typed<void(at::TensorList, at::IntArrayRef, c10::SymIntArrayRef, at::IntArrayRef,
                                   at::IntArrayRef)>();
  std::vector<at::Tensor> stats;
  for (const at::Tensor* t : parts) stats.push_back(*t);
  py::gil_scoped_release no_gil;
  op.call(stats, sites, c10::fromIntArrayRefSlow(shapes), ranks, dtypes);
}

PyObject* publish_fastcall(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "dynstep_native.publish(stats, sites, shapes, ranks, dtypes) takes 5 arguments");
    return nullptr;
  }
  Parts stats;
  std::vector<int64_t> sites, shapes, ranks, dtypes;
  if (!tensor_list(args[0], &stats) || !int_list(args[1], &sites) || !int_list(args[2], &shapes) ||
      !int_list(args[3], &ranks) || !int_list(args[4], &dtypes))
    return nullptr;
  int64_t want = 0;
  for (int64_t code : dtypes) want += parts_of(code);
  if (ranks.size() != sites.size() || dtypes.size() != sites.size() || static_cast<int64_t>(stats.size()) != want) {
    PyErr_SetString(PyExc_ValueError, "dynstep_native.publish: stats, sites, ranks and dtypes do not match");
    return nullptr;
  }
  if (!direct_ok(stats)) {
    publish_dispatch(stats, sites, shapes, ranks, dtypes);
    Py_RETURN_NONE;
  }
  RECORD_FUNCTION("dynstep::publish", std::vector<c10::IValue>());
  publish_parts(stats, sites, shapes, ranks, dtypes);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_publish_def = {"publish", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(publish_fastcall)),
                             METH_FASTCALL,
                             "publish(stats, sites, shapes, ranks, dtypes): dynstep::publish without the "
                             "Python->dispatcher path (Inductor's Python wrapper calls this through dynstep.fastpath)"};

}  // namespace

// Used by the CUDA glue (csrc/cuda/probe_cuda_op.cpp): a publish whose hits Python must take (eager
// hits of a site that prints, checks or streams).
void publish_python(const std::vector<at::Tensor>& stats, at::IntArrayRef sites, c10::SymIntArrayRef shapes,
                    at::IntArrayRef ranks, at::IntArrayRef dtypes) {
  std::vector<int64_t> dims;
  for (const c10::SymInt& d : shapes) dims.push_back(d.expect_int());
  Parts parts;
  for (const at::Tensor& t : stats) parts.push_back(&t);
  python_publish(parts, sites, dims, ranks, dtypes);
}

// The extension's part of the pybind11 module (called from probe_cpu.cpp's PYBIND11_MODULE).
void add_publish(py::module& m) {
  m.def("set_publish_callbacks", [](py::object on_published, py::object fallback) {
    g_on_published = new py::object(std::move(on_published));  // leaked on purpose, as probe_cpu.cpp's
    g_publish_fallback = new py::object(std::move(fallback));
  });
  m.add_object("publish", py::reinterpret_steal<py::object>(
                              PyCFunction_NewEx(&g_publish_def, nullptr, m.attr("__name__").ptr())));
}

}  // namespace dynstep

TORCH_LIBRARY_IMPL(dynstep, CPU, m) { m.impl("publish", &dynstep::publish_cpu); }

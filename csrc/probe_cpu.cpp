// Native CPU kernel for dynstep::probe(Tensor x, int site) -> () and the small pybind11 surface
// Python uses to configure sites and drain rings (typed in dynstep/_native_ext.pyi).
//
// The op schema and its Python kernel live in dynstep/ops.py; this file only adds a CPU kernel
// that takes precedence over the CompositeExplicitAutograd Python kernel.
//
// The hot path never enters Python: it computes the stats in one pass, writes them (and for
// `record` a copy of the data) into the site's preallocated ring, and updates the sticky compare
// and non-finite flags. Python drains rings lazily (dynstep/runtime.py: drain_native) when a
// session or TensorProbe is read. Python is entered from the kernel only when an action needs it:
// print (every `every`-th hit), a non-finite value with the `nan` action, a site flagged
// kPythonHit, or a site/dtype the native side does not know (full Python fallback).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>
#include <pthread.h>

#include <cstdio>
#include <sstream>

#include "probe_state.h"

namespace dynstep {
namespace {

namespace py = pybind11;

// Leaked on purpose: destroying a Python object after interpreter shutdown would crash.
py::object* g_on_hit = nullptr;       // runtime.native_hit(x, site, call, stats)
py::object* g_fallback = nullptr;     // runtime.on_probe(x, site): the full Python kernel

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "float64";
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return "unsupported";
  }
}

bool native_dtype(at::ScalarType t) { return std::string(dtype_name(t)) != "unsupported"; }

std::string py_tuple(at::IntArrayRef shape) {  // formats like Python's tuple repr
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

std::string fmt_g(double v) {  // as Python's f"{v:.6g}"
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Visit every element in logical (row-major) order, whatever the strides.
template <typename T, typename F>
void for_each(const at::Tensor& x, F&& f) {
  const T* base = x.const_data_ptr<T>();
  const int64_t nd = x.dim();
  if (nd == 0) { f(base[0]); return; }
  auto sizes = x.sizes();
  auto strides = x.strides();
  const int64_t inner = sizes[nd - 1], istride = strides[nd - 1];
  const int64_t outer = x.numel() / inner;
  c10::SmallVector<int64_t, 8> idx(static_cast<size_t>(nd), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* p = base + off;
    for (int64_t j = 0; j < inner; ++j) f(p[j * istride]);
    for (int64_t d = nd - 2; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < sizes[d]) break;
      off -= strides[d] * sizes[d];
      idx[d] = 0;
    }
  }
}

template <typename T>
inline double as_double(T v) { return static_cast<double>(static_cast<float>(v)); }
template <> inline double as_double<double>(double v) { return v; }
template <> inline double as_double<int64_t>(int64_t v) { return static_cast<double>(v); }
template <> inline double as_double<int32_t>(int32_t v) { return static_cast<double>(v); }
template <> inline double as_double<bool>(bool v) { return v ? 1.0 : 0.0; }

constexpr int64_t kChunk = int64_t(1) << 16;
constexpr int kLanes = 8;

// The common case, all values finite, without branches: kLanes independent accumulators that the
// compiler keeps in registers/vectors. Returns false at the first non-finite value; the caller
// then redoes the chunk with Acc::add, which counts NaN/Inf.
template <typename T>
bool finite_chunk(const T* p, int64_t n, double shift, Acc& out) {
  double s[kLanes] = {}, q[kLanes] = {}, am[kLanes] = {};
  double mn[kLanes], mx[kLanes];
  for (int l = 0; l < kLanes; ++l) { mn[l] = INFINITY; mx[l] = -INFINITY; }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    double v[kLanes];
    bool bad = false;
    for (int l = 0; l < kLanes; ++l) {
      v[l] = as_double(p[i + l]);
      bad |= !(std::fabs(v[l]) <= std::numeric_limits<double>::max());
    }
    if (bad) return false;
    for (int l = 0; l < kLanes; ++l) {
      double d = v[l] - shift;
      s[l] += d;
      q[l] += d * d;
      mn[l] = v[l] < mn[l] ? v[l] : mn[l];
      mx[l] = v[l] > mx[l] ? v[l] : mx[l];
      double a = std::fabs(v[l]);
      am[l] = a > am[l] ? a : am[l];
    }
  }
  Acc a;
  a.shift = shift;
  for (; i < n; ++i) {
    double v = as_double(p[i]);
    if (!std::isfinite(v)) return false;
    a.add(v);
  }
  for (int l = 0; l < kLanes; ++l) {
    Acc lane;
    lane.shift = shift;
    lane.sum = s[l]; lane.sumsq = q[l]; lane.min = mn[l]; lane.max = mx[l]; lane.absmax = am[l];
    lane.count = 0;
    a.merge(lane);
  }
  a.count = n;
  out = a;
  return true;
}

// One pass: stats, and the copy into `dst` (contiguous) when `dst` is not null.
template <typename T>
Stats stats_and_copy(const at::Tensor& x, uint8_t* dst) {
  const int64_t n = x.numel();
  double shift = 0.0;
  Acc acc;
  if (x.is_contiguous()) {
    const T* src = x.const_data_ptr<T>();
    double first = as_double(src[0]);
    shift = std::isfinite(first) ? first : 0.0;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<Acc> parts;  // per-chunk partials merged in order: deterministic sums
    Acc* out = &acc;
    if (chunks > 1) { parts.resize(static_cast<size_t>(chunks)); out = parts.data(); }
    auto body = [&](int64_t c) {
      const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
      if (dst) std::memcpy(dst + b * sizeof(T), src + b, (e - b) * sizeof(T));
      Acc a;
      a.shift = shift;
      if (!finite_chunk(src + b, e - b, shift, a)) {
        a = Acc();
        a.shift = shift;
        for (int64_t i = b; i < e; ++i) a.add(as_double(src[i]));
      }
      out[chunks > 1 ? c : 0] = a;
    };
    if (chunks == 1) {
      body(0);
    } else {
      at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) { for (int64_t c = b; c < e; ++c) body(c); });
      acc = parts[0];
      for (int64_t c = 1; c < chunks; ++c) acc.merge(parts[static_cast<size_t>(c)]);
    }
    return acc.finish();
  }
  bool first = true;
  T* out = reinterpret_cast<T*>(dst);
  for_each<T>(x, [&](T v) {
    double d = as_double(v);
    if (first) { acc.shift = std::isfinite(d) ? d : 0.0; first = false; }
    acc.add(d);
    if (out) *out++ = v;
  });
  return acc.finish();
}

template <typename T>
void compare(const at::Tensor& x, SiteState& s, int64_t call) {
  const Compare& c = *s.compare;
  const int64_t n = x.numel();
  int64_t i = 0, bad = 0, first = -1;
  double got = 0, want = 0, maxd = NAN;
  for_each<T>(x, [&](T v) {
    double a = as_double(v), e = c.expected[static_cast<size_t>(i)];
    bool ok = a == e;
    if (!ok && c.equal_nan) ok = std::isnan(a) && std::isnan(e);
    if (!ok) {
      double err = std::fabs(a - e);
      ok = std::isfinite(err) && err <= c.atol + std::fabs(c.rtol * e);
    }
    if (!ok) {
      if (first < 0) { first = i; got = a; want = e; }
      ++bad;
      double d = std::fabs(a - e);
      if (!std::isnan(d) && (std::isnan(maxd) || d > maxd)) maxd = d;
    }
    ++i;
  });
  if (bad == 0) return;
  s.compare_failed = true;
  s.compare_message = "call " + std::to_string(call) + ": " + std::to_string(bad) + " of " +
      std::to_string(n) + " values differ beyond rtol=" + fmt_g(c.rtol) + ", atol=" +
      fmt_g(c.atol) + " (max abs diff " + fmt_g(maxd) + "; first at flat index " +
      std::to_string(first) + ": got " + fmt_g(got) + ", expected " + fmt_g(want) + ")";
}

void check_against_expected(const at::Tensor& x, SiteState& s, int64_t call) {
  const Compare& c = *s.compare;
  if (x.sizes().vec() != c.shape) {
    s.compare_failed = true;
    s.compare_message = "call " + std::to_string(call) + ": shape " + py_tuple(x.sizes()) +
        " does not match the expected shape " + py_tuple(c.shape);
    return;
  }
  if (static_cast<int>(x.scalar_type()) != c.dtype) {
    s.compare_failed = true;
    s.compare_message = "call " + std::to_string(call) + ": dtype " + dtype_name(x.scalar_type()) +
        " does not match the expected dtype " + dtype_name(static_cast<at::ScalarType>(c.dtype));
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

void probe_cpu(const at::Tensor& x, int64_t site) {
  auto sp = Registry::get().find(site);
  const bool strided = x.layout() == at::kStrided && !x.is_quantized();
  if (!sp || !strided || !native_dtype(x.scalar_type())) {
    TORCH_CHECK(g_fallback, "dynstep native probe: Python fallback not installed");
    call_python(g_fallback, x, site);
    return;
  }
  SiteState& s = *sp;
  const int64_t a = s.actions;
  if (a & kWhenCapture) return;  // a CPU tensor is never part of a CUDA stream capture
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
    if (keep && !python_hit) {
      e = &claim_slot(s);
      if ((a & kRecord) && nbytes > 0) {
        if (Registry::get().make_room(&s, nbytes)) {
          e->data.resize(static_cast<size_t>(nbytes));  // keeps capacity: no allocation after warm-up
          dst = e->data.data();
        } else {
          ++s.dropped_memory;
        }
      }
    }
    if (x.numel() > 0) {
      AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, x.scalar_type(), "dynstep_probe",
                                 [&] { st = stats_and_copy<scalar_t>(x, dst); });
    }
    if ((a & kNan) && (st.nan || st.inf)) python_hit = true;
    if (e) {
      if (python_hit) {  // Python handles this hit (nan raise/warn): undo the slot
        Registry::get().release(*e);
        s.head = (s.head - 1 + s.capacity) % s.capacity;
        --s.size;
      } else {
        e->seq = Registry::get().next_seq();
        e->call = call;
        e->thread = static_cast<uint64_t>(pthread_self());
        e->stats = st;
        e->shape.assign(x.sizes().begin(), x.sizes().end());
        e->dtype = static_cast<int>(x.scalar_type());
        e->has_tensor = dst != nullptr || ((a & kRecord) && nbytes == 0);
        e->nbytes = dst ? nbytes : 0;
        if (dst) Registry::get().account(nbytes);
      }
    }
    if ((a & kCompare) && s.compare && !s.compare_failed) check_against_expected(x, s, call);
    if ((a & kNonFiniteFlag) && (st.nan || st.inf) && !s.nonfinite_seen) {
      s.nonfinite_seen = true;
      if (s.compare_message.empty()) s.compare_message = "call " + std::to_string(call) + ": " + std::to_string(st.nan) + " NaN, " +
          std::to_string(st.inf) + " Inf";
    }
  }
  if (python_hit) call_python(g_on_hit, x, site, call, st);
}

// ---- the pybind11 surface (dynstep/_native_ext.pyi) ----------------------------------------

void register_site(int64_t site, int64_t actions, int64_t capacity, int64_t every) {
  Registry::get().add(site, actions, capacity, every);
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
  auto s = Registry::get().find(site);
  TORCH_CHECK(s, "dynstep: site ", site, " is not registered natively");
  std::lock_guard<std::mutex> g(s->mu);
  return py::make_tuple(s->calls.load(), s->nonfinite_seen, s->compare_failed, s->compare_message,
                        s->size, s->dropped_ring, s->dropped_memory);
}

void reset_flags(int64_t site) {
  auto s = Registry::get().find(site);
  if (!s) return;
  std::lock_guard<std::mutex> g(s->mu);
  s->nonfinite_seen = s->compare_failed = false;
  s->compare_message.clear();
}

// Entries of one site (or all with site < 0), oldest first, and the drop counts since the last
// drain: ([(site, seq, call, thread, stats, shape, dtype, tensor|None)], {site: (ring, memory)}).
py::tuple drain(int64_t only) {
  py::list out;
  py::dict dropped;
  for (auto& sp : Registry::get().all()) {
    if (only >= 0 && sp->id != only) continue;
    SiteState& s = *sp;
    std::lock_guard<std::mutex> g(s.mu);
    for (int64_t k = 0; k < s.size; ++k) {
      Entry& e = s.ring[static_cast<size_t>((s.head - s.size + k + 2 * s.capacity) % s.capacity)];
      py::object t = py::none();
      if (e.has_tensor) {
        at::Tensor copy = at::empty(e.shape, at::TensorOptions().dtype(static_cast<at::ScalarType>(e.dtype)));
        if (e.nbytes) std::memcpy(copy.mutable_data_ptr(), e.data.data(), static_cast<size_t>(e.nbytes));
        t = py::cast(copy);
        Registry::get().account(-e.nbytes);
        e.has_tensor = false;
        e.nbytes = 0;
      }
      out.append(py::make_tuple(s.id, e.seq, e.call, e.thread, stats_tuple(e.stats), py::tuple(py::cast(e.shape)),
                                dtype_name(static_cast<at::ScalarType>(e.dtype)), t));
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
void release_cuda_site(int64_t site);  // csrc/cuda/probe_cuda_op.cpp
int64_t cuda_replays(int64_t site);
#endif

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
  m.def("remove_site", [](int64_t site) {
#ifdef DYNSTEP_WITH_CUDA
    release_cuda_site(site);
#endif
    Registry::get().remove(site);
  });
#ifdef DYNSTEP_WITH_CUDA
  m.def("cuda_replays", &cuda_replays);
  m.attr("WITH_CUDA") = true;
#else
  m.attr("WITH_CUDA") = false;
#endif
  m.def("is_registered", [](int64_t site) { return Registry::get().find(site) != nullptr; });
  m.def("set_compare", &set_compare);
  m.def("site_state", &site_state);
  m.def("reset_flags", &reset_flags);
  m.def("drain", &drain, py::arg("site") = -1);
  m.def("next_seq", []() { return Registry::get().next_seq(); });
  m.def("set_memory_cap", [](int64_t bytes) { Registry::get().set_cap(bytes); });
  m.def("memory", []() { return py::make_tuple(Registry::get().held(), Registry::get().cap()); });
  m.def("stats_of", &stats_of);
  m.attr("ACTION_BITS") = py::dict(
      py::arg("summary") = int64_t(kSummary), py::arg("record") = int64_t(kRecord),
      py::arg("print") = int64_t(kPrint), py::arg("nan") = int64_t(kNan),
      py::arg("compare") = int64_t(kCompare), py::arg("python") = int64_t(kPythonHit),
      py::arg("when_capture") = int64_t(kWhenCapture), py::arg("reject_non_contiguous") = int64_t(kRejectNonContig),
      py::arg("nonfinite_flag") = int64_t(kNonFiniteFlag));
}

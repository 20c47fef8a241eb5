// Per-site native state shared by the CPU kernel and the CUDA host callback: the action mask,
// a preallocated record ring, the sticky compare and non-finite flags, and the one-pass stats.
//
// Nothing in this header touches Python or the CUDA runtime, so a CUDA host callback may look a
// site up and write its ring (host callbacks must not call CUDA or Python).
#pragma once

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dynstep {

// Bit values are ACTION_BITS of the extension (dynstep/_native_ext.pyi; used by dynstep/probe/rings.py).
enum ActionBit : int64_t {
  kSummary = 1,
  kRecord = 2,
  kPrint = 4,         // printing is a front-end event: every `every`-th hit enters Python
  kNan = 8,           // a non-finite value enters Python (raise / warn / stop)
  kCompare = 16,      // sticky compare against an expected tensor (native only)
  kPythonHit = 32,    // every hit enters Python (a Python-side consumer exists, e.g. pause)
  kWhenCapture = 64,  // act only while the current CUDA stream is capturing
  kRejectNonContig = 128,  // non_contiguous="error": a strided input raises ValueError
  kNonFiniteFlag = 256,  // set a sticky flag on non-finite values (TensorProbe.assert_ok)
};

// Summary of one tensor, with the same rules as dynstep/probe/stats.py: min/max/mean/std/absmax over
// finite values, NaN when no finite value, std NaN for a single value.
struct Stats {
  double min = NAN, max = NAN, mean = NAN, std = NAN, absmax = NAN;
  int64_t nan = 0, inf = 0, count = 0;
};

// Accumulator for one pass. Sums are shifted by `shift` (the first finite value) so the
// one-pass variance does not cancel catastrophically when |mean| >> std.
struct Acc {
  double shift = 0.0, sum = 0.0, sumsq = 0.0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double absmax = 0.0;
  int64_t nan = 0, inf = 0, count = 0;

  inline void add(double v) {
    if (std::isnan(v)) { ++nan; return; }
    if (std::isinf(v)) { ++inf; return; }
    double d = v - shift;
    sum += d;
    sumsq += d * d;
    min = v < min ? v : min;
    max = v > max ? v : max;
    double a = std::fabs(v);
    absmax = a > absmax ? a : absmax;
    ++count;
  }

  void merge(const Acc& o) {  // both must share `shift`
    sum += o.sum; sumsq += o.sumsq;
    min = o.min < min ? o.min : min;
    max = o.max > max ? o.max : max;
    absmax = o.absmax > absmax ? o.absmax : absmax;
    nan += o.nan; inf += o.inf; count += o.count;
  }

  Stats finish() const {
    Stats s;
    s.nan = nan; s.inf = inf; s.count = count;
    if (count == 0) return s;
    double n = static_cast<double>(count);
    double mean_d = sum / n;
    s.mean = shift + mean_d;
    s.min = min; s.max = max; s.absmax = absmax;
    if (count > 1) {
      double var = (sumsq - n * mean_d * mean_d) / (n - 1.0);
      s.std = std::sqrt(var > 0.0 ? var : 0.0);
    }
    return s;
  }
};

// ---- formatting shared by the CPU kernel and the CUDA host callback (messages match Python's) ----

inline std::string fmt_g(double v) {  // as Python's f"{v:.6g}"
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

inline std::string py_tuple(const std::vector<int64_t>& shape) {  // as Python's tuple repr
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// torch dtype names of the supported c10::ScalarType codes; "unsupported" for the rest.
inline const char* dtype_name(int code) {
  switch (code) {
    case 0: return "uint8";
    case 1: return "int8";
    case 2: return "int16";
    case 3: return "int32";
    case 4: return "int64";
    case 5: return "float16";
    case 6: return "float32";
    case 7: return "float64";
    case 11: return "bool";
    case 15: return "bfloat16";
    default: return "unsupported";
  }
}

// One ring slot. `data` keeps its capacity between hits: no allocation after warm-up.
struct Entry {
  int64_t seq = 0, call = 0;
  uint64_t thread = 0;
  Stats stats;
  std::vector<int64_t> shape;
  int dtype = 0;          // c10::ScalarType as int (kept opaque here for the CUDA callback)
  int device = -1;        // -1: CPU; otherwise the CUDA device index the value lived on
  int64_t nbytes = 0;     // bytes of the recorded copy, 0 for a stats-only entry
  bool has_tensor = false;
  bool stats_pending = false;  // record-only hit or small summary: stats computed from `data` when drained
  std::vector<uint8_t> data;
};

struct Compare {
  std::vector<double> expected;  // flattened, converted once at registration
  std::vector<int64_t> shape;
  int dtype = -1;
  double rtol = 1e-5, atol = 1e-8;
  bool equal_nan = false;
};

// Element-wise compare with torch.isclose's rules, fed one (actual, expected) pair at a time.
struct CompareRun {
  int64_t i = 0, bad = 0, first = -1;
  double got = 0, want = 0, maxd = NAN;

  void step(double a, const Compare& c) {
    double e = c.expected[static_cast<size_t>(i)];
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
  }

  // "" when every value matched, else the message Python's runtime.compare_message gives.
  std::string message(const Compare& c, int64_t call) const {
    if (bad == 0) return "";
    return "call " + std::to_string(call) + ": " + std::to_string(bad) + " of " + std::to_string(i) +
        " values differ beyond rtol=" + fmt_g(c.rtol) + ", atol=" + fmt_g(c.atol) + " (max abs diff " +
        fmt_g(maxd) + "; first at flat index " + std::to_string(first) + ": got " + fmt_g(got) +
        ", expected " + fmt_g(want) + ")";
  }
};

// Shape and dtype must match before values are compared; "" when they do.
inline std::string header_mismatch(const Compare& c, const std::vector<int64_t>& shape, int dtype, int64_t call) {
  if (shape != c.shape)
    return "call " + std::to_string(call) + ": shape " + py_tuple(shape) + " does not match the expected shape " +
        py_tuple(c.shape);
  if (dtype != c.dtype)
    return "call " + std::to_string(call) + ": dtype " + dtype_name(dtype) + " does not match the expected dtype " +
        dtype_name(c.dtype);
  return "";
}

struct SiteState {
  int64_t id = 0;
  std::atomic<int64_t> actions{0};  // replaced in place by a re-registration with the same ring
  int64_t capacity = 1;
  int64_t every = 1;
  std::mutex mu;
  std::atomic<int64_t> calls{0};
  std::vector<Entry> ring;  // `capacity` slots, preallocated at registration
  int64_t head = 0, size = 0;
  int64_t dropped_ring = 0, dropped_memory = 0;
  bool nonfinite_seen = false;
  // The first non-finite hit since the flags were last reset, typed (site_state hands them to
  // Python as numbers): its call (-1: a CUDA hit whose slot was overwritten before the host read
  // it, see probe_cuda.cu take_nonfinite) and its counts.
  int64_t nonfinite_call = -1, nonfinite_nan = 0, nonfinite_inf = 0;
  bool compare_failed = false;
  std::string compare_message;
  std::unique_ptr<Compare> compare;
  // Set once by Registry::close: a hit that still reaches this site (a CUDA graph that captured
  // it, replayed after close) is ignored.
  std::atomic<bool> closed{false};
};

// Global memory cap on bytes held by record copies in all rings; the oldest entries (lowest
// seq, across sites) are dropped first, and counted per site in `dropped_memory`.
class Registry {
 public:
  // Leaked on purpose: a CUDA host callback or user-object destructor may still run during
  // process exit, after static destructors would have torn a static Registry down.
  static Registry& get() {
    static Registry* r = new Registry();
    return *r;
  }

  std::shared_ptr<SiteState> find(int64_t site) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = sites_.find(site);
    return it == sites_.end() ? nullptr : it->second;
  }

  // The CPU kernel's lookup: a per-thread direct-mapped cache of site -> state, valid while the
  // registry's generation (bumped by every add, close and remove) is unchanged, so a warm hit
  // takes no lock and does no hash lookup. A hit racing a replacement may still see the state it
  // replaces, as with `find`; a closed state ignores it.
  std::shared_ptr<SiteState> find_cached(int64_t site) {
    struct Slot {
      int64_t site = -1;
      uint64_t gen = 0;
      std::shared_ptr<SiteState> state;
    };
    thread_local std::array<Slot, 64> cache;
    Slot& slot = cache[static_cast<size_t>(site) & 63];
    const uint64_t gen = gen_.load(std::memory_order_acquire);
    if (slot.site != site || slot.gen != gen) {
      slot.state = find(site);
      slot.site = site;
      slot.gen = gen;
    }
    return slot.state;
  }

  // Register a site. A live site with the same ring shape only gets the new action mask, in
  // place: hits already in its ring stay there to be drained, and a hit racing the change lands
  // in that same ring (Python re-registers every site when delivery switches between immediate
  // and lazy, while other threads may be hitting them).
  std::shared_ptr<SiteState> add(int64_t site, int64_t actions, int64_t capacity, int64_t every) {
    capacity = capacity < 1 ? 1 : capacity;
    every = every < 1 ? 1 : every;
    if (auto cur = find(site); cur && !cur->closed.load() && cur->capacity == capacity && cur->every == every) {
      cur->actions.store(actions);
      return cur;
    }
    auto s = std::make_shared<SiteState>();
    s->id = site;
    s->actions.store(actions);
    s->capacity = capacity;
    s->every = every;
    s->ring.resize(static_cast<size_t>(s->capacity));
    for (auto& e : s->ring) e.shape.reserve(8);
    put(site, s);
    return s;
  }

  // Stop a site for good: it stays registered as a closed no-op (compiled graphs may still call
  // it), and the state it replaces is flagged closed too, for hits already holding it. Closing a
  // closed site changes nothing.
  void close(int64_t site) {
    if (auto current = find(site); current && current->closed.load()) return;
    auto s = std::make_shared<SiteState>();
    s->id = site;
    s->ring.resize(1);
    s->closed.store(true);
    if (auto old = put(site, s)) old->closed.store(true);
  }

  void remove(int64_t site) {
    std::shared_ptr<SiteState> s;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = sites_.find(site);
      if (it == sites_.end()) return;
      s = it->second;
      sites_.erase(it);
      gen_.fetch_add(1, std::memory_order_release);
    }
    s->closed.store(true);
    retire(*s);
  }

  std::vector<std::shared_ptr<SiteState>> all() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<std::shared_ptr<SiteState>> out;
    for (auto& kv : sites_) out.push_back(kv.second);
    return out;
  }

  int64_t next_seq() { return seq_.fetch_add(1) + 1; }
  void set_seq_base(int64_t base) { seq_.store(base); }

  void set_cap(int64_t bytes) { cap_.store(bytes); }
  int64_t cap() const { return cap_.load(); }
  int64_t held() const { return held_.load(); }

  // Make room for `nbytes` more record bytes by dropping the oldest entries of other sites
  // (the caller holds `self->mu`; entries of `self` are handled by `reserve_in`). Returns
  // false when `nbytes` alone exceeds the cap.
  bool make_room(SiteState* self, int64_t nbytes);

  void account(int64_t delta) { held_.fetch_add(delta); }

  void release(Entry& e) {
    if (e.has_tensor) account(-e.nbytes);
    e.has_tensor = false;
    e.stats_pending = false;
    e.nbytes = 0;
    std::vector<uint8_t>().swap(e.data);
  }

 private:
  // Install `s` for `site` and return the state it replaces (or nullptr). The replaced ring can
  // no longer be drained, so its record bytes leave the cap's account now.
  std::shared_ptr<SiteState> put(int64_t site, std::shared_ptr<SiteState> s) {
    std::shared_ptr<SiteState> old;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto& slot = sites_[site];
      old = std::move(slot);
      slot = std::move(s);
      gen_.fetch_add(1, std::memory_order_release);
    }
    if (old) retire(*old);
    return old;
  }

  void retire(SiteState& s) {
    std::lock_guard<std::mutex> g(s.mu);
    for (auto& e : s.ring) release(e);
    s.size = 0;
  }

  std::mutex mu_;
  std::unordered_map<int64_t, std::shared_ptr<SiteState>> sites_;
  std::atomic<int64_t> seq_{0};
  std::atomic<uint64_t> gen_{1};
  std::atomic<int64_t> cap_{int64_t(1) << 30};
  std::atomic<int64_t> held_{0};
};

// The oldest live entry of a ring (its tail), or nullptr.
inline Entry* oldest(SiteState& s) {
  if (s.size == 0) return nullptr;
  int64_t tail = (s.head - s.size + s.capacity) % s.capacity;
  return &s.ring[static_cast<size_t>(tail)];
}

inline void pop_oldest(SiteState& s) {
  if (s.size > 0) --s.size;
}

inline bool Registry::make_room(SiteState* self, int64_t nbytes) {
  if (nbytes > cap()) return false;
  for (int tries = 0; held() + nbytes > cap(); ++tries) {
    if (tries > 10000) return false;  // every holder busy in other threads: drop this copy

    // Find the globally oldest entry that holds a tensor copy.
    std::shared_ptr<SiteState> victim;
    int64_t best = std::numeric_limits<int64_t>::max();
    for (auto& s : all()) {
      if (s.get() == self) {
        Entry* e = oldest(*s);
        if (e && e->has_tensor && e->seq < best) { best = e->seq; victim = s; }
        continue;
      }
      // try_lock: a site busy in another thread is skipped rather than risking a lock cycle.
      std::unique_lock<std::mutex> g(s->mu, std::try_to_lock);
      if (!g.owns_lock()) continue;
      Entry* e = oldest(*s);
      if (e && e->has_tensor && e->seq < best) { best = e->seq; victim = s; }
    }
    if (!victim) return held() + nbytes <= cap();
    if (victim.get() == self) {
      release(*oldest(*self));
      pop_oldest(*self);
      ++self->dropped_memory;
    } else {
      std::unique_lock<std::mutex> g(victim->mu, std::try_to_lock);
      if (!g.owns_lock()) continue;
      Entry* e = oldest(*victim);
      if (e && e->seq == best) {
        release(*e);
        pop_oldest(*victim);
        ++victim->dropped_memory;
      }
    }
  }
  return true;
}

// Claim the next ring slot of `s` (caller holds s.mu); the overwritten oldest entry is counted.
// The slot keeps its buffer's capacity, so a hit after warm-up does not allocate.
// The site's sticky non-finite flag (caller holds s.mu): the first NaN/Inf hit since the last
// reset, with its call and counts; its message only where no compare message is there already.
inline void flag_nonfinite(SiteState& s, int64_t call, int64_t nan, int64_t inf, const std::string& message) {
  if (s.nonfinite_seen) return;
  s.nonfinite_seen = true;
  s.nonfinite_call = call;
  s.nonfinite_nan = nan;
  s.nonfinite_inf = inf;
  if (s.compare_message.empty()) s.compare_message = message;
}

inline void flag_nonfinite(SiteState& s, int64_t call, int64_t nan, int64_t inf) {
  if (s.nonfinite_seen) return;
  flag_nonfinite(s, call, nan, inf,
                 "call " + std::to_string(call) + ": " + std::to_string(nan) + " NaN, " + std::to_string(inf) + " Inf");
}

inline Entry& claim_slot(SiteState& s);

// The fields of one hit in its ring slot, in one place: what every kernel writes for a hit (the CPU
// kernel, dynstep::publish, the CUDA host callback, the CUDA ring harvest); the caller adds a copy of
// the value where it keeps one (holds s.mu). `shape` (a vector or an at::IntArrayRef) is copied into
// the slot's own vector, whose capacity is reused: no allocation once the ring is warm.
template <typename Shape>
inline void fill_hit(Entry& e, int64_t call, uint64_t thread, const Stats& st, const Shape& shape, int dtype,
                     int device) {
  e.seq = Registry::get().next_seq();
  e.call = call;
  e.thread = thread;
  e.stats = st;
  e.shape.assign(shape.begin(), shape.end());
  e.dtype = dtype;
  e.device = device;
  e.has_tensor = false;
}

// A new slot with one hit's fields (see fill_hit).
template <typename Shape>
inline Entry& record_hit(SiteState& s, int64_t call, uint64_t thread, const Stats& st, const Shape& shape, int dtype,
                         int device) {
  Entry& e = claim_slot(s);
  fill_hit(e, call, thread, st, shape, dtype, device);
  return e;
}

inline Entry& claim_slot(SiteState& s) {
  if (s.size == s.capacity) {
    ++s.dropped_ring;
    --s.size;
  }
  Entry& e = s.ring[static_cast<size_t>(s.head)];
  if (e.has_tensor) Registry::get().account(-e.nbytes);
  e.has_tensor = false;
  e.stats_pending = false;
  e.nbytes = 0;
  s.head = (s.head + 1) % s.capacity;
  ++s.size;
  return e;
}

}  // namespace dynstep

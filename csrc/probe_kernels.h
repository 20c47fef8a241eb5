// One-pass stats, copy and compare over a CPU tensor of any supported dtype and any strides:
// the templates behind csrc/probe_cpu.cpp's kernel (and `stats_of`).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/SmallVector.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <type_traits>

#include "probe_state.h"

namespace dynstep {
namespace cpu {

inline std::string py_tuple(at::IntArrayRef shape) { return dynstep::py_tuple(shape.vec()); }

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

// min/max/absmax are exact in the input's own precision for floating types (every value is
// representable), so they are kept in float for float/half/bfloat16 (twice the lanes per vector
// register) and in double for everything else, as before.
template <typename T>
using MinMax = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, c10::Half> ||
                                      std::is_same_v<T, c10::BFloat16>,
                                  float, double>;

// The common case, all values finite, without a branch per element: kLanes independent
// accumulators in plain arrays, which the compiler keeps in vector registers. A non-finite value
// makes a sum non-finite, so one check per chunk finds it (returns false); the caller then redoes
// the chunk with Acc::add, which counts NaN/Inf.
// An AVX2 clone next to the baseline build, picked when the library loads (GCC function
// multiversioning): four doubles per vector instead of two for the sums. The explicit lanes fix
// the summation order, so both clones give the same bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define DYNSTEP_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define DYNSTEP_MULTIVERSION
#endif

template <typename T>
DYNSTEP_MULTIVERSION bool finite_chunk(const T* p, int64_t n, double shift, Acc& out) {
  using M = MinMax<T>;
  double s[kLanes] = {}, q[kLanes] = {};
  M mn[kLanes], mx[kLanes], am[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    mn[l] = std::numeric_limits<M>::infinity();
    mx[l] = -std::numeric_limits<M>::infinity();
    am[l] = 0;
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const M v = static_cast<M>(as_double(p[i + l]));
      const double d = static_cast<double>(v) - shift;
      s[l] += d;
      q[l] += d * d;
      mn[l] = v < mn[l] ? v : mn[l];
      mx[l] = v > mx[l] ? v : mx[l];
      const M a = v < 0 ? -v : v;
      am[l] = a > am[l] ? a : am[l];
    }
  }
  Acc a;
  a.shift = shift;
  for (; i < n; ++i) a.add(as_double(p[i]));
  for (int l = 0; l < kLanes; ++l) {
    Acc lane;
    lane.shift = shift;
    lane.sum = s[l]; lane.sumsq = q[l];
    lane.min = mn[l]; lane.max = mx[l]; lane.absmax = am[l];
    a.merge(lane);
  }
  if (a.nan || a.inf || !std::isfinite(a.sum) || !std::isfinite(a.sumsq)) return false;
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

// Copy only, in logical order (record-only hits: their stats are computed at drain time).
template <typename T>
void copy_only(const at::Tensor& x, uint8_t* dst) {
  if (x.is_contiguous()) {
    std::memcpy(dst, x.const_data_ptr<T>(), static_cast<size_t>(x.numel()) * sizeof(T));
    return;
  }
  T* out = reinterpret_cast<T*>(dst);
  for_each<T>(x, [&](T v) { *out++ = v; });
}

template <typename T>
void compare(const at::Tensor& x, SiteState& s, int64_t call) {
  CompareRun run;
  for_each<T>(x, [&](T v) { run.step(as_double(v), *s.compare); });
  std::string message = run.message(*s.compare, call);
  if (message.empty()) return;
  s.compare_failed = true;
  s.compare_message = std::move(message);
}

}  // namespace cpu
}  // namespace dynstep

// records.jsonl lines of a flight recorder's dump (dynstep/flight/writer.py), encoded here rather than
// in Python: a dump of K = 64 steps writes tens of thousands of lines of five doubles each, and Python's
// float repr (David Gay's shortest digits) costs ~0.8 us per number, most of a dump's time.
//
// Each line is the site's JSON prefix (everything up to its last field, written by Python once per
// site) followed by the hit's numbers, byte for byte what writer._python_lines writes:
//   <prefix>, "call": C, "seq": S, "step": K, "stats": {"min": m, "max": M, "mean": u, "std": s,
//   "absmax": a, "nan": n, "inf": i, "count": c}}\n
// Floats are spelled as Python's repr spells them (shortest round-trip digits, fixed notation for
// decimal exponents -4..15 with ".0" on integral values, else d.ddde+XX), non-finite ones as the strings
// "nan", "inf", "-inf" (dynstep.core.jsonsafe.json_float). tests/flight/test_dump_speed.py checks
// equality with the Python encoder on edge values.
#include <torch/extension.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dynstep {
namespace {

namespace py = pybind11;

void put_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Python's repr(float) (float_repr_style 'short', Py_DTSF_ADD_DOT_0) for finite values.
void put_float(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "\"nan\"";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "\"inf\"" : "\"-inf\"";
    return;
  }
  char buf[40];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);  // [-]d[.ddd]e(+|-)XX
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  const size_t e = s.find('e');
  char digits[24];
  size_t n = 0;
  digits[n++] = s[0];
  for (size_t i = 2; i < e; ++i) digits[n++] = s[i];   // skip the '.' after the first digit
  int exp = 0;
  std::from_chars(s.data() + e + (s[e + 1] == '+' ? 2 : 1), s.data() + s.size(), exp);
  const int decpt = exp + 1;   // digits before the decimal point
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits, n);
    } else if (static_cast<size_t>(decpt) >= n) {
      out.append(digits, n);
      out.append(static_cast<size_t>(decpt) - n, '0');
      out += ".0";
    } else {
      out.append(digits, static_cast<size_t>(decpt));
      out += '.';
      out.append(digits + decpt, n - static_cast<size_t>(decpt));
    }
    return;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out.append(digits + 1, n - 1);
  }
  out += exp < 0 ? "e-" : "e+";
  const int mag = exp < 0 ? -exp : exp;
  if (mag < 10) out += '0';
  put_int(out, mag);
}

// prefixes: one per (site, shape, dtype, device); which[i]: hit i's prefix; ints: 6 per hit (call, seq,
// step, nan, inf, count); floats: 5 per hit (min, max, mean, std, absmax).
py::str flight_lines(const std::vector<std::string>& prefixes, const std::vector<int64_t>& which,
                     const std::vector<int64_t>& ints, const std::vector<double>& floats) {
  const size_t n = which.size();
  TORCH_CHECK(ints.size() == 6 * n && floats.size() == 5 * n, "flight_lines: expected 6 ints and 5 floats per hit, "
              "got ", ints.size(), " and ", floats.size(), " for ", n, " hits");
  std::string out;
  {
    py::gil_scoped_release no_gil;
    size_t longest = 0;
    for (const auto& p : prefixes) longest = std::max(longest, p.size());
    out.reserve(n * (longest + 260));
    static const char* const kPlace[] = {", \"call\": ", ", \"seq\": ", ", \"step\": "};
    static const char* const kFloats[] = {", \"stats\": {\"min\": ", ", \"max\": ", ", \"mean\": ", ", \"std\": ",
                                          ", \"absmax\": "};
    static const char* const kCounts[] = {", \"nan\": ", ", \"inf\": ", ", \"count\": "};
    for (size_t i = 0; i < n; ++i) {
      const int64_t p = which[i];
      TORCH_CHECK(p >= 0 && static_cast<size_t>(p) < prefixes.size(), "flight_lines: prefix ", p, " out of range");
      const int64_t* k = ints.data() + 6 * i;
      const double* f = floats.data() + 5 * i;
      out += prefixes[static_cast<size_t>(p)];
      for (int j = 0; j < 3; ++j) {
        out += kPlace[j];
        put_int(out, k[j]);
      }
      for (int j = 0; j < 5; ++j) {
        out += kFloats[j];
        put_float(out, f[j]);
      }
      for (int j = 0; j < 3; ++j) {
        out += kCounts[j];
        put_int(out, k[3 + j]);
      }
      out += "}}\n";
    }
  }
  return py::str(out);
}

}  // namespace

void add_flight_lines(py::module& m) {
  m.def("flight_lines", &flight_lines, py::arg("prefixes"), py::arg("which"), py::arg("ints"), py::arg("floats"));
  m.def("float_repr", [](double v) {   // one number as flight_lines spells it (tests)
    std::string out;
    put_float(out, v);
    return out;
  });
}

}  // namespace dynstep

// Helpers shared by the op case files (cases.cpp, cases_embedding.cpp).
#ifndef TEST_BACKEND_CASE_UTIL_H
#define TEST_BACKEND_CASE_UTIL_H

#include <initializer_list>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test/backend/harness.h"

namespace gpt2 {
namespace optest {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

inline Vec randn(Rng& rng, size_t n, double scale = 1.0, double offset = 0.0) {
  Vec v(n);
  for (auto& x : v) x = static_cast<float>(offset + scale * rng.normal());
  return v;
}
inline DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }

inline std::string join(std::initializer_list<std::pair<const char*, long>> kv, const char* extra = "") {
  std::ostringstream s;
  bool first = true;
  for (auto& p : kv) {
    s << (first ? "" : ",") << p.first << "=" << p.second;
    first = false;
  }
  if (*extra) s << "," << extra;
  return s.str();
}

// Embedding cases (cases_embedding.cpp): adds the cases of `op` to `v` when
// it is one of the embedding ops; returns whether it was.
bool add_embedding_cases(const std::string& op, Rng& rng, std::vector<std::unique_ptr<OpCase>>& v);
// The embedding ops at a GPT-2 shape, for perf_cases.
void add_embedding_perf_cases(Rng& rng, int B, int T, int C, int Vp, std::vector<std::unique_ptr<OpCase>>& v);

}  // namespace optest
}  // namespace gpt2

#endif  // TEST_BACKEND_CASE_UTIL_H

#include "train/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpt2 {

int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng) {
  const int V = static_cast<int>(logits.size());
  if (V == 0) throw std::runtime_error("sample_token: empty logits");
  std::vector<int> ids(V);
  for (int i = 0; i < V; i++) ids[i] = i;
  int k = (top_k <= 0 || top_k > V) ? V : top_k;
  if (k < V) {
    // Largest k logits; ties broken by id so the result never depends on the sort implementation.
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(k);
  }
  double maxv = -INFINITY;
  for (int id : ids) maxv = std::max(maxv, static_cast<double>(logits[id]));
  std::vector<double> p(ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    p[i] = std::exp((logits[ids[i]] - maxv) / temperature);
    sum += p[i];
  }
  const double u = rng.uniform() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    acc += p[i];
    if (u < acc) return ids[i];
  }
  return ids.back();
}

std::vector<int32_t> generate(GPT2& model, std::vector<int32_t> context, int count, float temperature, int top_k,
                              Rng& rng) {
  if (context.empty()) throw std::runtime_error("generate: empty context");
  std::vector<int32_t> out;
  const int window = model.max_seq();
  for (int i = 0; i < count; i++) {
    const int T = std::min<int>(window, static_cast<int>(context.size()));
    const int32_t* start = context.data() + context.size() - T;
    model.forward(start, nullptr, 1, T);
    const int tok = sample_token(model.logits_at(0, T - 1), temperature, top_k, rng);
    context.push_back(tok);
    out.push_back(tok);
  }
  return out;
}

}  // namespace gpt2

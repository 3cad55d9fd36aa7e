#include "train/sampler.h"

#include "distributed/preempt.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace gpt2 {

namespace {

// Candidate ids: all of them, or the top_k largest logits (ties by id so the
// result never depends on the sort implementation).
std::vector<int> top_k_ids(const std::vector<float>& logits, int top_k) {
  const int V = static_cast<int>(logits.size());
  std::vector<int> ids(V);
  for (int i = 0; i < V; i++) ids[i] = i;
  const int k = (top_k <= 0 || top_k > V) ? V : top_k;
  if (k < V) {
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    ids.resize(k);
  }
  return ids;
}

// Unnormalised softmax weights of the candidates at `temperature`; returns their sum.
double softmax_weights(const std::vector<float>& logits, const std::vector<int>& ids, float temperature,
                       std::vector<double>* w) {
  double maxv = -INFINITY;
  for (int id : ids) maxv = std::max(maxv, static_cast<double>(logits[id]));
  w->resize(ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    (*w)[i] = std::exp((logits[ids[i]] - maxv) / temperature);
    sum += (*w)[i];
  }
  return sum;
}

// Keeps the nucleus: the most probable candidates (ties by id) until their
// share of `sum` reaches top_p. Returns the kept weights' sum.
double keep_nucleus(std::vector<int>* ids, std::vector<double>* w, double sum, double top_p) {
  std::vector<size_t> order(ids->size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*w)[a] > (*w)[b] || ((*w)[a] == (*w)[b] && (*ids)[a] < (*ids)[b]);
  });
  std::vector<int> kept_ids;
  std::vector<double> kept_w;
  double acc = 0.0;
  for (size_t i : order) {
    kept_ids.push_back((*ids)[i]);
    kept_w.push_back((*w)[i]);
    acc += (*w)[i];
    if (acc >= (top_p - kTopPSlack) * sum) break;
  }
  *ids = std::move(kept_ids);
  *w = std::move(kept_w);
  return acc;
}

}  // namespace

int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng, float top_p) {
  if (logits.empty()) throw std::runtime_error("sample_token: empty logits");
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw std::runtime_error("sample_token: top_p " + std::to_string(top_p) + " outside (0, 1]");
  std::vector<int> ids = top_k_ids(logits, top_k);
  std::vector<double> w;
  double sum = softmax_weights(logits, ids, temperature, &w);
  if (top_p < 1.0f) sum = keep_nucleus(&ids, &w, sum, top_p);
  const double u = rng.uniform() * sum;
  double acc = 0.0;
  for (size_t i = 0; i < ids.size(); i++) {
    acc += w[i];
    if (u < acc) return ids[i];
  }
  return ids.back();
}

std::vector<int32_t> generate(GPT2& model, std::vector<int32_t> context, int count, float temperature, int top_k,
                              Rng& rng, float top_p, int32_t stop_token) {
  if (context.empty()) throw std::runtime_error("generate: empty context");
  std::vector<int32_t> out;
  const int window = model.max_seq();
  for (int i = 0; i < count && local_stop_signal() == 0; i++) {
    const int T = std::min<int>(window, static_cast<int>(context.size()));
    const int32_t* start = context.data() + context.size() - T;
    model.forward(start, nullptr, 1, T);
    const int tok = sample_token(model.logits_at(0, T - 1), temperature, top_k, rng, top_p);
    if (stop_token >= 0 && tok == stop_token) break;
    context.push_back(tok);
    out.push_back(tok);
  }
  return out;
}

}  // namespace gpt2

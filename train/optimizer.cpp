#include "train/optimizer.h"

#include <algorithm>
#include <stdexcept>

namespace gpt2 {

AdamW::AdamW(Backend& backend, const ParamLayout& layout, size_t begin, size_t end)
    : backend_(backend), layout_(layout), begin_(begin), end_(end) {
  if (begin > end || end > layout.total) throw std::runtime_error("AdamW: bad parameter range");
  const size_t n = std::max<size_t>(numel(), 1);  // an empty shard still owns valid (unused) buffers
  m_ = backend_.alloc(n, BufferRole::kOptimizer);
  v_ = backend_.alloc(n, BufferRole::kOptimizer);
  backend_.zero(m_);
  backend_.zero(v_);
}

AdamW::~AdamW() {
  backend_.free(m_);
  backend_.free(v_);
  if (!master_.empty()) backend_.free(master_);
}

void AdamW::reserve_master(Tensor params) {
  if (params.elem_bytes == 4 || numel() == 0) return;
  if (master_.empty()) master_ = backend_.alloc(numel(), BufferRole::kOptimizer);
}

void AdamW::attach_master(Tensor params) {
  reserve_master(params);
  if (master_.empty()) return;
  std::vector<float> host(numel());
  backend_.download(host.data(), params.slice(0, numel()));  // widened exactly
  backend_.upload(master_, host.data());
}

void AdamW::step(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h) {
  // One update call per (tensor ∩ shard), so each piece gets its own decay.
  for (int k = 0; k < kNumParamTensors; k++) {
    const size_t lo = std::max(begin_, layout_.offset[k]);
    const size_t hi = std::min(end_, layout_.offset[k] + layout_.numel[k]);
    if (lo >= hi) continue;
    const size_t n = hi - lo, rel = lo - begin_;
    const float wd = ParamLayout::decays(k) ? h.weight_decay : 0.0f;
    backend_.adamw_update_clipped({.params = params.slice(rel, n),
                                   .master = master_.empty() ? Tensor{} : master_.slice(rel, n),
                                   .grads = shard_grads.slice(rel, n), .m = m_.slice(rel, n), .v = v_.slice(rel, n),
                                   .lr = lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps, .weight_decay = wd,
                                   .t = t}, clip);
  }
}

void AdamW::get_state(std::vector<float>* m, std::vector<float>* v, std::vector<float>* master) const {
  m->resize(numel());
  v->resize(numel());
  master->resize(has_master() ? numel() : 0);
  if (numel() == 0) return;
  backend_.download(m->data(), m_.slice(0, numel()));
  backend_.download(v->data(), v_.slice(0, numel()));
  if (has_master()) backend_.download(master->data(), master_);
}

void AdamW::set_state(const std::vector<float>& m, const std::vector<float>& v, const std::vector<float>& master) {
  if (m.size() != numel() || v.size() != numel() || (!master.empty() && master.size() != numel()))
    throw std::runtime_error("AdamW: optimizer state size mismatch");
  if (numel() == 0) return;
  backend_.upload(m_.slice(0, numel()), m.data());
  backend_.upload(v_.slice(0, numel()), v.data());
  if (!master.empty() && has_master()) backend_.upload(master_, master.data());
}

}  // namespace gpt2

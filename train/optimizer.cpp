#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace gpt2 {

AdamW::AdamW(Backend& backend, const ParamLayout& layout, size_t begin, size_t end, Backend* host)
    : backend_(backend), host_(host), layout_(layout), begin_(begin), end_(end) {
  if (begin > end || end > layout.total) throw std::runtime_error("AdamW: bad parameter range");
  const size_t n = std::max<size_t>(numel(), 1);  // an empty shard still owns valid (unused) buffers
  Backend& b = state_backend();
  m_ = b.alloc(n, BufferRole::kOptimizer);
  v_ = b.alloc(n, BufferRole::kOptimizer);
  b.zero(m_);
  b.zero(v_);
  if (host_) host_grads_ = host_->alloc(n, BufferRole::kOptimizer);
}

AdamW::~AdamW() {
  Backend& b = state_backend();
  b.free(m_);
  b.free(v_);
  if (!master_.empty()) b.free(master_);
  if (!host_grads_.empty()) b.free(host_grads_);
}

void AdamW::reserve_master(Tensor params) {
  fp32_copy_ = params.elem_bytes == 4;
  if ((fp32_copy_ && !host_) || numel() == 0) return;
  if (master_.empty()) master_ = state_backend().alloc(numel(), BufferRole::kOptimizer);
}

void AdamW::attach_master(Tensor params) {
  reserve_master(params);
  if (master_.empty()) return;
  std::vector<float> host(numel());
  backend_.download(host.data(), params.slice(0, numel()));  // widened exactly
  state_backend().upload(master_, host.data());
}

template <class Update>
void AdamW::for_each_piece(Update update) const {
  for (int k = 0; k < kNumParamTensors; k++) {
    const size_t lo = std::max(begin_, layout_.offset[k]);
    const size_t hi = std::min(end_, layout_.offset[k] + layout_.numel[k]);
    if (lo < hi) update(lo - begin_, hi - lo, ParamLayout::decays(k));
  }
}

void AdamW::step(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h) {
  if (host_) return step_offloaded(params, shard_grads, lr, clip, t, h);
  for_each_piece([&](size_t rel, size_t n, bool decays) {
    backend_.adamw_update_clipped({.params = params.slice(rel, n),
                                   .master = master_.empty() ? Tensor{} : master_.slice(rel, n),
                                   .grads = shard_grads.slice(rel, n), .m = m_.slice(rel, n), .v = v_.slice(rel, n),
                                   .lr = lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps,
                                   .weight_decay = decays ? h.weight_decay : 0.0f, .t = t}, clip);
  });
}

// The clip scale and the gradients come down (one host wait), the host
// updates its fp32 copy, the copy goes up into the parameters.
void AdamW::step_offloaded(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h) {
  if (numel() == 0) return;
  double state[2];
  backend_.read_clip(state, clip);
  if (std::isnan(state[1])) return;  // a non-finite norm: no update, as on the device
  backend_.download(static_cast<float*>(host_grads_.ptr), shard_grads.slice(0, numel()));
  for_each_piece([&](size_t rel, size_t n, bool decays) {
    host_->adamw_update({.params = master_.slice(rel, n), .grads = host_grads_.slice(rel, n), .m = m_.slice(rel, n),
                         .v = v_.slice(rel, n), .lr = lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps,
                         .weight_decay = decays ? h.weight_decay : 0.0f,
                         .grad_scale = static_cast<float>(state[1]), .t = t});
  });
  backend_.upload(params.slice(0, numel()), static_cast<const float*>(master_.ptr));
}

void AdamW::get_state(std::vector<float>* m, std::vector<float>* v, std::vector<float>* master) const {
  m->resize(numel());
  v->resize(numel());
  // An offloaded fp32 run's copy equals its parameters: not part of the state.
  const bool master_in_state = has_master() && !fp32_copy_;
  master->resize(master_in_state ? numel() : 0);
  if (numel() == 0) return;
  Backend& b = state_backend();
  b.download(m->data(), m_.slice(0, numel()));
  b.download(v->data(), v_.slice(0, numel()));
  if (master_in_state) b.download(master->data(), master_);
}

void AdamW::set_state(const std::vector<float>& m, const std::vector<float>& v, const std::vector<float>& master) {
  if (m.size() != numel() || v.size() != numel() || (!master.empty() && master.size() != numel()))
    throw std::runtime_error("AdamW: optimizer state size mismatch");
  if (numel() == 0) return;
  Backend& b = state_backend();
  b.upload(m_.slice(0, numel()), m.data());
  b.upload(v_.slice(0, numel()), v.data());
  if (!master.empty() && has_master() && !fp32_copy_) b.upload(master_, master.data());
}

}  // namespace gpt2

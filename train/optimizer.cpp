#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "train/test_hooks.h"
#include "util/test_hook.h"

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
  if (!host_) return;
  host_io_ = host_->alloc(2 * n, BufferRole::kOptimizer);
  host_->zero(host_io_);
  master_ = host_io_.slice(0, n);
  host_grads_ = host_io_.slice(n, n);
  if (numel() > 0) pinned_ = backend_.pin_host(host_io_.ptr, host_io_.bytes());
  if (size_t c = test_offload_chunk()) chunk_ = c;
  drop_landing_wait_ = test_hook_drops_wait("GPT2_TEST_DROP_OFFLOAD_WAIT", "1", "",
                                            "the wait for an offloaded gradient chunk to land");
}

AdamW::~AdamW() {
  Backend& b = state_backend();
  b.free(m_);
  b.free(v_);
  if (host_) {
    try {  // queued transfers still use the host block; a faulted device has none to run
      backend_.synchronize();
      if (pinned_) backend_.unpin_host(host_io_.ptr);
      if (!via_.empty()) backend_.free(via_);
    } catch (const std::exception&) {
    }
    host_->free(host_io_);
  } else if (!master_.empty()) {
    b.free(master_);
  }
}

void AdamW::reserve_master(Tensor params) {
  fp32_copy_ = params.elem_bytes == 4;
  if (numel() == 0) return;
  if (host_) {
    if (!fp32_copy_ && via_.empty()) via_ = backend_.alloc(std::min(numel(), chunk_), BufferRole::kOptimizer);
    return;
  }
  if (!fp32_copy_ && master_.empty()) master_ = backend_.alloc(numel(), BufferRole::kOptimizer);
}

void AdamW::attach_master(Tensor params) {
  reserve_master(params);
  if (master_.empty() || numel() == 0) return;
  if (host_) backend_.synchronize();  // a queued upload may still read the copy
  std::vector<float> host(numel());
  backend_.download(host.data(), params.slice(0, numel()));  // widened exactly
  state_backend().upload(master_.slice(0, numel()), host.data());
}

template <class Update>
void AdamW::for_each_piece(size_t lo, size_t hi, Update update) const {
  for (int k = 0; k < kNumParamTensors; k++) {
    const size_t a = std::max(begin_ + lo, layout_.offset[k]);
    const size_t b = std::min(begin_ + hi, layout_.offset[k] + layout_.numel[k]);
    if (a < b) update(a - begin_, b - a, ParamLayout::decays(k));
  }
}

void AdamW::step(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h) {
  if (host_) return step_offloaded(params, shard_grads, lr, clip, t, h);
  for_each_piece(0, numel(), [&](size_t rel, size_t n, bool decays) {
    backend_.adamw_update_clipped({.params = params.slice(rel, n),
                                   .master = master_.empty() ? Tensor{} : master_.slice(rel, n),
                                   .grads = shard_grads.slice(rel, n), .m = m_.slice(rel, n), .v = v_.slice(rel, n),
                                   .lr = lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps,
                                   .weight_decay = decays ? h.weight_decay : 0.0f, .t = t}, clip);
  });
}

// The clip scale comes down (one host wait), then chunk by chunk: the host
// waits for chunk c's gradients, sends for chunk c + kAhead's, updates its
// copy of chunk c and sends it up. One stream carries both directions, so a
// chunk's download is queued behind the uploads issued before it.
void AdamW::step_offloaded(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h) {
  if (numel() == 0) return;
  backend_.wait_mark(uploaded_);  // the last step's uploads read the copy this step rewrites
  double state[2];
  backend_.read_clip(state, clip);
  if (std::isnan(state[1])) return;  // a non-finite norm: no update, as on the device
  constexpr size_t kAhead = 2;
  const size_t chunks = (numel() + chunk_ - 1) / chunk_;
  auto lo_of = [&](size_t c) { return c * chunk_; };
  auto len_of = [&](size_t c) { return std::min(chunk_, numel() - c * chunk_); };
  auto via = [&](size_t len) { return via_.empty() ? Tensor{} : via_.slice(0, len); };
  std::vector<uint64_t> landed(chunks);
  auto send_down = [&](size_t c) {
    backend_.download_async(static_cast<float*>(host_grads_.ptr) + lo_of(c), shard_grads.slice(lo_of(c), len_of(c)),
                            via(len_of(c)));
    landed[c] = backend_.issue_mark();
  };
  for (size_t c = 0; c < std::min(kAhead, chunks); c++) send_down(c);
  for (size_t c = 0; c < chunks; c++) {
    if (!drop_landing_wait_) backend_.wait_mark(landed[c]);
    if (c + kAhead < chunks) send_down(c + kAhead);
    for_each_piece(lo_of(c), lo_of(c) + len_of(c), [&](size_t rel, size_t n, bool decays) {
      host_->adamw_update({.params = master_.slice(rel, n), .grads = host_grads_.slice(rel, n), .m = m_.slice(rel, n),
                           .v = v_.slice(rel, n), .lr = lr, .beta1 = h.beta1, .beta2 = h.beta2, .eps = h.eps,
                           .weight_decay = decays ? h.weight_decay : 0.0f,
                           .grad_scale = static_cast<float>(state[1]), .t = t});
    });
    backend_.upload_async(params.slice(lo_of(c), len_of(c)), static_cast<const float*>(master_.ptr) + lo_of(c),
                          via(len_of(c)));
  }
  uploaded_ = backend_.issue_mark();
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
  if (master_in_state) b.download(master->data(), master_.slice(0, numel()));
}

void AdamW::set_state(const std::vector<float>& m, const std::vector<float>& v, const std::vector<float>& master) {
  if (m.size() != numel() || v.size() != numel() || (!master.empty() && master.size() != numel()))
    throw std::runtime_error("AdamW: optimizer state size mismatch");
  if (numel() == 0) return;
  if (host_) backend_.synchronize();  // a queued upload may still read the copy
  Backend& b = state_backend();
  b.upload(m_.slice(0, numel()), m.data());
  b.upload(v_.slice(0, numel()), v.data());
  if (!master.empty() && has_master() && !fp32_copy_) b.upload(master_.slice(0, numel()), master.data());
}

}  // namespace gpt2

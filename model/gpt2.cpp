#include "model/gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "util/rng.h"

namespace gpt2 {

// ---------------------------------------------------------------- layout

namespace {

size_t wte_rows_for(const ParamLayout& p) {
  const size_t C = p.channels();
  if (C == 0) return 0;  // an invalid config, refused by whoever validates it
  const size_t Vp = p.numel[kWte] / C;
  if (const char* env = std::getenv("GPT2_ZERO2_WTE_CHUNK_ROWS"); env && *env) {
    const long long rows = std::atoll(env);
    if (rows < 1) throw std::runtime_error("GPT2_ZERO2_WTE_CHUNK_ROWS must be a positive row count");
    return std::min(static_cast<size_t>(rows), Vp);
  }
  const size_t fit = p.num_layers > 0 ? p.layer_unit_numel() / C / 64 * 64 : 0;
  return std::min(std::max<size_t>(fit, 64), Vp);
}

}  // namespace

ParamLayout ParamLayout::for_config(const GPT2Config& cfg) {
  const size_t C = cfg.channels, L = cfg.num_layers;
  const size_t Vp = cfg.padded_vocab_size, maxT = cfg.max_seq_len;
  ParamLayout p;
  p.num_layers = cfg.num_layers;
  p.numel = {Vp * C,     maxT * C,  L * C,         L * C,
             L * 3 * C * C, L * 3 * C, L * C * C, L * C,
             L * C,     L * C,     L * 4 * C * C, L * 4 * C,
             L * C * 4 * C, L * C,  C,             C};
  size_t off = 0;
  for (int t = 0; t < kNumParamTensors; t++) {
    p.offset[t] = off;
    off += p.numel[t];
  }
  p.total = off;
  p.wte_rows = wte_rows_for(p);
  return p;
}

const char* ParamLayout::name(int t) {
  static const char* const kNames[kNumParamTensors] = {
      "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
      "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
  return kNames[t];
}

size_t ParamLayout::layer_unit_numel() const {
  size_t n = 0;
  for (int t = 0; t < kNumParamTensors; t++)
    if (is_per_layer(t)) n += layer_numel(t);
  return n;
}

int ParamLayout::num_wte_chunks() const {
  const size_t rows = wte_chunk_rows(), Vp = numel[kWte] / channels();
  return static_cast<int>((Vp + rows - 1) / rows);
}

size_t ParamLayout::wte_chunk_numel(int k) const {
  const size_t Vp = numel[kWte] / channels();
  return std::min(wte_rows, Vp - wte_chunk_row0(k)) * channels();
}

bool ParamLayout::is_per_layer(int t) { return t != kWte && t != kWpe && t != kLnfw && t != kLnfb; }

bool ParamLayout::decays(int t) {
  return t == kWte || t == kWpe || t == kQkvw || t == kAttprojw || t == kFcw || t == kFcprojw;
}

// ---------------------------------------------------------------- construction

GPT2::GPT2(Backend& backend, const GPT2Config& cfg, int B, int T, GradMode grad_mode, size_t param_capacity,
           int recompute)
    : backend_(backend),
      cfg_(cfg),
      layout_(ParamLayout::for_config(cfg)),
      B_(B),
      T_(T),
      grad_mode_(grad_mode),
      recompute_gelu_(recompute >= 1),
      recompute_ln_(recompute >= 2) {
  if (recompute < 0 || recompute > 2) throw std::runtime_error("recompute level must be 0, 1 or 2");
  cfg_.validate("model config");
  if (B < 1 || T < 1) throw std::runtime_error("batch size and sequence length must be >= 1");
  if (T > cfg.max_seq_len)
    throw std::runtime_error("sequence length " + std::to_string(T) + " exceeds the model's max_seq " +
                             std::to_string(cfg.max_seq_len));
  if (param_capacity == 0) param_capacity = layout_.total;
  if (param_capacity < layout_.total) throw std::runtime_error("param_capacity below the parameter count");
  params_ = backend_.alloc(param_capacity, BufferRole::kParams);
  owned_.push_back(params_);
  backend_.zero(params_);  // padding stays zero forever
  if (grad_mode_ == GradMode::kFull) {
    grads_ = backend_.alloc(param_capacity, BufferRole::kGrads);
    owned_.push_back(grads_);
    backend_.zero(grads_);
    gradient_bytes_ = grads_.bytes();
  }
  allocate_activations();
}

GPT2::~GPT2() {
  for (Tensor& t : owned_) backend_.free(t);
}

void GPT2::allocate_activations() {
  const size_t N = static_cast<size_t>(B_) * T_, C = cfg_.channels, L = cfg_.num_layers;
  const size_t Vp = cfg_.padded_vocab_size;
  auto take = [&](size_t numel, BufferRole role = BufferRole::kActivations) {
    Tensor t = backend_.alloc(numel, role);
    owned_.push_back(t);
    activation_bytes_ += t.bytes();
    return t;
  };
  Activations& a = acts_;
  // --recompute 2: one buffer for every layer's ln1 and ln2, recomputed from the saved input, mean and rstd.
  const size_t ln_layers = recompute_ln_ ? 1 : L;
  a.encoded = take(N * C);
  a.ln1 = take(ln_layers * N * C);
  a.ln1_mean = take(L * N, BufferRole::kStats);
  a.ln1_rstd = take(L * N, BufferRole::kStats);
  a.qkv = take(L * N * 3 * C);
  a.atty = take(L * N * C);
  a.att_saved = take(L * backend_.attention_saved_numel(B_, T_, cfg_.num_heads));
  // The projections are added into the residual stream right away and never
  // read by the backward: one layer-sized buffer for both.
  a.attproj = take(N * C);
  a.fcproj = a.attproj;
  a.residual2 = take(L * N * C);
  a.ln2 = recompute_ln_ ? a.ln1 : take(L * N * C);
  a.ln2_mean = take(L * N, BufferRole::kStats);
  a.ln2_rstd = take(L * N, BufferRole::kStats);
  a.fch = take(L * N * 4 * C);
  // --recompute 1: one layer's GELU output, recomputed from fch in the backward
  // (saves (L-1)*B*T*4C elements, the largest activation after the logits).
  a.fch_gelu = take((recompute_gelu_ ? 1 : L) * N * 4 * C);
  a.residual3 = take(L * N * C);
  a.lnf = take(N * C);
  a.lnf_mean = take(N, BufferRole::kStats);
  a.lnf_rstd = take(N, BufferRole::kStats);
  a.losses = take(N, BufferRole::kStats);
  a.logits = take(N * Vp);
  a.tokens = take(N, BufferRole::kTokens);
  a.targets = take(N, BufferRole::kTokens);
  // Backward scratch. dln takes the projections' buffer (forward-only). With
  // kFull gradients the lm_head backward reads dlogits first thing and never
  // again (the wte gradient's lm_head part is made then too), so the other
  // scratch buffers, largest first, take the logits buffer while they fit.
  // kExternal gradients read dlogits after the backward (wte_grad_chunk):
  // everything separate.
  if (grad_mode_ != GradMode::kNone) {
    a.dln = a.attproj;
    const size_t room = grad_mode_ == GradMode::kFull ? a.logits.numel : 0;
    size_t used = 0;
    auto carve = [&](size_t numel) {
      if (used + numel > room) return take(numel);
      used += numel;
      return a.logits.slice(used - numel, numel);
    };
    a.dfch = carve(N * 4 * C);
    a.dqkv = carve(N * 3 * C);
    a.datty = carve(N * C);
    a.dresidual = carve(N * C);
  }
  a.att_scratch = take(backend_.attention_scratch_numel(B_, T_, cfg_.num_heads), BufferRole::kScratch);
}

// ---------------------------------------------------------------- parameters

void GPT2::init_random(uint64_t seed) {
  std::vector<float> host(layout_.total, 0.0f);
  const double residual_scale = 1.0 / std::sqrt(2.0 * cfg_.num_layers);
  // Each tensor is filled in fixed-size chunks, each chunk from its own stream
  // seeded by (seed, tensor, chunk): parallel, yet independent of thread count.
  const size_t kChunk = 1 << 16;
  for (int t = 0; t < kNumParamTensors; t++) {
    float* base = host.data() + layout_.offset[t];
    // wte's padded vocab rows stay zero: no real token looks them up and the
    // classifier ignores their logits' columns.
    const size_t n = t == kWte ? static_cast<size_t>(cfg_.vocab_size) * cfg_.channels : layout_.numel[t];
    const bool is_ln_weight = (t == kLn1w || t == kLn2w || t == kLnfw);
    const bool is_bias = (t == kLn1b || t == kLn2b || t == kLnfb || t == kQkvb || t == kAttprojb ||
                          t == kFcb || t == kFcprojb);
    if (is_ln_weight) {
      for (size_t i = 0; i < n; i++) base[i] = 1.0f;
      continue;
    }
    if (is_bias) continue;  // zeros
    const double stddev = 0.02 * ((t == kAttprojw || t == kFcprojw) ? residual_scale : 1.0);
    const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (long c = 0; c < chunks; c++) {
      Rng rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(t) * 0x100000001B3ULL +
              static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ULL);
      size_t end = std::min(n, static_cast<size_t>(c + 1) * kChunk);
      for (size_t i = static_cast<size_t>(c) * kChunk; i < end; i++)
        base[i] = static_cast<float>(rng.normal() * stddev);
    }
  }
  set_parameters(host);
}

void GPT2::set_parameters(const std::vector<float>& host) {
  if (host.size() != layout_.total)
    throw std::runtime_error("set_parameters: expected " + std::to_string(layout_.total) +
                             " floats, got " + std::to_string(host.size()));
  backend_.upload(params_.slice(0, layout_.total), host.data());
}

std::vector<float> GPT2::get_parameters() const {
  std::vector<float> host(layout_.total);
  backend_.download(host.data(), params_.slice(0, layout_.total));
  return host;
}

void GPT2::zero_grad() {
  if (grad_mode_ == GradMode::kFull) backend_.zero(grads_);
  // kExternal: the caller's sink owns (and zeroes) its gradients.
}

Tensor GPT2::grads() const {
  if (grad_mode_ != GradMode::kFull)
    throw std::runtime_error(grad_mode_ == GradMode::kNone ? "grads(): a forward-only model has no gradients"
                                                            : "grads(): the gradients are the caller's (GradMode::kExternal)");
  return grads_;
}

void GPT2::wte_chunk_parts(int k, Tensor dst, bool lm_head, bool embedding) {
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_, C = layout_.channels();
  const int Vp = cfg_.padded_vocab_size;
  // dlogits (the logits buffer after the fused classifier), lnf's output, and
  // at the end of the backward the embedding's gradient in dresidual.
  backend_.tied_embedding_backward_rows(dst, lm_head ? acts_.logits.slice(0, N * Vp) : Tensor{},
                                        lm_head ? acts_.lnf.slice(0, N * C) : Tensor{},
                                        embedding ? acts_.dresidual.slice(0, N * C) : Tensor{},
                                        acts_.tokens.slice(0, N), static_cast<int>(N), static_cast<int>(C), Vp,
                                        static_cast<int>(layout_.wte_chunk_row0(k)));
}

void GPT2::wte_grad_chunk(int k, Tensor dst) {
  if (pass_ != Pass::kBackwardDone || grad_mode_ != GradMode::kExternal)
    throw std::runtime_error("wte_grad_chunk(): only after a backward() of a GradMode::kExternal model");
  if (k < 0 || k >= layout_.num_wte_chunks()) throw std::runtime_error("wte_grad_chunk(): no chunk " + std::to_string(k));
  if (dst.numel != layout_.wte_chunk_numel(k)) throw std::runtime_error("wte_grad_chunk(): destination of the wrong size");
  backend_.zero(dst);
  wte_chunk_parts(k, dst, true, true);
}

// ---------------------------------------------------------------- forward

void GPT2::check_batch(const int32_t* inputs, const int32_t* targets, int B, int T) const {
  if (B < 1 || B > B_ || T < 1 || T > T_)
    throw std::runtime_error("forward: batch " + std::to_string(B) + "x" + std::to_string(T) +
                             " outside the allocated " + std::to_string(B_) + "x" + std::to_string(T_));
  const int V = cfg_.vocab_size;
  const size_t N = static_cast<size_t>(B) * T;
  for (size_t i = 0; i < N; i++) {
    if (inputs[i] < 0 || inputs[i] >= V)
      throw std::runtime_error("forward: input token " + std::to_string(inputs[i]) + " at position " +
                               std::to_string(i) + " is outside the vocabulary [0, " +
                               std::to_string(V) + ")");
    if (targets && targets[i] != kIgnoreTarget && (targets[i] < 0 || targets[i] >= V))
      throw std::runtime_error("forward: target token " + std::to_string(targets[i]) +
                               " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                               std::to_string(V) + ") and is not the ignore id " +
                               std::to_string(kIgnoreTarget));
  }
}

float GPT2::forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                    bool prepare_backward, float dloss_scale) {
  check_batch(inputs, targets, B, T);
  if (prepare_backward && grad_mode_ == GradMode::kNone)
    throw std::runtime_error("forward: a forward-only model (GradMode::kNone) cannot prepare a backward");
  cur_B_ = B;
  cur_T_ = T;
  pass_ = Pass::kForward;  // kPrepared only once the whole forward has run
  const size_t N = static_cast<size_t>(B) * T;
  backend_.upload_tokens(acts_.tokens.slice(0, N), inputs);
  dropping_ = prepare_backward && dropout_.any();
  forward_layers();
  // lm_head is tied to wte: logits = lnf @ wte^T over the padded vocabulary.
  backend_.matmul_forward(acts_.logits.slice(0, N * cfg_.padded_vocab_size), acts_.lnf.slice(0, N * cfg_.channels),
                          param(kWte), Tensor{}, N, cfg_.channels, cfg_.padded_vocab_size);
  loss_sum_ = 0.0;
  loss_count_ = 0;
  if (!targets) return 0.0f;
  const float loss = forward_loss(targets, prepare_backward, dloss_scale);
  if (prepare_backward) pass_ = Pass::kPrepared;
  return loss;
}

void GPT2::set_dropout(const DropoutRates& rates, uint64_t seed) {
  for (float p : {rates.embd, rates.resid, rates.attn})
    if (!(p >= 0.0f && p < 1.0f)) throw std::runtime_error("dropout: rate " + std::to_string(p) + " is outside [0, 1)");
  dropout_ = rates;
  dropout_seed_ = seed;
}

void GPT2::set_dropout_position(uint32_t step, uint64_t token0) {
  dropout_step_ = step;
  dropout_token0_ = token0;
}

DropoutMask GPT2::mask_of(int layer, DropoutMask::Site site, float p) const {
  DropoutMask m;
  m.seed = dropout_seed_;
  m.step = dropout_step_;
  m.stream = DropoutMask::stream_of(layer, site);
  m.token0 = dropout_token0_;
  m.p = dropping_ ? p : 0.0f;
  return m;
}

void GPT2::drop(Tensor x, int layer, DropoutMask::Site site, float p, int C) {
  dropped_gradient(x, x, layer, site, p, C);  // in place: the same mask, applied where the tensor is
}

Tensor GPT2::dropped_gradient(Tensor dres, Tensor scratch, int layer, DropoutMask::Site site, float p, int C) {
  if (!dropping_ || p == 0.0f) return dres;
  backend_.dropout(scratch, dres, mask_of(layer, site, p), static_cast<int>(dres.numel / C), C);
  return scratch;
}

// On the uploaded tokens of the current batch. Each residual add runs with the
// layernorm that reads its sum (ln2; the next layer's ln1, or lnf after the last).
void GPT2::forward_layers() {
  const int B = cur_B_, T = cur_T_;
  const int C = cfg_.channels, L = cfg_.num_layers, NH = cfg_.num_heads;
  const size_t N = static_cast<size_t>(B) * T, Nmax = static_cast<size_t>(B_) * T_;
  Backend& be = backend_;
  Activations& a = acts_;
  // Per-layer activation slices use the allocated (max) stride so one buffer
  // serves any smaller batch.
  auto layer = [&](Tensor t, int l, size_t per_row) { return t.slice(l * Nmax * per_row, N * per_row); };
  auto pl = [&](int t, int l) { return layout_.view(params_, t, l); };
  const size_t saved_stride = be.attention_saved_numel(B_, T_, NH);
  const size_t saved_numel = be.attention_saved_numel(B, T, NH);
  struct Norm {
    Tensor out, mean, rstd, w, b;
  };
  auto ln1_of = [&](int l) {
    return Norm{layer(a.ln1, recompute_ln_ ? 0 : l, C), layer(a.ln1_mean, l, 1), layer(a.ln1_rstd, l, 1),
                pl(kLn1w, l), pl(kLn1b, l)};
  };
  const Norm final_norm{a.lnf.slice(0, N * C), a.lnf_mean.slice(0, N), a.lnf_rstd.slice(0, N), param(kLnfw),
                        param(kLnfb)};

  be.encoder_forward(a.encoded.slice(0, N * C), a.tokens.slice(0, N), param(kWte), param(kWpe), B, T, C);
  drop(a.encoded.slice(0, N * C), 0, DropoutMask::kEmbedding, dropout_.embd, C);
  const Norm first = ln1_of(0);
  be.layernorm_forward(first.out, first.mean, first.rstd, a.encoded.slice(0, N * C), first.w, first.b, N, C);
  for (int l = 0; l < L; l++) {
    const ProfileRange range(be, "forward layer " + std::to_string(l));
    Tensor residual = l == 0 ? a.encoded.slice(0, N * C) : layer(a.residual3, l - 1, C);
    const int ln_l = recompute_ln_ ? 0 : l;
    Tensor ln1 = layer(a.ln1, ln_l, C);
    Tensor qkv = layer(a.qkv, l, 3 * C), atty = layer(a.atty, l, C);
    Tensor saved = a.att_saved.slice(l * saved_stride, saved_numel);
    Tensor attproj = a.attproj.slice(0, N * C), residual2 = layer(a.residual2, l, C);
    Tensor ln2 = layer(a.ln2, ln_l, C), ln2_mean = layer(a.ln2_mean, l, 1), ln2_rstd = layer(a.ln2_rstd, l, 1);
    Tensor fch = layer(a.fch, l, 4 * C), fch_gelu = layer(a.fch_gelu, recompute_gelu_ ? 0 : l, 4 * C);
    Tensor fcproj = a.fcproj.slice(0, N * C), residual3 = layer(a.residual3, l, C);
    const Norm next = l + 1 < L ? ln1_of(l + 1) : final_norm;

    be.matmul_forward(qkv, ln1, pl(kQkvw, l), pl(kQkvb, l), N, C, 3 * C);
    be.attention_forward(atty, saved, qkv, B, T, C, NH, mask_of(l, DropoutMask::kAttentionProbs, dropout_.attn));
    be.matmul_forward(attproj, atty, pl(kAttprojw, l), pl(kAttprojb, l), N, C, C);
    drop(attproj, l, DropoutMask::kAttentionProj, dropout_.resid, C);
    be.residual_layernorm_forward(residual2, ln2, ln2_mean, ln2_rstd, residual, attproj, pl(kLn2w, l),
                                  pl(kLn2b, l), N, C);
    be.matmul_gelu_forward(fch_gelu, fch, ln2, pl(kFcw, l), pl(kFcb, l), N, C, 4 * C);
    be.matmul_forward(fcproj, fch_gelu, pl(kFcprojw, l), pl(kFcprojb, l), N, 4 * C, C);
    drop(fcproj, l, DropoutMask::kMlpProj, dropout_.resid, C);
    be.residual_layernorm_forward(residual3, next.out, next.mean, next.rstd, residual2, fcproj, next.w, next.b, N,
                                  C);
  }
}

// The classifier on the logits of the current batch: per-token losses (kept on the
// device while deferring), and dlogits in place when prepare_backward.
float GPT2::forward_loss(const int32_t* targets, bool prepare_backward, float dloss_scale) {
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size;
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_, Nmax = static_cast<size_t>(B_) * T_;
  Backend& be = backend_;
  Activations& a = acts_;
  Tensor logits = a.logits.slice(0, N * Vp);
  Tensor tgt = a.targets.slice(0, N);
  be.upload_tokens(tgt, targets);
  const bool deferred = deferred_slots_ > 0;  // losses stay on the device until collect_deferred_losses
  const size_t slot = deferred_rows_.size();
  if (deferred && slot >= static_cast<size_t>(deferred_slots_))
    throw std::runtime_error("forward: more forwards than begin_deferred_losses(" + std::to_string(deferred_slots_) +
                             ") announced");
  Tensor token_losses = deferred ? loss_slots_.slice(slot * Nmax, N) : a.losses.slice(0, N);
  be.classifier_forward_backward(logits, token_losses, tgt, N, V, Vp, prepare_backward ? dloss_scale : 0.0f);
  if (deferred) {
    deferred_rows_.push_back(N);
    for (size_t i = 0; i < N; i++) deferred_count_ += targets[i] != kIgnoreTarget;
    return 0.0f;
  }
  const std::vector<float> token_loss = losses();
  // Ignored targets have loss exactly 0; the mean is over the others (PyTorch's
  // ignore_index semantics; 0 when every target is ignored, where PyTorch gives NaN).
  for (size_t i = 0; i < N; i++) {
    loss_sum_ += token_loss[i];
    loss_count_ += targets[i] != kIgnoreTarget;
  }
  return loss_count_ ? static_cast<float>(loss_sum_ / static_cast<double>(loss_count_)) : 0.0f;
}

void GPT2::begin_deferred_losses(int forwards) {
  reserve_deferred_losses(forwards);
  deferred_slots_ = forwards;
  deferred_rows_.clear();
  deferred_count_ = 0;
}

void GPT2::reserve_deferred_losses(int forwards) {
  if (forwards < 1) throw std::runtime_error("deferred losses: need at least one forward");
  const size_t Nmax = static_cast<size_t>(B_) * T_, need = static_cast<size_t>(forwards) * Nmax;
  if (loss_slots_.numel < need) {
    if (!loss_slots_.empty()) {
      backend_.free(loss_slots_);
      owned_.erase(std::find_if(owned_.begin(), owned_.end(), [&](const Tensor& t) { return t.ptr == loss_slots_.ptr; }));
      activation_bytes_ -= loss_slots_.bytes();
    }
    loss_slots_ = backend_.alloc(need, BufferRole::kStats);
    owned_.push_back(loss_slots_);
    activation_bytes_ += loss_slots_.bytes();
  }
}

double GPT2::collect_deferred_losses() {
  if (deferred_slots_ == 0) throw std::runtime_error("collect_deferred_losses: begin_deferred_losses was not called");
  const size_t Nmax = static_cast<size_t>(B_) * T_, used = deferred_rows_.size();
  std::vector<float> host(used * Nmax);
  if (used > 0) backend_.download(host.data(), loss_slots_.slice(0, used * Nmax));
  loss_sum_ = 0.0;
  for (size_t k = 0; k < used; k++) {  // per forward from 0, then added in order: forward()'s own sums
    double sum = 0.0;
    for (size_t i = 0; i < deferred_rows_[k]; i++) sum += host[k * Nmax + i];
    loss_sum_ += sum;
  }
  loss_count_ = deferred_count_;
  deferred_slots_ = 0;
  deferred_rows_.clear();
  return loss_sum_;
}

// ---------------------------------------------------------------- backward

void GPT2::backward(int B, int T, GradientSink* sink) {
  if (grad_mode_ == GradMode::kNone) throw std::runtime_error("backward: a forward-only model (GradMode::kNone)");
  if (pass_ != Pass::kPrepared || B != cur_B_ || T != cur_T_)
    throw std::runtime_error("backward(" + std::to_string(B) + ", " + std::to_string(T) +
                             "): the last forward was not a training forward (prepare_backward) of that batch");
  if (!sink && grad_mode_ != GradMode::kFull) throw std::runtime_error("backward: GradMode::kExternal needs a sink");
  FlatGradientSink own(layout_, grads_);
  GradientSink& out = sink ? *sink : own;
  const int C = cfg_.channels, L = cfg_.num_layers, NH = cfg_.num_heads;
  const int Vp = cfg_.padded_vocab_size;
  const size_t N = static_cast<size_t>(B) * T, Nmax = static_cast<size_t>(B_) * T_;
  Backend& be = backend_;
  Activations& a = acts_;
  auto layer = [&](Tensor t, int l, size_t per_row) { return t.slice(l * Nmax * per_row, N * per_row); };
  auto pl = [&](int t, int l) { return layout_.view(params_, t, l); };
  auto gl = [&](int t, int l) { return out.grad(t, l); };
  auto grad = [&](int t) { return out.grad(t, 0); };
  // The tied gradient in the sink (kFull's flat buffer) or left to the caller.
  const Tensor wte_grad = grad(kWte);
  if (wte_grad.empty() && grad_mode_ == GradMode::kFull)  // its dlogits die in the backward's scratch
    throw std::runtime_error("backward: a GradMode::kFull model makes the tied wte gradient itself");
  pass_ = Pass::kBackwardDone;  // from here on dlogits are being consumed: no second backward
  auto wte_rows = [&](int k) {
    return wte_grad.slice(layout_.wte_chunk_row0(k) * C, layout_.wte_chunk_numel(k));
  };
  out.unit_begin(-1);
  const size_t saved_stride = be.attention_saved_numel(B_, T_, NH);
  const size_t saved_numel = be.attention_saved_numel(B, T, NH);

  Tensor dresidual = a.dresidual.slice(0, N * C);
  Tensor dln = a.dln.slice(0, N * C);
  Tensor datty = a.datty.slice(0, N * C);
  Tensor dqkv = a.dqkv.slice(0, N * 3 * C);
  Tensor dfch = a.dfch.slice(0, N * 4 * C);

  // logits hold dlogits now (fused classifier). lm_head backward: d(lnf), then
  // (kFull) the tied wte gradient's lm_head part in ZeRO-2's vocabulary chunks
  // (same GEMMs, same bits); then dlogits are dead and the scratch carved from
  // their buffer is free. The embedding part comes at the end (or both parts by
  // the caller's wte_grad_chunk).
  be.matmul_backward(dln, Tensor{}, Tensor{}, a.logits.slice(0, N * Vp), a.lnf.slice(0, N * C),
                     param(kWte), N, C, Vp);
  if (!wte_grad.empty())
    for (int k = 0; k < layout_.num_wte_chunks(); k++) wte_chunk_parts(k, wte_rows(k), true, false);
  be.zero(dresidual);
  be.layernorm_backward(dresidual, grad(kLnfw), grad(kLnfb), dln, layer(a.residual3, L - 1, C),
                        param(kLnfw), a.lnf_mean.slice(0, N), a.lnf_rstd.slice(0, N), N, C);

  for (int l = L - 1; l >= 0; l--) {
    const ProfileRange range(backend_, "backward layer " + std::to_string(l));
    out.unit_begin(l);
    Tensor residual = l == 0 ? a.encoded.slice(0, N * C) : layer(a.residual3, l - 1, C);
    // residual3 = residual2 + fcproj: dresidual flows to both unchanged.
    Tensor fch_gelu = layer(a.fch_gelu, recompute_gelu_ ? 0 : l, 4 * C);
    // --recompute 1: fch_gelu again from fch with the GELU kernel: bitwise the
    // forward's where that ran the kernel too (the CPU backend, --gelu-fusion off);
    // after the GEMM epilogue's GELU, within its last bits (fp32: another GELU
    // formula) or a rounding (bf16: GELU of the unrounded fch).
    if (recompute_gelu_) be.gelu_forward(fch_gelu, layer(a.fch, l, 4 * C), N * 4 * C);
    // With dropout on the projection, its gradient is the residual's through the same mask (in dln, free here).
    Tensor dfcproj = dropped_gradient(dresidual, dln, l, DropoutMask::kMlpProj, dropout_.resid, C);
    be.matmul_gelu_backward(dfch, gl(kFcprojw, l), gl(kFcprojb, l), dfcproj, fch_gelu, pl(kFcprojw, l),
                            layer(a.fch, l, 4 * C), N, 4 * C, C);
    const int ln_l = recompute_ln_ ? 0 : l;
    if (recompute_ln_)  // --recompute 2: ln2 again, bitwise the forward's (mean and rstd rewritten unchanged)
      be.layernorm_forward(layer(a.ln2, 0, C), layer(a.ln2_mean, l, 1), layer(a.ln2_rstd, l, 1),
                           layer(a.residual2, l, C), pl(kLn2w, l), pl(kLn2b, l), N, C);
    be.matmul_backward(dln, gl(kFcw, l), gl(kFcb, l), dfch, layer(a.ln2, ln_l, C), pl(kFcw, l), N, C, 4 * C);
    be.layernorm_backward(dresidual, gl(kLn2w, l), gl(kLn2b, l), dln, layer(a.residual2, l, C),
                          pl(kLn2w, l), layer(a.ln2_mean, l, 1), layer(a.ln2_rstd, l, 1), N, C);
    // residual2 = residual + attproj (dln is free again: layernorm_backward consumed it)
    Tensor dattproj = dropped_gradient(dresidual, dln, l, DropoutMask::kAttentionProj, dropout_.resid, C);
    be.matmul_backward(datty, gl(kAttprojw, l), gl(kAttprojb, l), dattproj, layer(a.atty, l, C),
                       pl(kAttprojw, l), N, C, C);
    be.attention_backward(dqkv, a.att_scratch, datty, layer(a.atty, l, C), layer(a.qkv, l, 3 * C),
                          a.att_saved.slice(l * saved_stride, saved_numel), B, T, C, NH,
                          mask_of(l, DropoutMask::kAttentionProbs, dropout_.attn));
    if (recompute_ln_)
      be.layernorm_forward(layer(a.ln1, 0, C), layer(a.ln1_mean, l, 1), layer(a.ln1_rstd, l, 1), residual,
                           pl(kLn1w, l), pl(kLn1b, l), N, C);
    be.matmul_backward(dln, gl(kQkvw, l), gl(kQkvb, l), dqkv, layer(a.ln1, ln_l, C), pl(kQkvw, l), N, C, 3 * C);
    be.layernorm_backward(dresidual, gl(kLn1w, l), gl(kLn1b, l), dln, residual, pl(kLn1w, l),
                          layer(a.ln1_mean, l, 1), layer(a.ln1_rstd, l, 1), N, C);
    out.unit_done(l);
  }
  drop(dresidual, 0, DropoutMask::kEmbedding, dropout_.embd, C);  // encoded = dropout(wte + wpe)
  be.encoder_backward(Tensor{}, grad(kWpe), dresidual, a.tokens.slice(0, N), B, T, C);
  if (!wte_grad.empty())  // else the caller builds (and exchanges) the chunks
    for (int k = 0; k < layout_.num_wte_chunks(); k++) wte_chunk_parts(k, wte_rows(k), false, true);
  out.unit_done(-1);
}

// ---------------------------------------------------------------- readback

std::vector<float> GPT2::logits_at(int b, int t) const {
  if (b < 0 || b >= cur_B_ || t < 0 || t >= cur_T_) throw std::runtime_error("logits_at: out of range");
  const size_t Vp = cfg_.padded_vocab_size;
  std::vector<float> row(Vp);
  backend_.download(row.data(), acts_.logits.slice((static_cast<size_t>(b) * cur_T_ + t) * Vp, Vp));
  row.resize(cfg_.vocab_size);
  return row;
}

std::vector<float> GPT2::losses() const {
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_;
  std::vector<float> out(N);
  backend_.download(out.data(), acts_.losses.slice(0, N));
  return out;
}

}  // namespace gpt2

#include "model/gpt2.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "util/rng.h"

namespace gpt2 {

// ---------------------------------------------------------------- layout

namespace {

size_t wte_rows_for(const ParamLayout& p, size_t rows) {
  const size_t C = p.channels();
  if (C == 0) return 0;  // an invalid config, refused by whoever validates it
  const size_t Vp = p.numel[kWte] / C;
  if (rows > 0) return std::min(rows, Vp);
  const size_t fit = p.num_layers > 0 ? p.layer_unit_numel() / C / 64 * 64 : 0;
  return std::min(std::max<size_t>(fit, 64), Vp);
}

}  // namespace

ParamLayout ParamLayout::for_config(const GPT2Config& cfg, size_t wte_chunk_rows) {
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
  p.wte_rows = wte_rows_for(p, wte_chunk_rows);
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

GPT2::GPT2(Backend& backend, const GPT2Config& cfg, int B, int T, const ModelOptions& opts)
    : backend_(backend),
      cfg_(cfg),
      layout_(ParamLayout::for_config(cfg, opts.wte_chunk_rows)),
      B_(B),
      T_(T),
      forward_only_(opts.forward_only),
      keep_dlogits_(opts.keep_dlogits),
      recompute_gelu_(opts.recompute >= 1),
      recompute_ln_(opts.recompute >= 2),
      source_(opts.param_source) {
  if (opts.recompute < 0 || opts.recompute > 2) throw std::runtime_error("recompute level must be 0, 1 or 2");
  cfg_.validate("model config");
  if (B < 1 || T < 1) throw std::runtime_error("batch size and sequence length must be >= 1");
  if (T > cfg.max_seq_len)
    throw std::runtime_error("sequence length " + std::to_string(T) + " exceeds the model's max_seq " +
                             std::to_string(cfg.max_seq_len));
  const size_t capacity = opts.param_capacity == 0 ? layout_.total : opts.param_capacity;
  if (capacity < layout_.total) throw std::runtime_error("param_capacity below the parameter count");
  if (!source_) {
    params_ = backend_.alloc(capacity, BufferRole::kParams);
    owned_.push_back(params_);
    backend_.zero(params_);  // padding stays zero forever
  }
  allocate_activations(opts.forward_only);
}

GPT2::~GPT2() {
  for (Tensor& t : owned_) backend_.free(t);
}

void GPT2::allocate_activations(bool forward_only) {
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
  // Backward scratch. dln takes the projections' buffer (forward-only). The
  // lm_head backward reads dlogits first thing and never again (the wte
  // gradient's lm_head part is made then too), so the other scratch buffers,
  // largest first, take the logits buffer while they fit, unless dlogits must
  // survive for wte_grad_chunk (keep_dlogits): everything separate then.
  if (!forward_only) {
    a.dln = a.attproj;
    const size_t room = keep_dlogits_ ? 0 : a.logits.numel;
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
  if (source_) return source_->set_parameters(host);
  backend_.upload(params_.slice(0, layout_.total), host.data());
}

std::vector<float> GPT2::get_parameters() const {
  if (source_) return source_->get_parameters();
  std::vector<float> host(layout_.total);
  backend_.download(host.data(), params_.slice(0, layout_.total));
  return host;
}

void GPT2::wte_chunk_parts(int k, Tensor dst, bool lm_head, bool embedding) {
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_, C = layout_.channels();
  const int Vp = cfg_.padded_vocab_size;
  // dlogits (the logits buffer after the fused classifier), lnf's output, and
  // at the end of the backward the embedding's gradient in dresidual.
  backend_.tied_embedding_backward_rows({.dwte_rows = dst,
                                         .dlogits = lm_head ? acts_.logits.slice(0, N * Vp) : Tensor{},
                                         .lnf = lm_head ? acts_.lnf.slice(0, N * C) : Tensor{},
                                         .dembed = embedding ? acts_.dresidual.slice(0, N * C) : Tensor{},
                                         .tokens = acts_.tokens.slice(0, N), .N = static_cast<int>(N),
                                         .C = static_cast<int>(C), .Vp = Vp,
                                         .v0 = static_cast<int>(layout_.wte_chunk_row0(k))});
}

Tensor GPT2::wte_chunk_of(const Tensor& wte_grad, int k) const {
  return wte_grad.slice(layout_.wte_chunk_row0(k) * layout_.channels(), layout_.wte_chunk_numel(k));
}

void GPT2::wte_grad_chunk(int k, Tensor dst) {
  if (!keep_dlogits_ || !tied_ready_)
    throw std::runtime_error("wte_grad_chunk(): only after a backward of a model built with keep_dlogits");
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

void GPT2::begin_forward(const int32_t* inputs, const int32_t* targets, int B, int T, bool training,
                         float dloss_scale) {
  check_batch(inputs, targets, B, T);
  if (training && forward_only_) throw std::runtime_error("forward: a forward-only model cannot train");
  const size_t Nmax = static_cast<size_t>(B_) * T_;
  if (training && targets && loss_slots_.empty()) reserve_train_losses(1);  // one slot unless reserved ahead
  if (training && targets && (slot_rows_.size() + 1) * Nmax > loss_slots_.numel)
    throw std::runtime_error("forward: more training forwards than reserve_train_losses(" +
                             std::to_string(loss_slots_.numel / Nmax) + ") before collect_train_losses()");
  cur_B_ = B;
  cur_T_ = T;
  dlogits_ready_ = false;
  tied_ready_ = false;
  training_ = training;
  dloss_scale_ = dloss_scale;
  has_targets_ = targets != nullptr;
  loss_ = LossSum{};
  last_losses_ = Tensor{};
  const size_t N = static_cast<size_t>(B) * T;
  backend_.upload_tokens(acts_.tokens.slice(0, N), inputs);
  batch_supervised_ = 0;
  if (targets) {
    backend_.upload_tokens(acts_.targets.slice(0, N), targets);
    for (size_t i = 0; i < N; i++) batch_supervised_ += targets[i] != kIgnoreTarget;
  }
  dropping_ = training && dropout_.any();
}

// Layers are asked for in the order they run (a ParamSource gathers ahead);
// the head takes wte from the last layer's views, which are still there.
void GPT2::forward_all_layers() {
  const int L = cfg_.num_layers;
  forward_embeddings(param_views(0));
  for (int l = 0; l < L; l++) {
    const ParamTensors p = param_views(l);
    const ParamTensors next = param_views(std::min(l + 1, L - 1));
    forward_layer(l, p, next);
  }
  forward_head(param_views(L - 1));
}

float GPT2::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  begin_forward(inputs, targets, B, T, false, 0.0f);
  forward_all_layers();
  return static_cast<float>(loss_.mean());
}

void GPT2::train_forward_deferred_loss(const int32_t* inputs, const int32_t* targets, int B, int T,
                                       float dloss_scale) {
  begin_forward(inputs, targets, B, T, true, dloss_scale);
  forward_all_layers();
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
  backend_.dropout({.out = scratch, .inp = dres, .m = mask_of(layer, site, p), .N = static_cast<int>(dres.numel / C),
                    .C = C});
  return scratch;
}

// Per-layer activation slices use the allocated (max) stride so one buffer
// serves any smaller batch. Each residual add runs with the layernorm that
// reads its sum (ln2; the next layer's ln1, or lnf after the last).
GPT2::Norm GPT2::ln1_of(int l, const ParamTensors& p) const {
  const int C = cfg_.channels;
  return Norm{at_layer(acts_.ln1, recompute_ln_ ? 0 : l, C), at_layer(acts_.ln1_mean, l, 1),
              at_layer(acts_.ln1_rstd, l, 1), p[kLn1w], p[kLn1b]};
}

void GPT2::forward_embeddings(const ParamTensors& p) {
  const int B = cur_B_, T = cur_T_, C = cfg_.channels;
  const size_t N = static_cast<size_t>(B) * T;
  const int rows = static_cast<int>(N);  // the ops' N
  Tensor encoded = acts_.encoded.slice(0, N * C);
  backend_.encoder_forward({.out = encoded, .tokens = acts_.tokens.slice(0, N), .wte = p[kWte], .wpe = p[kWpe], .B = B,
                            .T = T, .C = C});
  drop(encoded, 0, DropoutMask::kEmbedding, dropout_.embd, C);
  const Norm first = ln1_of(0, p);
  backend_.layernorm_forward({.out = first.out, .mean = first.mean, .rstd = first.rstd, .inp = encoded, .w = first.w,
                              .b = first.b, .N = rows, .C = C});
}

void GPT2::forward_layer(int l, const ParamTensors& p, const ParamTensors& next) {
  const ProfileRange range(backend_, "forward layer " + std::to_string(l));
  const int B = cur_B_, T = cur_T_, C = cfg_.channels, L = cfg_.num_layers, NH = cfg_.num_heads;
  const size_t N = static_cast<size_t>(B) * T;
  const int rows = static_cast<int>(N);  // the ops' N
  Backend& be = backend_;
  Activations& a = acts_;
  const size_t saved_stride = be.attention_saved_numel(B_, T_, NH);
  Tensor residual = l == 0 ? a.encoded.slice(0, N * C) : at_layer(a.residual3, l - 1, C);
  const int ln_l = recompute_ln_ ? 0 : l;
  Tensor ln1 = at_layer(a.ln1, ln_l, C);
  Tensor qkv = at_layer(a.qkv, l, 3 * C), atty = at_layer(a.atty, l, C);
  Tensor saved = a.att_saved.slice(l * saved_stride, be.attention_saved_numel(B, T, NH));
  Tensor attproj = a.attproj.slice(0, N * C), residual2 = at_layer(a.residual2, l, C);
  Tensor ln2 = at_layer(a.ln2, ln_l, C), ln2_mean = at_layer(a.ln2_mean, l, 1), ln2_rstd = at_layer(a.ln2_rstd, l, 1);
  Tensor fch = at_layer(a.fch, l, 4 * C), fch_gelu = at_layer(a.fch_gelu, recompute_gelu_ ? 0 : l, 4 * C);
  Tensor fcproj = a.fcproj.slice(0, N * C), residual3 = at_layer(a.residual3, l, C);
  const Norm out = l + 1 < L ? ln1_of(l + 1, next)
                             : Norm{a.lnf.slice(0, N * C), a.lnf_mean.slice(0, N), a.lnf_rstd.slice(0, N),
                                    next[kLnfw], next[kLnfb]};

  be.matmul_forward({.out = qkv, .inp = ln1, .w = p[kQkvw], .bias = p[kQkvb], .N = rows, .C = C, .OC = 3 * C});
  be.attention_forward({.out = atty, .saved = saved, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH,
                        .drop = mask_of(l, DropoutMask::kAttentionProbs, dropout_.attn)});
  be.matmul_forward({.out = attproj, .inp = atty, .w = p[kAttprojw], .bias = p[kAttprojb], .N = rows, .C = C, .OC = C});
  drop(attproj, l, DropoutMask::kAttentionProj, dropout_.resid, C);
  be.residual_layernorm_forward({.residual = residual2, .out = ln2, .mean = ln2_mean, .rstd = ln2_rstd, .a = residual,
                                 .b = attproj, .w = p[kLn2w], .bias = p[kLn2b], .N = rows, .C = C});
  be.matmul_gelu_forward({.out = fch_gelu, .pre = fch, .inp = ln2, .w = p[kFcw], .bias = p[kFcb], .N = rows, .C = C,
                          .OC = 4 * C});
  be.matmul_forward({.out = fcproj, .inp = fch_gelu, .w = p[kFcprojw], .bias = p[kFcprojb], .N = rows, .C = 4 * C,
                     .OC = C});
  drop(fcproj, l, DropoutMask::kMlpProj, dropout_.resid, C);
  be.residual_layernorm_forward({.residual = residual3, .out = out.out, .mean = out.mean, .rstd = out.rstd,
                                 .a = residual2, .b = fcproj, .w = out.w, .bias = out.b, .N = rows, .C = C});
}

// lm_head is tied to wte: logits = lnf @ wte^T over the padded vocabulary.
// With targets, the fused classifier: an evaluation's losses are summed on the
// host now; a training forward's stay in their slot, and dlogits replace the logits.
void GPT2::forward_head(const ParamTensors& p) {
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_, Nmax = static_cast<size_t>(B_) * T_;
  const int rows = static_cast<int>(N);  // the ops' N
  const int C = cfg_.channels, V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size;
  Tensor logits = acts_.logits.slice(0, N * Vp);
  backend_.matmul_forward({.out = logits, .inp = acts_.lnf.slice(0, N * C), .w = p[kWte], .N = rows, .C = C, .OC = Vp});
  if (!has_targets_) return;
  const size_t slot = slot_rows_.size();
  last_losses_ = training_ ? loss_slots_.slice(slot * Nmax, N) : acts_.losses.slice(0, N);
  backend_.classifier_forward_backward({.logits = logits, .losses = last_losses_, .targets = acts_.targets.slice(0, N),
                                        .N = rows, .V = V, .Vp = Vp, .dloss = training_ ? dloss_scale_ : 0.0f});
  if (training_) {
    slot_rows_.push_back(N);
    slot_count_ += batch_supervised_;
    dlogits_ready_ = true;
    return;
  }
  // Ignored targets have loss exactly 0; the mean is over the others (PyTorch's
  // ignore_index semantics; 0 when every target is ignored, where PyTorch gives NaN).
  for (float x : losses()) loss_.sum += x;
  loss_.count = batch_supervised_;
}

void GPT2::reserve_train_losses(int forwards) {
  if (forwards < 1) throw std::runtime_error("reserve_train_losses: need at least one forward");
  if (!slot_rows_.empty()) throw std::runtime_error("reserve_train_losses: losses not yet collected");
  const size_t need = static_cast<size_t>(forwards) * B_ * T_;
  if (loss_slots_.numel >= need) return;
  if (!loss_slots_.empty()) {
    backend_.free(loss_slots_);
    owned_.erase(std::find_if(owned_.begin(), owned_.end(), [&](const Tensor& t) { return t.ptr == loss_slots_.ptr; }));
    activation_bytes_ -= loss_slots_.bytes();
  }
  loss_slots_ = backend_.alloc(need, BufferRole::kStats);
  owned_.push_back(loss_slots_);
  activation_bytes_ += loss_slots_.bytes();
}

LossSum GPT2::collect_train_losses() {
  const size_t Nmax = static_cast<size_t>(B_) * T_, used = slot_rows_.size();
  std::vector<float> host(used * Nmax);
  if (used > 0) backend_.download(host.data(), loss_slots_.slice(0, used * Nmax));
  LossSum total;
  for (size_t k = 0; k < used; k++) {  // per forward from 0, then added in order
    double sum = 0.0;
    for (size_t i = 0; i < slot_rows_[k]; i++) sum += host[k * Nmax + i];
    total.sum += sum;
  }
  total.count = slot_count_;
  slot_rows_.clear();
  slot_count_ = 0;
  return total;
}

// ---------------------------------------------------------------- backward

Tensor GPT2::at_layer(const Tensor& t, int l, size_t per_row) const {
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_, Nmax = static_cast<size_t>(B_) * T_;
  return t.slice(l * Nmax * per_row, N * per_row);
}

// logits hold dlogits now (fused classifier): d(lnf), then the tied wte
// gradient's lm_head part in its vocabulary chunks (the chunks ZeRO-2 stages:
// same GEMMs, same bits); then dlogits are dead and the scratch carved from
// their buffer is free.
void GPT2::backward_head(const ParamTensors& p, const ParamTensors& g) {
  if (forward_only_) throw std::runtime_error("backward: a forward-only model");
  if (!dlogits_ready_)
    throw std::runtime_error("backward: the last forward was not a training forward with targets, or its backward ran");
  if (g[kWte].empty() && !keep_dlogits_)  // its dlogits die in the backward's scratch
    throw std::runtime_error("backward: the tied wte gradient must be given unless the model keeps dlogits");
  dlogits_ready_ = false;
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_;
  const int rows = static_cast<int>(N), C = cfg_.channels;  // rows: the ops' N
  Backend& be = backend_;
  Activations& a = acts_;
  be.matmul_backward({.dinp = a.dln.slice(0, N * C), .dout = a.logits.slice(0, N * cfg_.padded_vocab_size),
                      .inp = a.lnf.slice(0, N * C), .w = p[kWte], .N = rows, .C = C, .OC = cfg_.padded_vocab_size});
  if (!g[kWte].empty())
    for (int k = 0; k < layout_.num_wte_chunks(); k++) wte_chunk_parts(k, wte_chunk_of(g[kWte], k), true, false);
  be.zero(a.dresidual.slice(0, N * C));
  be.layernorm_backward({.dinp = a.dresidual.slice(0, N * C), .dw = g[kLnfw], .db = g[kLnfb],
                         .dout = a.dln.slice(0, N * C), .inp = at_layer(a.residual3, cfg_.num_layers - 1, C),
                         .w = p[kLnfw], .mean = a.lnf_mean.slice(0, N), .rstd = a.lnf_rstd.slice(0, N), .N = rows,
                         .C = C});
}

void GPT2::backward_layer(int l, const ParamTensors& p, const ParamTensors& g) {
  const ProfileRange range(backend_, "backward layer " + std::to_string(l));
  const int B = cur_B_, T = cur_T_, C = cfg_.channels, NH = cfg_.num_heads;
  const size_t N = static_cast<size_t>(B) * T;
  const int rows = static_cast<int>(N);  // the ops' N
  Backend& be = backend_;
  Activations& a = acts_;
  Tensor dresidual = a.dresidual.slice(0, N * C), dln = a.dln.slice(0, N * C), datty = a.datty.slice(0, N * C);
  Tensor dqkv = a.dqkv.slice(0, N * 3 * C), dfch = a.dfch.slice(0, N * 4 * C);
  Tensor residual = l == 0 ? a.encoded.slice(0, N * C) : at_layer(a.residual3, l - 1, C);
  Tensor fch = at_layer(a.fch, l, 4 * C), fch_gelu = at_layer(a.fch_gelu, recompute_gelu_ ? 0 : l, 4 * C);
  const int ln_l = recompute_ln_ ? 0 : l;
  Tensor ln1 = at_layer(a.ln1, ln_l, C), ln2 = at_layer(a.ln2, ln_l, C), residual2 = at_layer(a.residual2, l, C);
  Tensor ln1_mean = at_layer(a.ln1_mean, l, 1), ln1_rstd = at_layer(a.ln1_rstd, l, 1);
  Tensor ln2_mean = at_layer(a.ln2_mean, l, 1), ln2_rstd = at_layer(a.ln2_rstd, l, 1);
  const size_t saved_stride = be.attention_saved_numel(B_, T_, NH);
  Tensor saved = a.att_saved.slice(l * saved_stride, be.attention_saved_numel(B, T, NH));

  // residual3 = residual2 + fcproj: dresidual flows to both unchanged.
  // --recompute 1: fch_gelu again from fch with the GELU kernel: bitwise the
  // forward's where that ran the kernel too (the CPU backend, --gelu-fusion off);
  // after the GEMM epilogue's GELU, within its last bits (fp32: another GELU
  // formula) or a rounding (bf16: GELU of the unrounded fch).
  if (recompute_gelu_) be.gelu_forward({.out = fch_gelu, .inp = fch, .n = N * 4 * C});
  // With dropout on the projection, its gradient is the residual's through the same mask (in dln, free here).
  Tensor dfcproj = dropped_gradient(dresidual, dln, l, DropoutMask::kMlpProj, dropout_.resid, C);
  be.matmul_gelu_backward({.dinp = dfch, .dw = g[kFcprojw], .dbias = g[kFcprojb], .dout = dfcproj, .inp = fch_gelu,
                           .w = p[kFcprojw], .gelu_inp = fch, .N = rows, .C = 4 * C, .OC = C});
  if (recompute_ln_)  // --recompute 2: ln2 again, bitwise the forward's (mean and rstd rewritten unchanged)
    be.layernorm_forward({.out = ln2, .mean = ln2_mean, .rstd = ln2_rstd, .inp = residual2, .w = p[kLn2w],
                          .b = p[kLn2b], .N = rows, .C = C});
  be.matmul_backward({.dinp = dln, .dw = g[kFcw], .dbias = g[kFcb], .dout = dfch, .inp = ln2, .w = p[kFcw], .N = rows,
                      .C = C, .OC = 4 * C});
  be.layernorm_backward({.dinp = dresidual, .dw = g[kLn2w], .db = g[kLn2b], .dout = dln, .inp = residual2,
                         .w = p[kLn2w], .mean = ln2_mean, .rstd = ln2_rstd, .N = rows, .C = C});
  // residual2 = residual + attproj (dln is free again: layernorm_backward consumed it)
  Tensor dattproj = dropped_gradient(dresidual, dln, l, DropoutMask::kAttentionProj, dropout_.resid, C);
  be.matmul_backward({.dinp = datty, .dw = g[kAttprojw], .dbias = g[kAttprojb], .dout = dattproj,
                      .inp = at_layer(a.atty, l, C), .w = p[kAttprojw], .N = rows, .C = C, .OC = C});
  be.attention_backward({.dqkv = dqkv, .scratch = a.att_scratch, .dout = datty, .out = at_layer(a.atty, l, C),
                         .qkv = at_layer(a.qkv, l, 3 * C), .saved = saved, .B = B, .T = T, .C = C, .NH = NH,
                         .drop = mask_of(l, DropoutMask::kAttentionProbs, dropout_.attn)});
  if (recompute_ln_) be.layernorm_forward({.out = ln1, .mean = ln1_mean, .rstd = ln1_rstd, .inp = residual,
                                           .w = p[kLn1w], .b = p[kLn1b], .N = rows, .C = C});
  be.matmul_backward({.dinp = dln, .dw = g[kQkvw], .dbias = g[kQkvb], .dout = dqkv, .inp = ln1, .w = p[kQkvw], .N = rows,
                      .C = C, .OC = 3 * C});
  be.layernorm_backward({.dinp = dresidual, .dw = g[kLn1w], .db = g[kLn1b], .dout = dln, .inp = residual, .w = p[kLn1w],
                         .mean = ln1_mean, .rstd = ln1_rstd, .N = rows, .C = C});
}

// encoded = dropout(wte + wpe): wpe's gradient, then the tied gradient's embedding part.
void GPT2::backward_embeddings(const ParamTensors& g) {
  const int C = cfg_.channels;
  const size_t N = static_cast<size_t>(cur_B_) * cur_T_;
  Tensor dresidual = acts_.dresidual.slice(0, N * C);
  drop(dresidual, 0, DropoutMask::kEmbedding, dropout_.embd, C);
  backend_.encoder_backward({.dwpe = g[kWpe], .dout = dresidual, .tokens = acts_.tokens.slice(0, N), .B = cur_B_,
                             .T = cur_T_, .C = C});
  if (!g[kWte].empty())
    for (int k = 0; k < layout_.num_wte_chunks(); k++) wte_chunk_parts(k, wte_chunk_of(g[kWte], k), false, true);
  tied_ready_ = true;
}

void GPT2::backward(Tensor flat_grads) {
  backward_head(param_views(cfg_.num_layers - 1), layout_.views(flat_grads, 0));
  for (int l = cfg_.num_layers - 1; l >= 0; l--) backward_layer(l, param_views(l), layout_.views(flat_grads, l));
  backward_embeddings(layout_.views(flat_grads, 0));
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
  if (last_losses_.empty()) throw std::runtime_error("losses(): the last forward had no targets");
  std::vector<float> out(last_losses_.numel);
  backend_.download(out.data(), last_losses_);
  return out;
}

}  // namespace gpt2

// GPT-2's tensor table and forward/backward, written against the Backend seam
// (backend/backend.h): the model decides where every parameter, gradient and
// activation lives; the backend owns the memory and does the arithmetic.
#ifndef MODEL_GPT2_H
#define MODEL_GPT2_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace gpt2 {

// Parameter tensors in llm.c's order; per-layer tensors are stacked over layers.
enum ParamTensor : int {
  kWte, kWpe, kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,
  kLn2w, kLn2b, kFcw, kFcb, kFcprojw, kFcprojb, kLnfw, kLnfb,
  kNumParamTensors
};

// One tensor per ParamTensor, a layer's where stacked: the parameter views a
// forward or backward piece reads, or the gradient views a backward piece adds
// into (+=). The caller's memory (a flat buffer laid out like the parameters,
// ZeRO-2's per-layer staging); each piece reads only the entries it names.
using ParamTensors = std::array<Tensor, kNumParamTensors>;

// Sizes and offsets of the 16 parameter tensors inside one flat buffer.
struct ParamLayout {
  std::array<size_t, kNumParamTensors> numel{};
  std::array<size_t, kNumParamTensors> offset{};
  size_t total = 0;
  int num_layers = 0;
  size_t wte_rows = 0;  // wte_chunk_rows()

  // `wte_chunk_rows` 0: the default below; else that many rows (capped at Vp).
  static ParamLayout for_config(const GPT2Config& cfg, size_t wte_chunk_rows = 0);
  static const char* name(int t);
  static bool is_per_layer(int t);  // stacked over layers (everything but wte, wpe, lnf)
  static bool decays(int t);        // AdamW weight decay applies: 2-D matmul weights + embeddings
  // Elements of tensor t that belong to layer l (per-layer tensors only).
  size_t layer_offset(int t, int l) const { return offset[t] + numel[t] / num_layers * l; }
  size_t layer_numel(int t) const { return numel[t] / num_layers; }
  size_t channels() const { return numel[kLnfw]; }
  // Elements of one layer's gradients, all per-layer tensors together.
  size_t layer_unit_numel() const;
  // The tied wte/lm_head gradient is made in chunks of this many vocab rows, so
  // ZeRO-2 can stage it chunk by chunk in its layer buffers and every stage adds
  // the same GEMMs in the same order. By default a multiple of 64 (aligned
  // slices), >= 64, and no more than one layer's gradients hold (d12: 9216 rows, 6 chunks).
  size_t wte_chunk_rows() const { return wte_rows; }
  int num_wte_chunks() const;
  size_t wte_chunk_row0(int k) const { return static_cast<size_t>(k) * wte_rows; }  // chunk k's first row
  size_t wte_chunk_numel(int k) const;  // elements of chunk k (the last may be shorter)
  // Tensor t (layer l if stacked) of a flat buffer laid out like the parameters.
  Tensor view(Tensor flat, int t, int l) const {
    return is_per_layer(t) ? flat.slice(layer_offset(t, l), layer_numel(t)) : flat.slice(offset[t], numel[t]);
  }
  // Every tensor's view of `flat`, the stacked ones at layer l.
  ParamTensors views(Tensor flat, int l) const {
    ParamTensors g;
    for (int t = 0; t < kNumParamTensors; t++) g[t] = view(flat, t, l);
    return g;
  }
};

// Activation tensor table (llm.c's ActivationTensors, plus backward scratch).
struct Activations {
  Tensor encoded;           // (B,T,C)
  Tensor ln1, ln1_mean, ln1_rstd;  // (L,B,T,C), (L,B,T), (L,B,T); ln1/ln2 one layer (shared) at --recompute 2
  Tensor qkv;               // (L,B,T,3C)
  Tensor atty;              // (L,B,T,C)
  Tensor att_saved;         // L * backend.attention_saved_numel
  Tensor attproj;           // (B,T,C): consumed at once by the residual add (shared with fcproj)
  Tensor residual2;         // (L,B,T,C)
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor fch, fch_gelu;     // (L,B,T,4C)
  Tensor fcproj;            // (B,T,C): the same buffer as attproj
  Tensor residual3;         // (L,B,T,C)
  Tensor lnf, lnf_mean, lnf_rstd;  // (B,T,C), (B,T), (B,T)
  Tensor losses;            // (B,T)
  Tensor logits;            // (B,T,Vp); dlogits in place after the fused classifier
  Tensor tokens, targets;   // (B,T) int32
  // backward scratch. dln lives in attproj's buffer (forward-only); unless
  // dlogits must survive the backward (keep_dlogits), the others are carved from
  // the logits buffer where it is large enough (dlogits are dead once the
  // lm_head backward has run).
  Tensor dresidual;         // (B,T,C) gradient of the residual stream
  Tensor dln;               // (B,T,C)
  Tensor datty;             // (B,T,C)
  Tensor dqkv;              // (B,T,3C)
  Tensor dfch;              // (B,T,4C)
  Tensor att_scratch;       // backend.attention_scratch_numel
};

// HF GPT2Config's embd_pdrop, resid_pdrop (attention and MLP projections) and
// attn_pdrop; each in [0, 1). All 0 is bitwise the model without dropout.
struct DropoutRates {
  float embd = 0.0f, resid = 0.0f, attn = 0.0f;
  bool any() const { return embd > 0.0f || resid > 0.0f || attn > 0.0f; }
};

// Where the parameters live when the model holds none (ZeRO-3 keeps a shard
// per rank and gathers each layer just before it runs). The model asks for
// layers in the order it runs them, forward or backward, so a source may
// gather ahead in that direction.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // What GPT2::param_views(l) returns. Layer l's tensors stay valid until
  // views() has been asked for two other layers: the forward holds a layer and
  // the next one at once.
  virtual ParamTensors views(int l) = 0;
  // Collective where the source spans ranks: every rank calls them.
  virtual void set_parameters(const std::vector<float>& host) = 0;  // ParamLayout::total floats
  virtual std::vector<float> get_parameters() = 0;
};

// How a model is allocated.
struct ModelOptions {
  // 0 keeps every activation; 1 keeps one layer's GELU output and recomputes it
  // in the backward; 2 also the layernorm output (ln1 and ln2 share one
  // layer's). Recomputed values are bitwise the forward's (--recompute).
  int recompute = 0;
  // >= the parameter count (0 = exact): zero-pads the parameter buffer, e.g.
  // to a multiple of the world size.
  size_t param_capacity = 0;
  bool forward_only = false;  // no backward scratch (--eval-only, --generate)
  // dlogits survive the backward, so wte_grad_chunk can make the tied gradient
  // after it (ZeRO-2); else the backward's scratch reuses the logits buffer.
  bool keep_dlogits = false;
  size_t wte_chunk_rows = 0;  // ParamLayout::for_config's
  // Non-null: the model allocates no parameters and reads them from here
  // (param_capacity is then unused). It must outlive the model.
  ParamSource* param_source = nullptr;
};

// Losses summed on the host: fp64 sum of the per-token losses, and the targets
// that were not ignored.
struct LossSum {
  double sum = 0.0;
  size_t count = 0;
  double mean() const { return count ? sum / static_cast<double>(count) : 0.0; }
};

class GPT2 {
 public:
  // Allocates for batches up to B x T.
  GPT2(Backend& backend, const GPT2Config& cfg, int B, int T, const ModelOptions& opts = {});
  ~GPT2();
  GPT2(const GPT2&) = delete;
  GPT2& operator=(const GPT2&) = delete;

  const GPT2Config& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  size_t num_parameters() const { return layout_.total; }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }

  // The model's own parameter buffer: param_capacity() elements, none with a
  // ParamSource.
  Tensor params() const { return params_; }
  size_t param_capacity() const { return params_.numel; }
  Tensor param(int t) const { return params_.slice(layout_.offset[t], layout_.numel[t]); }
  // The parameters as views, the stacked tensors at layer l: of the model's
  // buffer, or what its ParamSource gathered.
  ParamTensors param_views(int l) const { return source_ ? source_->views(l) : layout_.views(params_, l); }
  // Every forward reads parameters that live on several ranks: every rank runs
  // the same forwards, in the same order (an idle rank a batch it ignores).
  bool forward_is_collective() const { return source_ != nullptr; }
  size_t activation_bytes() const { return activation_bytes_; }

  // GPT-2 init: N(0, 0.02), residual projections (attprojw, fcprojw) scaled by
  // 1/sqrt(2L), biases 0, layernorm weights 1. Deterministic in `seed`.
  void init_random(uint64_t seed);
  // layout_.total floats; with a ParamSource, collective.
  void set_parameters(const std::vector<float>& host);
  std::vector<float> get_parameters() const;

  // The forward in pieces over parameter views p, in this order (forward() and
  // train_forward_deferred_loss() run them on param_views()):
  //   begin_forward(...)         checks and uploads the batch; training: dropout
  //                              applies, and with targets dlogits scaled by
  //                              dloss_scale replace the logits
  //   forward_embeddings(p)      p[kWte], p[kWpe]; layer 0's p[kLn1w], p[kLn1b]
  //   forward_layer(l, p, next)  l = 0 .. L-1: layer l's tensors, and the norm
  //                              after it: next's ln1 (layer l+1's views), or
  //                              next[kLnfw], next[kLnfb] after the last layer
  //   forward_head(p)            p[kWte]: the logits, then the loss
  void begin_forward(const int32_t* inputs, const int32_t* targets, int B, int T, bool training, float dloss_scale);
  void forward_embeddings(const ParamTensors& p);
  void forward_layer(int l, const ParamTensors& p, const ParamTensors& next);
  void forward_head(const ParamTensors& p);
  // Evaluation forward over inputs[B*T] (B <= max_batch, T <= max_seq). With
  // targets, returns the mean per-token loss over targets that are not
  // kIgnoreTarget (backend/backend.h: no loss, no gradient; 0 if all are);
  // without, only logits.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Of the last evaluation forward with targets: the loss sum and count.
  double loss_sum() const { return loss_.sum; }
  size_t loss_count() const { return loss_.count; }
  // A training forward: dropout applies, and with targets the logits become
  // dlogits scaled by `dloss_scale` (the caller's 1 / supervised targets of the
  // whole step) for the backward. Its per-token losses stay on the device, so
  // a step waits for the host once, not per forward: collect_train_losses()
  // adds up every training forward's since the last collect, each forward's
  // fp64 sum in order. Up to reserve_train_losses(k) forwards (1 when none were reserved).
  void train_forward_deferred_loss(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale);
  LossSum collect_train_losses();
  void reserve_train_losses(int forwards);
  // Dropout (inverted, HF's semantics) applies only in training forwards and
  // their backward. Masks are util/philox.h's function of (seed, step, layer,
  // site, global token, column): set_dropout_position names the optimizer step
  // and the global token of this micro-batch's row 0 (row b*T + t is token0 +
  // b*T + t), so ranks and micro-batches splitting a step's batch draw what one
  // rank with the whole batch would. Rates outside [0, 1) throw.
  void set_dropout(const DropoutRates& rates, uint64_t seed);
  void set_dropout_position(uint32_t step, uint64_t token0);

  // The backward of the last training forward (with targets), in pieces a
  // schedule runs in this order, each reading parameter views p and adding
  // into the caller's gradients g:
  //   backward_head(p, g)       lm_head and the final layernorm (p[kWte],
  //                             p[kLnfw]): g[kLnfw], g[kLnfb]; g[kWte] gets the
  //                             tied gradient's lm_head part
  //   backward_layer(l, p, g)   l = L-1 down to 0: layer l's twelve tensors
  //   backward_embeddings(g)    g[kWpe]; g[kWte] gets the embedding part
  // An empty g[kWte] leaves the tied gradient to wte_grad_chunk (keep_dlogits).
  void backward_head(const ParamTensors& p, const ParamTensors& g);
  void backward_layer(int l, const ParamTensors& p, const ParamTensors& g);
  void backward_embeddings(const ParamTensors& g);
  // All three into one flat buffer laid out like the parameters.
  void backward(Tensor flat_grads);
  // keep_dlogits, after backward_embeddings and before the next forward:
  // overwrites dst (layout().wte_chunk_numel(k) elements) with chunk k of the
  // tied gradient, both parts.
  void wte_grad_chunk(int k, Tensor dst);

  // Row b, position t's logits (V real entries) from the last forward; not
  // after a backward (dlogits then, and the backward may reuse the buffer).
  std::vector<float> logits_at(int b, int t) const;
  std::vector<float> losses() const;  // B*T per-token losses of the last forward with targets

 private:
  void check_batch(const int32_t* inputs, const int32_t* targets, int B, int T) const;
  void forward_all_layers();  // the forward's pieces on param_views()
  // A layernorm's output, statistics and parameters.
  struct Norm {
    Tensor out, mean, rstd, w, b;
  };
  Norm ln1_of(int l, const ParamTensors& p) const;  // layer l's ln1, weights from p
  // The mask of layer l's site: rate p when this forward drops, else 0 (no dropout).
  DropoutMask mask_of(int layer, DropoutMask::Site site, float p) const;
  // In place on x (rows of C): the mask of layer l's site when this forward drops there.
  void drop(Tensor x, int layer, DropoutMask::Site site, float p, int C);
  // A dropped projection's gradient: `dres` if not dropped there, else it through the mask into `scratch`.
  Tensor dropped_gradient(Tensor dres, Tensor scratch, int layer, DropoutMask::Site site, float p, int C);
  void allocate_activations(bool forward_only);
  // Rows of wte chunk k of the tied gradient: the lm_head part (dlogits^T lnf)
  // and/or the embedding part (the scatter of dresidual), into dst.
  void wte_chunk_parts(int k, Tensor dst, bool lm_head, bool embedding);
  Tensor wte_chunk_of(const Tensor& wte_grad, int k) const;
  // Activation t's rows of the current batch at layer l (stride: the allocated batch).
  Tensor at_layer(const Tensor& t, int l, size_t per_row) const;
  Backend& backend_;
  GPT2Config cfg_;
  ParamLayout layout_;
  int B_, T_;
  int cur_B_ = 0, cur_T_ = 0;  // the batch the activations hold (0: no forward yet)
  bool dlogits_ready_ = false;  // the logits buffer holds dlogits no backward has read yet
  bool tied_ready_ = false;     // a backward has run since the last forward (wte_grad_chunk)
  bool training_ = false;       // the current forward is a training forward
  float dloss_scale_ = 0.0f;    // its dlogits' scale
  bool has_targets_ = false;    // the current forward has targets
  size_t batch_supervised_ = 0;  // its targets that are not ignored
  LossSum loss_;                // of the last evaluation forward
  Tensor loss_slots_;           // training forwards' per-token losses: slots of B_*T_ elements
  Tensor last_losses_;          // the last forward's per-token losses (a slot or acts_.losses)
  std::vector<size_t> slot_rows_;  // per used slot: its forward's B*T
  size_t slot_count_ = 0;          // their supervised targets
  const bool forward_only_, keep_dlogits_;
  DropoutRates dropout_;
  uint64_t dropout_seed_ = 0;
  uint32_t dropout_step_ = 0;
  uint64_t dropout_token0_ = 0;
  bool dropping_ = false;  // the current forward (and its backward) applies dropout
  bool recompute_gelu_ = false;
  bool recompute_ln_ = false;
  ParamSource* const source_;
  Tensor params_;
  Activations acts_;
  std::vector<Tensor> owned_;  // everything to free
  size_t activation_bytes_ = 0;
};

}  // namespace gpt2

#endif  // MODEL_GPT2_H

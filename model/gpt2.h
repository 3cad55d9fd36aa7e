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

// Sizes and offsets of the 16 parameter tensors inside one flat buffer.
struct ParamLayout {
  std::array<size_t, kNumParamTensors> numel{};
  std::array<size_t, kNumParamTensors> offset{};
  size_t total = 0;
  int num_layers = 0;
  size_t wte_rows = 0;  // wte_chunk_rows()

  static ParamLayout for_config(const GPT2Config& cfg);
  static const char* name(int t);
  static bool is_per_layer(int t);  // stacked over layers (everything but wte, wpe, lnf)
  static bool decays(int t);        // AdamW weight decay applies: 2-D matmul weights + embeddings
  // Elements of tensor t that belong to layer l (per-layer tensors only).
  size_t layer_offset(int t, int l) const { return offset[t] + numel[t] / num_layers * l; }
  size_t layer_numel(int t) const { return numel[t] / num_layers; }
  size_t channels() const { return numel[kLnfw]; }
  // Elements of one layer's gradients, all per-layer tensors together.
  size_t layer_unit_numel() const;
  // ZeRO-2 stages the tied wte/lm_head gradient in chunks of this many vocab
  // rows: a multiple of 64 (aligned slices), >= 64, and no more than one
  // layer's gradient buffer holds, so chunks reuse the layer buffers and the
  // staging never holds the whole V x C table (d12: 9216 rows, 6 chunks).
  // GPT2_ZERO2_WTE_CHUNK_ROWS overrides it (tests; same on every rank; read by for_config).
  size_t wte_chunk_rows() const { return wte_rows; }
  int num_wte_chunks() const;
  size_t wte_chunk_row0(int k) const { return static_cast<size_t>(k) * wte_rows; }  // chunk k's first row
  size_t wte_chunk_numel(int k) const;  // elements of chunk k (the last may be shorter)
  // Tensor t (layer l if stacked) of a flat buffer laid out like the parameters.
  Tensor view(Tensor flat, int t, int l) const {
    return is_per_layer(t) ? flat.slice(layer_offset(t, l), layer_numel(t)) : flat.slice(offset[t], numel[t]);
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
  // backward scratch. dln lives in attproj's buffer (forward-only); with
  // kFull gradients the others are carved from the logits buffer where it is
  // large enough (dlogits are dead once the lm_head backward has run).
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

// Where backward() accumulates parameter gradients, and who hears that a unit
// is final (layers L-1 down to 0, then -1: wpe, lnfw, lnfb). The memory (the
// flat buffer, ZeRO-2's staging in train/zero_staging.h) and what a finished
// unit sets off (a bucket's all-reduce, a reduce-scatter) are the sink's.
class GradientSink {
 public:
  virtual ~GradientSink() = default;
  // Before the backward's first write into unit u (the rest: first thing).
  virtual void unit_begin(int unit) { (void)unit; }
  // Tensor t's gradient (layer l if stacked), added into (+=). An empty kWte
  // leaves the tied wte/lm_head gradient to the caller (GPT2::wte_grad_chunk).
  virtual Tensor grad(int t, int l) = 0;
  // Unit u's gradients are final for this backward (-1: the last call).
  virtual void unit_done(int unit) { (void)unit; }
};

// A flat buffer laid out like the parameters (ParamLayout) as a sink: a view of
// it for every tensor, the tied wte included. kFull's own buffer is one; a
// subclass may act on finished units (DataParallel's gradient buckets).
class FlatGradientSink : public GradientSink {
 public:
  FlatGradientSink(const ParamLayout& layout, Tensor flat) : layout_(layout), flat_(flat) {}
  FlatGradientSink(ParamLayout&&, Tensor) = delete;  // the layout must outlive the sink
  Tensor grad(int t, int l) override { return layout_.view(flat_, t, l); }
  const Tensor& flat() const { return flat_; }

 private:
  const ParamLayout& layout_;
  Tensor flat_;
};

// What the model allocates for gradients.
//   kFull:     one flat buffer like the parameters, grads(); backward() adds
//              every gradient there, the tied wte included, unless given
//              another sink (which may hand out views of grads()).
//   kExternal: none; backward() takes the caller's sink (ZeRO-2's staging).
//              dlogits survive the backward (no scratch carved from them), so
//              wte_grad_chunk can build the tied gradient after it.
//   kNone:     forward only (--eval-only, --generate): no gradient buffer or
//              backward scratch; backward(), grads() and a training forward
//              (prepare_backward) throw.
enum class GradMode { kFull, kExternal, kNone };

class GPT2 {
 public:
  // Allocates for batches up to B x T. `param_capacity` (>= the parameter
  // count; 0 = exact) zero-pads the parameter and full gradient buffers, e.g.
  // to a multiple of the world size. `recompute` (--recompute): 0 keeps every
  // activation; 1 keeps one layer's GELU output and recomputes it in the
  // backward; 2 also the layernorm output (ln1 and ln2 share one layer's).
  // Recomputed values are bitwise the forward's.
  GPT2(Backend& backend, const GPT2Config& cfg, int B, int T, GradMode grad_mode = GradMode::kFull,
       size_t param_capacity = 0, int recompute = 0);
  ~GPT2();
  GPT2(const GPT2&) = delete;
  GPT2& operator=(const GPT2&) = delete;

  const GPT2Config& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  size_t num_parameters() const { return layout_.total; }
  int max_batch() const { return B_; }
  int max_seq() const { return T_; }

  Tensor params() const { return params_; }  // param_capacity() elements
  size_t param_capacity() const { return params_.numel; }
  GradMode grad_mode() const { return grad_mode_; }
  // kFull: the flat gradient buffer (param_capacity() elements); else throws.
  Tensor grads() const;
  Tensor param(int t) const { return params_.slice(layout_.offset[t], layout_.numel[t]); }
  // The tied wte/lm_head gradient comes in chunks of wte_chunk_rows() vocab
  // rows (the last shorter), each an lm_head part plus an embedding part. With
  // the model's own flat buffer backward() adds them into grads() itself
  // (lm_head parts first, embedding parts at the end). With a sink that leaves
  // kWte to the caller, call this after backward() (before the next forward):
  // it overwrites dst (layout().wte_chunk_numel(k) elements) with chunk k.
  void wte_grad_chunk(int k, Tensor dst);
  size_t gradient_bytes() const { return gradient_bytes_; }
  size_t activation_bytes() const { return activation_bytes_; }

  // GPT-2 init: N(0, 0.02), residual projections (attprojw, fcprojw) scaled by
  // 1/sqrt(2L), biases 0, layernorm weights 1. Deterministic in `seed`.
  void init_random(uint64_t seed);
  void set_parameters(const std::vector<float>& host);  // layout_.total floats
  std::vector<float> get_parameters() const;

  // Forward over inputs[B*T] (B <= max_batch, T <= max_seq). With targets,
  // returns the mean per-token loss over targets that are not kIgnoreTarget
  // (backend/backend.h: no loss, no gradient; 0 if all are); `prepare_backward`
  // replaces the logits by dlogits scaled by `dloss_scale` (the caller's
  // 1 / supervised targets of the whole step). Without targets, only logits.
  float forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                bool prepare_backward = false, float dloss_scale = 0.0f);
  // Of the last forward with targets: the sum of the per-token losses (fp64)
  // and the number of targets that were not ignored.
  double loss_sum() const { return loss_sum_; }
  size_t loss_count() const { return loss_count_; }
  // Deferred losses: one download per optimizer step, not per forward (a host
  // wait each). After begin_deferred_losses(k), up to k forwards with targets
  // keep their per-token losses on the device (slot i for the i-th) and
  // return 0; collect_deferred_losses() downloads them at once and sets
  // loss_sum() to the in-order sum of each forward's fp64 sum (what the
  // per-forward loss_sum()s add up to) and loss_count() to their total. Slots
  // (B*T elements) come on first use, or ahead by reserve_deferred_losses
  // (defers nothing) so memory reports and --dry-run count them from the start.
  void reserve_deferred_losses(int forwards);
  void begin_deferred_losses(int forwards);
  double collect_deferred_losses();
  // Dropout (inverted, HF's semantics) applies only in training forwards
  // (prepare_backward = true) and their backward. Masks are util/philox.h's
  // function of (seed, step, layer, site, global token, column):
  // set_dropout_position names the optimizer step and the global token of
  // this micro-batch's row 0 (row b*T + t is token0 + b*T + t), so ranks and
  // micro-batches splitting a step's batch draw what one rank with the whole
  // batch would. Rates outside [0, 1) throw.
  void set_dropout(const DropoutRates& rates, uint64_t seed);
  void set_dropout_position(uint32_t step, uint64_t token0);

  // Accumulates into `sink` (nullptr: the model's own buffer, kFull only) the
  // gradients of this B x T batch's forward(prepare_backward = true), which
  // must be the last forward run (else throws).
  void backward(int B, int T, GradientSink* sink = nullptr);
  void zero_grad();

  // Row b, position t's logits (V real entries) from the last forward; not
  // after a backward (dlogits then, and kFull reuses the buffer as scratch).
  std::vector<float> logits_at(int b, int t) const;
  std::vector<float> losses() const;  // B*T from the last forward with targets

 private:
  void check_batch(const int32_t* inputs, const int32_t* targets, int B, int T) const;
  // The mask of layer l's site: rate p when this forward drops, else 0 (no dropout).
  DropoutMask mask_of(int layer, DropoutMask::Site site, float p) const;
  // In place on x (rows of C): the mask of layer l's site when this forward drops there.
  void drop(Tensor x, int layer, DropoutMask::Site site, float p, int C);
  // A dropped projection's gradient: `dres` if not dropped there, else it through the mask into `scratch`.
  Tensor dropped_gradient(Tensor dres, Tensor scratch, int layer, DropoutMask::Site site, float p, int C);
  void forward_layers();
  float forward_loss(const int32_t* targets, bool prepare_backward, float dloss_scale);
  void allocate_activations();
  // Rows of wte chunk k of the tied gradient: the lm_head part (dlogits^T lnf)
  // and/or the embedding part (the scatter of dresidual), into dst.
  void wte_chunk_parts(int k, Tensor dst, bool lm_head, bool embedding);
  Backend& backend_;
  GPT2Config cfg_;
  ParamLayout layout_;
  int B_, T_;
  int cur_B_ = 0, cur_T_ = 0;  // the batch the activations hold (0: no forward yet)
  // What the activations of that batch are ready for: backward() wants
  // kPrepared, wte_grad_chunk kBackwardDone.
  enum class Pass { kForward, kPrepared, kBackwardDone } pass_ = Pass::kForward;
  double loss_sum_ = 0.0;
  size_t loss_count_ = 0;
  Tensor loss_slots_;                 // deferred losses: slots of B_*T_ elements
  int deferred_slots_ = 0;            // slots in use until collected (0: not deferring)
  std::vector<size_t> deferred_rows_;  // per used slot: its forward's B*T
  size_t deferred_count_ = 0;
  GradMode grad_mode_;
  DropoutRates dropout_;
  uint64_t dropout_seed_ = 0;
  uint32_t dropout_step_ = 0;
  uint64_t dropout_token0_ = 0;
  bool dropping_ = false;  // the current forward (and its backward) applies dropout
  bool recompute_gelu_ = false;
  bool recompute_ln_ = false;
  Tensor params_, grads_;                 // grads_: kFull only
  size_t gradient_bytes_ = 0;
  Activations acts_;
  std::vector<Tensor> owned_;  // everything to free
  size_t activation_bytes_ = 0;
};

}  // namespace gpt2

#endif  // MODEL_GPT2_H

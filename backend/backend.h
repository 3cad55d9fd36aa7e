// The narrow seam between the model and the hardware.
//
// The model (model/) owns the tensor table: which parameter, gradient and
// activation lives at which element offset of a few big buffers, computed once
// from the config. A backend owns the memory behind those buffers and
// implements every GPT-2 op, forward and backward, on raw views plus shapes.
// The CPU backend (backend/cpu/) is fp32 and the numerical reference; the CUDA
// backend (backend/cuda/) implements the same entries. Precision is a property of a
// backend's buffers (Tensor::elem_bytes), never of the model code, which only
// moves Tensor views around and never dereferences them.
//
// Conventions for every op below:
//   * shapes are row-major; N = B*T rows of C channels unless stated;
//   * "+=" outputs accumulate into what is there (parameter gradients across
//     micro-steps, residual-stream gradients across branches); "=" outputs are
//     overwritten;
//   * weights of a linear layer are [OC, C] (PyTorch's nn.Linear layout), so
//     out = inp @ w^T + bias;
//   * ops are synchronous from the caller's point of view except where a
//     backend documents otherwise; results that come back to the host
//     (sum_squares, download) are complete when the call returns.
#ifndef BACKEND_BACKEND_H
#define BACKEND_BACKEND_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "util/philox.h"

namespace gpt2 {

// What a buffer is for; a backend may pick a different element type per role
// (e.g. bf16 activations, fp32 master weights).
enum class BufferRole : uint8_t {
  kParams,       // model weights used by the forward pass
  kGrads,        // parameter gradients
  kOptimizer,    // AdamW moments (and master weights where kept); always fp32
  kActivations,  // forward activations and their gradients
  kTokens,       // int32 token ids
  kScratch,      // anything else an op needs
  kStats,        // per-row statistics and losses (layernorm mean/rstd, per-token
                 // losses): fp32 on every backend, whatever the storage type
  kScalar64,     // fp64 values (the gradient norm's state): 8-byte elements everywhere
};

// What a buffer of `role` holds, for an allocation failure's message.
inline const char* buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::kParams: return "parameters";
    case BufferRole::kGrads: return "gradients";
    case BufferRole::kOptimizer: return "optimizer state";
    case BufferRole::kActivations: return "activations";
    case BufferRole::kTokens: return "token ids";
    case BufferRole::kScratch: return "scratch";
    case BufferRole::kStats: return "per-row statistics";
    case BufferRole::kScalar64: return "fp64 scalars";
  }
  return "a buffer";
}

// The memory of the device a backend allocates from, as its driver reports it
// at the time of the query. present == false: the buffers are host memory (the
// host's own measurement covers them) and the rest is meaningless.
struct DeviceMemory {
  bool present = false;
  size_t free_bytes = 0, total_bytes = 0;
  std::string device;  // which device, for messages: "GPU 0 (NVIDIA H100 80GB HBM3)"
};

class Backend;
// A named profiler range (NVTX on the CUDA backend) for the scope's lifetime.
class ProfileRange {
 public:
  ProfileRange(Backend& backend, const std::string& name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  Backend& backend_;
};

// A view of backend-owned memory. Never dereferenced by model code.
struct Tensor {
  void* ptr = nullptr;
  size_t numel = 0;
  uint32_t elem_bytes = 0;

  Tensor slice(size_t elem_offset, size_t n) const {
    return Tensor{static_cast<char*>(ptr) + elem_offset * elem_bytes, n, elem_bytes};
  }
  bool empty() const { return ptr == nullptr; }
  size_t bytes() const { return numel * elem_bytes; }
};

// A target id that contributes neither loss nor gradient (classifier_forward_backward).
constexpr int32_t kIgnoreTarget = -1;

// The ops' arguments (the ops and their formulas are in class Backend below).
// Tensors a default-constructed struct leaves out are empty: the ops that
// accept an empty tensor say so.
struct EncoderForwardArgs {
  Tensor out, tokens, wte, wpe;
  int B = 0, T = 0, C = 0;
};
struct EncoderBackwardArgs {
  Tensor dwte, dwpe, dout, tokens;
  int B = 0, T = 0, C = 0;
};
struct TiedEmbeddingRowsArgs {
  Tensor dwte_rows, dlogits, lnf, dembed, tokens;
  int N = 0, C = 0, Vp = 0, v0 = 0;
};
struct LayernormForwardArgs {
  Tensor out, mean, rstd, inp, w, b;
  int N = 0, C = 0;
};
struct LayernormBackwardArgs {
  Tensor dinp, dw, db, dout, inp, w, mean, rstd;
  int N = 0, C = 0;
};
struct MatmulForwardArgs {
  Tensor out, inp, w, bias;
  int N = 0, C = 0, OC = 0;
};
struct MatmulBackwardArgs {
  Tensor dinp, dw, dbias, dout, inp, w;
  int N = 0, C = 0, OC = 0;
};
struct MatmulGeluForwardArgs {
  Tensor out, pre, inp, w, bias;
  int N = 0, C = 0, OC = 0;
};
struct MatmulGeluBackwardArgs {
  Tensor dinp, dw, dbias, dout, inp, w, gelu_inp;
  int N = 0, C = 0, OC = 0;
};
struct AttentionForwardArgs {
  Tensor out, saved, qkv;
  int B = 0, T = 0, C = 0, NH = 0;
  DropoutMask drop;
};
struct AttentionBackwardArgs {
  Tensor dqkv, scratch, dout, out, qkv, saved;
  int B = 0, T = 0, C = 0, NH = 0;
  DropoutMask drop;
};
struct GeluForwardArgs {
  Tensor out, inp;
  size_t n = 0;
};
struct GeluBackwardArgs {
  Tensor dinp, inp, dout;
  size_t n = 0;
};
struct ResidualForwardArgs {
  Tensor out, a, b;
  size_t n = 0;
};
struct ResidualLayernormForwardArgs {
  Tensor residual, out, mean, rstd, a, b, w, bias;
  int N = 0, C = 0;
};
struct DropoutArgs {
  Tensor out, inp;
  DropoutMask m;
  int N = 0, C = 0;
};
struct ClassifierArgs {
  Tensor logits, losses, targets;
  int N = 0, V = 0, Vp = 0;
  float dloss = 0.0f;
};
struct AdamWArgs {
  Tensor params, master, grads, m, v;
  float lr = 0.0f, beta1 = 0.0f, beta2 = 0.0f, eps = 0.0f, weight_decay = 0.0f;
  float grad_scale = 1.0f;
  int t = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual bool is_host_memory() const = 0;  // true when Tensor::ptr is a host pointer

  // ---- memory -------------------------------------------------------------
  virtual Tensor alloc(size_t numel, BufferRole role) = 0;  // contents unspecified
  virtual void free(Tensor t) = 0;
  virtual void zero(Tensor t) = 0;
  // host fp32 <-> buffer element type (rounding to the buffer's type on upload)
  virtual void upload(Tensor dst, const float* src) = 0;        // dst.numel elements
  virtual void download(float* dst, Tensor src) = 0;            // src.numel elements
  virtual void upload_tokens(Tensor dst, const int32_t* src) = 0;  // kTokens buffer
  virtual void copy(Tensor dst, Tensor src) = 0;                // same role/type, dst.numel elems
  virtual void synchronize() {}
  // Transfers that overlap host work (the offloaded optimizer's). Queued in
  // order after the ops issued before them, they return at once; `host` must
  // stay untouched until wait_mark(a mark issued after them) returns.
  //   download_async: host[i] = float(src[i])   (src.numel elements)
  //   upload_async:   dst[i] = round(host[i])   (dst.numel elements)
  // `via`: fp32 device scratch of at least as many elements, used when the
  // device tensor is bf16: widened and rounded on the device, so fp32 crosses
  // the bus and the host converts nothing. Host memory registered by pin_host
  // is copied by DMA while the host works; other memory is staged (slower).
  // Defaults: the synchronous upload and download, marks that are all passed.
  virtual void download_async(float* host, Tensor src, Tensor via) { (void)via; download(host, src); }
  virtual void upload_async(Tensor dst, const float* host, Tensor via) { (void)via; upload(dst, host); }
  virtual uint64_t issue_mark() { return 0; }    // everything queued so far
  virtual void wait_mark(uint64_t mark) { (void)mark; }  // the host waits until it has run
  // Page-locks [p, p + bytes) for the transfers above (false: left pageable).
  virtual bool pin_host(void* p, size_t bytes) { (void)p; (void)bytes; return false; }
  virtual void unpin_host(void* p) { (void)p; }
  // Profiling (CUDA: NVTX ranges that nsys and ncu show, and the capture
  // window of cudaProfilerStart/Stop for --profile-steps); no-ops elsewhere.
  virtual void range_push(const char* name) { (void)name; }
  virtual void range_pop() {}
  virtual void profiler_capture(bool on) { (void)on; }
  // The device's free and total bytes now (cudaMemGetInfo on the CUDA backend),
  // so a run can be checked against them before it allocates. Default: no
  // device memory (present == false), which is the CPU backend's answer.
  virtual DeviceMemory device_memory() const { return DeviceMemory{}; }

  // ---- forward / backward ops ----------------------------------------------
  // Each op takes one argument struct (declared below the class) whose fields
  // are named at the call site, `be.gelu_backward({.dinp = d, .inp = x, .dout
  // = d, .n = n})`, so two tensors of one shape cannot trade places unseen.
  // Outputs come first, then inputs, then the shape.

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void encoder_forward(const EncoderForwardArgs& args) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:];  dwpe[t,:] += dout[b,t,:]
  // (dwte empty: dwpe only; ZeRO-2 builds dwte with tied_embedding_backward_rows)
  virtual void encoder_backward(const EncoderBackwardArgs& args) = 0;
  // Rows [v0, v0 + R) of the tied wte/lm_head gradient, R = dwte_rows.numel / C:
  //   dwte_rows[v-v0,:] += sum_n dlogits[n,v] * lnf[n,:]       (matmul_backward's dw)
  //   then dwte_rows[v-v0,:] += dembed[n,:] for each n with tokens[n] == v
  // in that order, so a chunk equals those rows of matmul_backward's dw followed
  // by encoder_backward's dwte. dlogits is [N,Vp], lnf and dembed [N,C]. Either
  // part may be left out (dlogits and lnf empty, or dembed empty) and run later:
  // the same additions in the same order.
  virtual void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) = 0;

  // out = (inp - mean) * rstd * w + b, eps 1e-5; saves mean[N], rstd[N] (kStats:
  // fp32 tensors, so a bf16 backend keeps the statistics unrounded)
  virtual void layernorm_forward(const LayernormForwardArgs& args) = 0;
  // dinp += ..., dw += ..., db += ...
  virtual void layernorm_backward(const LayernormBackwardArgs& args) = 0;

  // out[N,OC] = inp[N,C] @ w[OC,C]^T (+ bias[OC] when bias is not empty)
  virtual void matmul_forward(const MatmulForwardArgs& args) = 0;
  // dinp[N,C] = dout @ w  (overwritten);  dw[OC,C] += dout^T @ inp (when dw
  // is not empty); dbias[OC] += sum_rows(dout) when dbias is not empty
  virtual void matmul_backward(const MatmulBackwardArgs& args) = 0;

  // The fc layer and its GELU in one call: pre[N,OC] = inp @ w^T (+ bias), out =
  // gelu(pre). A backend may take GELU of the product before pre is rounded to
  // its storage type (the CUDA backend's cuBLASLt epilogue), so in bf16 `out`
  // can differ from gelu_forward(pre) by one rounding (and by the last bits of
  // another GELU implementation). The default is those two ops.
  virtual void matmul_gelu_forward(const MatmulGeluForwardArgs& args);
  // matmul_backward of the layer after a GELU (fcproj), with dinp multiplied by
  // gelu'(gelu_inp): dinp[N,C] = (dout @ w) * gelu'(gelu_inp), gelu_inp [N,C]
  // the GELU's input; dw, dbias as matmul_backward. A backend may apply gelu'
  // before rounding the product. The default is matmul_backward + gelu_backward.
  virtual void matmul_gelu_backward(const MatmulGeluBackwardArgs& args);

  // Causal multi-head self-attention. qkv[B,T,3C] holds q|k|v, heads of size C/NH.
  // out[B,T,C] = softmax(q k^T / sqrt(hs), causal) v.  `saved` is a buffer of
  // attention_saved_numel() elements the op keeps for its backward (what it
  // keeps is the backend's business: probabilities, or softmax statistics to
  // recompute them).
  // Attention-probability dropout `drop` (HF's attn_pdrop; drop.p == 0: none,
  // bit for bit the op without it): out = (P o Z) v with P the softmax and
  //   Z[b,h,t,j] = drop.keep_attention(drop.token0 + b*T, T, h, t, j) ? 1/(1-p) : 0
  // (util/philox.h; row b of the batch starts at global token token0 + b*T).
  // The softmax statistics are those of P, not of P o Z; the backward draws
  // Z again: dP = (dout v^T) o Z, dS = P o (dP - D) with D = rowsum(dout o out)
  // as without dropout, dv = (P o Z)^T dout.
  virtual size_t attention_saved_numel(int B, int T, int NH) const = 0;
  virtual void attention_forward(const AttentionForwardArgs& args) = 0;
  // dqkv = ... (overwritten).  `scratch` has attention_scratch_numel() elements;
  // `out` is what attention_forward wrote for this qkv (a backend may take
  // D = rowsum(dout * out) from it, as FlashAttention-2 does, or ignore it);
  // `drop` is the forward's.
  virtual size_t attention_scratch_numel(int B, int T, int NH) const = 0;
  virtual void attention_backward(const AttentionBackwardArgs& args) = 0;

  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  virtual void gelu_forward(const GeluForwardArgs& args) = 0;
  // dinp = gelu'(inp) * dout (overwritten; dinp may alias dout)
  virtual void gelu_backward(const GeluBackwardArgs& args) = 0;

  // out = a + b (out may alias a)
  virtual void residual_forward(const ResidualForwardArgs& args) = 0;
  // residual[N,C] = a + b, then out = layernorm(residual) with mean, rstd, w,
  // bias as layernorm_forward: the residual stream's add and the next
  // layernorm in one call (residual may alias a). The normalisation reads the
  // stored sum, so the results are those of the two ops (on the CUDA backend to
  // the bit when a and b are 16-byte aligned like the other views, as the
  // model's are: backend/cuda/layernorm.cuh). Default: the two ops.
  virtual void residual_layernorm_forward(const ResidualLayernormForwardArgs& args);

  // Inverted dropout of an [N, C] tensor whose row r is global token m.token0 + r:
  //   out[r, c] = inp[r, c] * (m.keep(m.token0 + r, c) ? 1 / (1 - m.p) : 0)   (=)
  // with m.keep util/philox.h's pure function of (seed, step, stream, token,
  // column), the scale m.keep_scale() in fp32 and one rounding of the product;
  // out may alias inp. The backward is the same call on the gradient (the mask
  // is drawn again, nothing is stored). A dropped NaN or Inf stays NaN, as x * 0.
  virtual void dropout(const DropoutArgs& args) = 0;

  // Fused classifier: for each of the N rows of logits[N,Vp] (only the first V
  // columns are real; the padded ones never affect anything):
  //   losses[n] = -log softmax(logits[n,:V])[targets[n]]   (losses: kStats, fp32)
  // and when dloss != 0 the row is overwritten in place with
  //   dlogits = (softmax - onehot(target)) * dloss,  padded columns set to 0,
  // so B*T*Vp floats are materialised once. A target of kIgnoreTarget (-1, like
  // PyTorch's ignore_index) marks a row outside the loss (SFT prompt tokens,
  // padding): its loss is exactly 0 and, with dloss != 0, its whole row of
  // dlogits is exactly 0. Other targets outside [0, V) are an error the caller
  // has already excluded.
  virtual void classifier_forward_backward(const ClassifierArgs& args) = 0;

  // ---- optimizer ------------------------------------------------------------
  // Sum of squares of g (accumulated in fp64 on the CPU backend), returned to the host.
  // The trainer uses sum_squares_into (below); this host-returning form is the CPU
  // backend's way to fill it and the value every backend's sum_squares_into must
  // equal bit for bit (cuda_clip_test).
  virtual double sum_squares(Tensor g) = 0;
  // AdamW (decoupled weight decay) on n = params.numel elements:
  //   g = grads * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
  //   mhat = m / (1 - b1^t); vhat = v / (1 - b2^t)
  //   params -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * params)
  // `master` is an fp32 copy of params kept by backends whose params are lower
  // precision; empty on the CPU backend.
  virtual void adamw_update(const AdamWArgs& args) = 0;

  // ---- gradient clipping that stays on the device ----------------------------
  // `clip` is a kScalar64 tensor of 2 elements. The norm and the clip scale are
  // computed where the gradients are; the host only reads the norm (to log it
  // and act on a non-finite one), in the step's one wait:
  //   sum_squares_into(clip, g)   clip[0] = sum_squares(g) (the same fp64 value)
  //   (the caller all-reduces clip[0] over ranks where each holds a shard)
  //   clip_scale(clip, max_norm)  clip[1] = clip_scale_value(clip[0], max_norm)
  //   read_clip(dst, clip)        both values on the host, waiting only for
  //                               the last clip_scale (not for later work)
  //   adamw_update_clipped(...)   adamw_update with grad_scale = float(clip[1]),
  //                               or no change at all when clip[1] is NaN
  // download64 reads fp64 elements back (a host wait).
  virtual void sum_squares_into(Tensor clip, Tensor g) = 0;
  virtual void clip_scale(Tensor clip, float max_norm) = 0;
  virtual void download64(double* dst, Tensor src) = 0;  // src.numel kScalar64 elements
  virtual void read_clip(double* dst, Tensor clip) { download64(dst, clip.slice(0, 2)); }
  // adamw_update with args.grad_scale replaced by clip[1]. Default: the scale
  // read back, then adamw_update (a host wait; the CUDA backend reads clip[1]
  // in the kernel instead).
  virtual void adamw_update_clipped(const AdamWArgs& args, Tensor clip);
};

// The gradient scale of clipping to max_norm from the fp64 sum of squares: NaN
// (skip the step) when the norm is not finite, max_norm / norm rounded to fp32
// when clipping is on (max_norm > 0) and the norm exceeds it, else 1. The CUDA
// kernel (global_norm.cuh) does the same fp64 operations, so every backend's
// scale agrees bit for bit.
inline double clip_scale_value(double sum_squares, float max_norm) {
  const double norm = std::sqrt(sum_squares);
  if (!std::isfinite(norm)) return std::numeric_limits<double>::quiet_NaN();
  if (max_norm > 0.0f && norm > max_norm) return static_cast<float>(max_norm / norm);
  return 1.0;
}

// The compound ops' defaults: their parts, in order.
inline void Backend::matmul_gelu_forward(const MatmulGeluForwardArgs& args) {
  matmul_forward(
      {.out = args.pre, .inp = args.inp, .w = args.w, .bias = args.bias, .N = args.N, .C = args.C, .OC = args.OC});
  gelu_forward({.out = args.out, .inp = args.pre, .n = static_cast<size_t>(args.N) * args.OC});
}
inline void Backend::matmul_gelu_backward(const MatmulGeluBackwardArgs& args) {
  matmul_backward({.dinp = args.dinp,
                   .dw = args.dw,
                   .dbias = args.dbias,
                   .dout = args.dout,
                   .inp = args.inp,
                   .w = args.w,
                   .N = args.N,
                   .C = args.C,
                   .OC = args.OC});
  gelu_backward(
      {.dinp = args.dinp, .inp = args.gelu_inp, .dout = args.dinp, .n = static_cast<size_t>(args.N) * args.C});
}
inline void Backend::residual_layernorm_forward(const ResidualLayernormForwardArgs& args) {
  residual_forward({.out = args.residual, .a = args.a, .b = args.b, .n = static_cast<size_t>(args.N) * args.C});
  layernorm_forward({.out = args.out,
                     .mean = args.mean,
                     .rstd = args.rstd,
                     .inp = args.residual,
                     .w = args.w,
                     .b = args.bias,
                     .N = args.N,
                     .C = args.C});
}
inline void Backend::adamw_update_clipped(const AdamWArgs& args, Tensor clip) {
  double state[2];
  download64(state, clip.slice(0, 2));
  if (std::isnan(state[1])) return;
  AdamWArgs scaled = args;
  scaled.grad_scale = static_cast<float>(state[1]);
  adamw_update(scaled);
}

// Factories. `threads` <= 0 means "use the OpenMP default".
std::unique_ptr<Backend> make_cpu_backend(int threads);

inline ProfileRange::ProfileRange(Backend& backend, const std::string& name) : backend_(backend) {
  backend_.range_push(name.c_str());
}
inline ProfileRange::~ProfileRange() { backend_.range_pop(); }

}  // namespace gpt2

#endif  // BACKEND_BACKEND_H

// cuDNN's fused attention (flash-style SDPA), forward and deterministic
// backward, bf16, through cuDNN's graph API: the fast path of
// CudaAttention::kAuto / kCudnn (backend/cuda/cuda_backend.h).
//
// Q, K and V are read in place from the packed qkv[B, T, 3, NH, HS] buffer by
// strides; causal, scale 1/sqrt(HS), fp32 compute. The forward keeps the
// softmax statistics (natural-log log-sum-exp of the scaled scores, fp32
// [B, NH, T]: the same quantity as the flash kernels' lse, so `saved` has one
// layout for both); the backward recomputes P from them. Plans are built once
// per (B, T, NH, HS) and cached: building one is slow. The workspace (the
// backward's dO.O row sums and the plan's own) is grown on demand.
//
// No cuDNN type appears here: a build without cuDNN links
// cudnn_attention_absent.cpp instead of cudnn_attention.cpp.
#ifndef BACKEND_CUDA_CUDNN_ATTENTION_H
#define BACKEND_CUDA_CUDNN_ATTENTION_H

#include <cstddef>
#include <memory>
#include <string>

namespace gpt2 {

class CudnnAttention {
 public:
  virtual ~CudnnAttention() = default;
  // "" when cuDNN takes this shape's forward and backward graphs (their plans
  // are then built and cached), else the reason it does not.
  virtual std::string prepare(int B, int T, int NH, int HS) = 0;
  // out[B, T, NH*HS] (bf16) and stats[B, NH, T] (fp32) from qkv (bf16).
  virtual void forward(void* out, float* stats, const void* qkv, int B, int T, int NH, int HS) = 0;
  // dqkv[B, T, 3, NH, HS] (bf16, overwritten) from dout, the forward's out and stats.
  virtual void backward(void* dqkv, const void* dout, const void* out, const void* qkv, const float* stats, int B,
                        int T, int NH, int HS) = 0;
  // Device bytes this object holds (its workspace as grown so far).
  virtual size_t workspace_bytes() const = 0;
};

// Whether this build links cuDNN (the library, or the emulator's model of it).
bool cudnn_attention_built();

// "cuDNN 9.19.0" (the library's run-time version) or why there is none.
std::string cudnn_attention_version();

// A cuDNN handle on `stream` (a cudaStream_t). Throws std::runtime_error naming
// the cuDNN status when the library cannot start, or in a build without it.
std::unique_ptr<CudnnAttention> make_cudnn_attention(void* stream);

// The workspace bytes the backward needs of its own, before the plan's
// (the dO.O row sums, B*NH*T fp32, rounded up to 256 bytes).
inline size_t cudnn_row_sum_bytes(int B, int T, int NH) {
  const size_t bytes = static_cast<size_t>(B) * NH * T * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

}  // namespace gpt2

#endif  // BACKEND_CUDA_CUDNN_ATTENTION_H

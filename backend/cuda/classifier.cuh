// Fused classifier: softmax + cross-entropy + dlogits, in place on the logits.
//
// One 512-thread block per row of Vp (only the first V columns are real); each
// thread moves P elements per access: P = kPack<T> (one 128-bit access, 4 floats
// or 8 bf16) when Vp % P == 0 and the logits are 16-byte aligned (then every row
// start is), else P = 1, the scalar kernel from the same source.
//   pass 1  one read of the row: each thread keeps a running max m_t and a sum
//           s_t = sum exp(l_j - m_t) of its elements (online softmax): per pack,
//           if the pack's max exceeds m_t, s_t *= exp(m_t - max) (fp64) and m_t
//           moves up; then s_t += expf(l_j - m_t) (fp32 exp, fp64 sum). Then
//           m = max_t m_t (block_max) and S = sum_t s_t exp(m_t - m) (fp64,
//           block_sum). Each term is expf of a difference in [l_j - m, 0], so S
//           is exact to fp32 rounding as with a separate max pass.
//   loss    log S + m - l_target (fp64, stored in fp32 (kStats) whatever T; l_target read by every
//           thread before the first barrier, so no thread can have overwritten it)
//   pass 2  (dloss != 0 only) l_j = expf(l_j - m) * (dloss / S) - dloss [j == t]
//           for j < V, 0 for V <= j < Vp; evict-first loads and stores (last use)
// The exps are recomputed in pass 2 instead of stored: DRAM sees at most 2 reads
// + 1 write of the row (pass 2's re-read partly hits L2: pass 1 loads are plain),
// and no probabilities buffer. dloss == 0 (evaluation) leaves the logits untouched.
// A NaN logit makes S, the loss and the row's gradient NaN (the maxes skip it, the
// sum does not). A target outside [0, V) gives a NaN loss and, with dloss != 0, a
// NaN row (padding 0); kIgnoreTarget (-1) gives loss 0 and, with dloss != 0, a
// zero row. The running maxes start at -FLT_MAX, not -inf, so a thread whose
// elements are all -inf adds exp(-inf) = 0 instead of exp(-inf - -inf) = NaN.
#ifndef BACKEND_CUDA_CLASSIFIER_CUH
#define BACKEND_CUDA_CLASSIFIER_CUH

#include <cfloat>

#include "backend/backend.h"  // kIgnoreTarget
#include "backend/cuda/common.cuh"
#include "backend/cuda/pack128.cuh"

namespace gpt2 {
namespace kern {

constexpr int kClassifierBlock = 512;

template <class T, int P>
__global__ void classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp, float dloss) {
  __shared__ float max_partials[kWarpSize];
  __shared__ double sum_partials[kWarpSize];
  const int row = blockIdx.x;
  T* l = logits + static_cast<size_t>(row) * Vp;
  const int packs = Vp / P;                 // the whole row (Vp % P == 0)
  const int packs_v = (V + P - 1) / P;      // those holding a real column
  const int target = targets[row];
  if (target == kIgnoreTarget) {  // outside the loss; uniform per block, so no barrier is skipped unevenly
    if (threadIdx.x == 0) losses[row] = 0.0f;
    if (dloss != 0.0f) {
      float zeros[P];
      for (int k = 0; k < P; k++) zeros[k] = 0.0f;
      for (int i = threadIdx.x; i < packs; i += blockDim.x) store_floats<P, true>(l + i * P, zeros);
    }
    return;
  }
  const bool valid = target >= 0 && target < V;
  const float l_target = valid ? to_float(l[target]) : NAN;
  // pass 1: running max and rescaled sum
  float m = -FLT_MAX;
  double s = 0.0;
  for (int i = threadIdx.x; i < packs_v; i += blockDim.x) {
    const int j0 = i * P;
    float f[P];
    load_floats<P>(f, l + j0);
    float pm = m;
    for (int k = 0; k < P; k++)
      if (j0 + k < V && f[k] > pm) pm = f[k];
    if (pm > m) {
      s *= exp(static_cast<double>(m) - static_cast<double>(pm));
      m = pm;
    }
    for (int k = 0; k < P; k++)
      if (j0 + k < V) s += static_cast<double>(expf(f[k] - m));
  }
  const float mx = block_max(m, max_partials);
  s *= exp(static_cast<double>(m) - static_cast<double>(mx));
  const double sum = block_sum(s, sum_partials);
  if (threadIdx.x == 0)
    losses[row] = static_cast<float>(log(sum) + static_cast<double>(mx) - static_cast<double>(l_target));
  if (dloss == 0.0f) return;
  // pass 2: the gradient, in place
  const float scale = static_cast<float>(static_cast<double>(dloss) / sum);
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const int j0 = i * P;
    float f[P];
    if (i < packs_v) {
      load_floats<P, true>(f, l + j0);
    } else {
      for (int k = 0; k < P; k++) f[k] = 0.0f;
    }
    for (int k = 0; k < P; k++) {
      const int j = j0 + k;
      float g = 0.0f;
      if (j < V) {
        g = expf(f[k] - mx) * scale;
        if (j == target) g -= dloss;
        if (!valid) g = NAN;
      }
      f[k] = g;
    }
    store_floats<P, true>(l + j0, f);
  }
}

// True when the packed kernel serves these logits (rows of Vp elements).
template <class T>
bool classifier_packs(const T* logits, int Vp) {
  return can_pack(static_cast<size_t>(Vp), kPack<T>, logits);
}

template <class T>
void classifier_forward_backward(T* logits, float* losses, const int* targets, int N, int V, int Vp,
                                 float dloss, cudaStream_t stream) {
  if (classifier_packs(logits, Vp)) {
    auto kernel = classifier_kernel<T, kPack<T>>;
    LAUNCH_KERNEL(kernel, N, kClassifierBlock, 0, stream, logits, losses, targets, V, Vp, dloss);
  } else {
    auto kernel = classifier_kernel<T, 1>;
    LAUNCH_KERNEL(kernel, N, kClassifierBlock, 0, stream, logits, losses, targets, V, Vp, dloss);
  }
}

}  // namespace kern
}  // namespace gpt2

#endif  // BACKEND_CUDA_CLASSIFIER_CUH

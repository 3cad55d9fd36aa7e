// Fused classifier: softmax + cross-entropy + dlogits, in place on the logits.
//
// One 512-thread block per row of Vp (only the first V columns are real):
//   pass 1  m = max_j<V l_j                                  (block_max)
//   pass 2  S = sum_j exp(l_j - m), per-thread and block sums in fp64, so the
//           normaliser of 50257 exps is exact to fp32 rounding  (block_sum)
//   loss    log S + m - l_target (l_target read by every thread before the
//           first barrier, so no thread can have overwritten it yet)
//   pass 3  (dloss != 0 only) l_j = exp(l_j - m) * (dloss / S) - dloss [j == t]
//           for j < V, 0 for V <= j < Vp
// The exps are recomputed in pass 3 instead of stored: DRAM sees 2 reads + 1
// write of the row (the re-reads mostly hit L2), and no probabilities buffer.
// dloss == 0 (evaluation) leaves the logits untouched. A NaN logit makes S,
// the loss and the row's gradient NaN (the max skips it, the sum does not).
// A target outside [0, V) gives a NaN loss and, with dloss != 0, a NaN row;
// kIgnoreTarget (-1) gives loss 0 and, with dloss != 0, a zero row.
#ifndef KERNELS_CLASSIFIER_CUH
#define KERNELS_CLASSIFIER_CUH

#include "backend/backend.h"  // kIgnoreTarget
#include "kernels/common.cuh"

namespace gpt2 {
namespace kern {

constexpr int kClassifierBlock = 512;

template <class T>
__global__ void classifier_kernel(T* logits, T* losses, const int* targets, int V, int Vp,
                                  float dloss) {
  __shared__ float max_partials[kWarpSize];
  __shared__ double sum_partials[kWarpSize];
  const int row = blockIdx.x;
  T* l = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];
  if (target == kIgnoreTarget) {  // outside the loss; uniform per block, so no barrier is skipped unevenly
    if (threadIdx.x == 0) losses[row] = from_float<T>(0.0f);
    if (dloss != 0.0f)
      for (int j = threadIdx.x; j < Vp; j += blockDim.x) l[j] = from_float<T>(0.0f);
    return;
  }
  const bool valid = target >= 0 && target < V;
  const float l_target = valid ? to_float(l[target]) : NAN;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = to_float(l[j]);
    mx = v > mx ? v : mx;
  }
  mx = block_max(mx, max_partials);
  double sum = 0.0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += static_cast<double>(expf(to_float(l[j]) - mx));
  sum = block_sum(sum, sum_partials);
  if (threadIdx.x == 0)
    losses[row] = from_float<T>(static_cast<float>(log(sum) + static_cast<double>(mx) -
                                                   static_cast<double>(l_target)));
  if (dloss == 0.0f) return;
  const float scale = static_cast<float>(static_cast<double>(dloss) / sum);
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float g = expf(to_float(l[j]) - mx) * scale;
    if (j == target) g -= dloss;
    l[j] = from_float<T>(valid ? g : NAN);
  }
  for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) l[j] = from_float<T>(0.0f);
}

template <class T>
void classifier_forward_backward(T* logits, T* losses, const int* targets, int N, int V, int Vp,
                                 float dloss, cudaStream_t stream) {
  auto kernel = classifier_kernel<T>;
  LAUNCH_KERNEL(kernel, N, kClassifierBlock, 0, stream, logits, losses, targets, V, Vp, dloss);
}

}  // namespace kern
}  // namespace gpt2

#endif  // KERNELS_CLASSIFIER_CUH

// Fused classifier: softmax + cross-entropy + its gradient, in place on the
// logits, one row of Vp at a time.
//
// Per row (only the first V columns are real):
//   pass 1: m = max_j<V l_j                                 (read)
//   pass 2: e_j = exp(l_j - m), written back over l_j when a gradient is wanted
//           (else into an L1 chunk buffer), S = sum_j e_j in fp64  (read, write)
//   loss = log S + m - l_target   (l_target read before pass 2 overwrites it)
//   pass 3: dl_j = (e_j / S - [j == target]) * dloss for j < V, 0 for j >= V
// A row of Vp = 50304 floats is 196 KiB, which stays in the 1 MiB L2 between
// passes, so DRAM sees one read and one write of B*T*Vp: the logits are the
// only B*T*Vp buffer, there is no separate probabilities tensor. With dloss == 0
// (evaluation) nothing is written and the logits stay intact (passes 1-2 only).
//
// Numerics: the max subtraction keeps every exp in (0, 1] so nothing overflows
// whatever the logit scale; the sum is fp64 (50257 terms of fp32 exps), so the
// normaliser is exact to fp32 rounding; exp is vexp (vmath.h). Padded columns
// are never read as inputs and always written as exact zeros. NaN/Inf in a row
// propagate to that row's loss (the trainer's NaN guard sees them). A row whose
// target is kIgnoreTarget is skipped: loss 0 and, with a gradient, a zero row.
#include <cmath>

#include "backend/backend.h"  // kIgnoreTarget
#include "backend/cpu/ops.h"
#include "backend/cpu/vmath.h"

namespace gpt2 {
namespace cpu {

namespace {

// Rows are processed in chunks small enough to stay in L1 between the exp pass
// and the fp64 sum pass. (Accumulating fp64 inside the exp loop stops GCC from
// vectorising it; two simple loops over an L1-resident chunk both vectorise.)
constexpr int kChunk = 512;
// The fp64 sum is kept in kLanes partial sums: element j of a chunk goes to
// lane j % kLanes (the chunk's last len % kLanes elements to lanes 0, 1, ...),
// and the lanes are added pairwise at the end. That gives the adder kLanes
// independent chains instead of one, and fixes the order of the additions in
// the code, so it does not move with the vector width.
constexpr int kLanes = 16;

// One row (a target that is not kIgnoreTarget): returns its loss and, when
// dloss != 0, overwrites the row with its gradient.
template <class S>
inline __attribute__((always_inline)) S softmax_xent_row(S* l, int target, int V, int Vp,
                                                         S dloss) {
  const bool want_grad = dloss != static_cast<S>(0);
  S buf[kChunk];  // exps of one chunk when the logits must stay intact
  // A NaN logit is skipped by the max but turns its exp, hence the sum, the
  // loss and (through 1/sum) the whole gradient row into NaN.
  S m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < V; j++) m = l[j] > m ? l[j] : m;
  const S l_target = l[target];
  double part[kLanes] = {};
  for (int j0 = 0; j0 < V; j0 += kChunk) {
    const int len = V - j0 < kChunk ? V - j0 : kChunk;
    const S* src = l + j0;
    S* dst = want_grad ? l + j0 : buf;
#pragma omp simd
    for (int j = 0; j < len; j++) dst[j] = vexp(src[j] - m);
    const int full = len - len % kLanes;
    for (int j = 0; j < full; j += kLanes)
#pragma omp simd
      for (int k = 0; k < kLanes; k++) part[k] += static_cast<double>(dst[j + k]);
    for (int j = full; j < len; j++) part[j - full] += static_cast<double>(dst[j]);
  }
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; k++) part[k] += part[k + w];
  const double sum = part[0];
  if (want_grad) {
    const S inv = static_cast<S>(static_cast<double>(dloss) / sum);
#pragma omp simd
    for (int j = 0; j < V; j++) l[j] = l[j] * inv;
    l[target] -= dloss;
    for (int j = V; j < Vp; j++) l[j] = 0;
  }
  return static_cast<S>(std::log(sum) + static_cast<double>(m) - static_cast<double>(l_target));
}

// fp32 rows get an AVX-512 version where the CPU has it (vmath.h).
VMATH_CLONES float row_loss(float* l, int target, int V, int Vp, float dloss) {
  return softmax_xent_row(l, target, V, Vp, dloss);
}
double row_loss(double* l, int target, int V, int Vp, double dloss) {
  return softmax_xent_row(l, target, V, Vp, dloss);
}

}  // namespace

template <class S>
void classifier_forward_backward(const Exec& ex, S* logits, S* losses, const int32_t* targets,
                                 int N, int V, int Vp, S dloss) {
  const bool want_grad = dloss != static_cast<S>(0);
#pragma omp parallel for num_threads(ex.threads) schedule(static)
  for (int n = 0; n < N; n++) {
    S* l = logits + static_cast<size_t>(n) * Vp;
    if (targets[n] == kIgnoreTarget) {  // outside the loss: no loss, no gradient
      losses[n] = 0;
      if (want_grad)
        for (int j = 0; j < Vp; j++) l[j] = 0;
      continue;
    }
    losses[n] = row_loss(l, targets[n], V, Vp, dloss);
  }
}

template void classifier_forward_backward<float>(const Exec&, float*, float*, const int32_t*, int,
                                                 int, int, float);
template void classifier_forward_backward<double>(const Exec&, double*, double*, const int32_t*,
                                                  int, int, int, double);

}  // namespace cpu
}  // namespace gpt2

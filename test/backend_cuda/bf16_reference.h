// Test-side references for the bf16 CUDA kernels, and the per-element check.
//
// A bf16 kernel loads bf16 values (exact in fp32), computes in fp32 and rounds
// to bf16 where it stores. For every output element the reference gives
//   value  the exact (fp64) result of the kernel's formula on the op's actual
//          inputs, with every bf16 intermediate the kernel stores rounded to
//          bf16 exactly where the kernel rounds it (attention's P and dS, the
//          matmul output before a separate bias kernel), and
//   delta  a bound on |fp32 value the kernel computes before its final
//          rounding - value|: the worst-case fp32 error of the formula
//          (gamma_n = n u of the summed magnitudes for n-term sums and dot
//          products, any summation order, a few u per elementary op, u = 2^-24),
//          times kSlack; plus, where a bf16 intermediate's fp32 input lies
//          within its own delta of a rounding boundary (so the kernel may
//          round it the other way), the effect of that one-ulp choice.
// The stored element must then be the bf16 rounding of some fp32 value within
// delta of value:
//   |got - value| <= delta + ulp(|value| + delta) / 2        (check_element)
// i.e. half a bf16 ulp of the element itself, and exactly the correctly rounded
// result wherever delta does not reach a rounding boundary. delta is (n + 2)
// 2^-23 of the summed magnitudes (~2^-16 for n = 100 terms), so it matters
// only for elements that are tiny next to the terms they are computed from
// (cancellation); there it is the error an fp32 computation really can have.
#ifndef TEST_BACKEND_CUDA_BF16_REFERENCE_H
#define TEST_BACKEND_CUDA_BF16_REFERENCE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/philox.h"

namespace gpt2 {
namespace bf16ref {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
// Multiplies every fp32 error bound. The gamma_n bounds assume round-to-nearest
// fp32 operations (error <= u each); GPU tensor-core MMAs align the addends and
// truncate (<= 2u each), hence 2. (expf's 2 ulp are counted where it is used.)
constexpr double kSlack = 2.0;

float round_bf16(float x);
double round_bf16(double x);  // via fp32 (the double rounding is within any delta here)
// Spacing of bf16 numbers at |x| (8 significant bits): 2^(floor(log2|x|) - 7),
// 2^-133 below the smallest normal.
double ulp_bf16(double x);

struct Output {
  std::string name;
  std::vector<double> value;  // exact, before the kernel's final rounding
  std::vector<double> delta;  // allowance for the kernel's fp32 error (>= 0)
  bool fp32 = false;          // stored in fp32 (kStats: layernorm mean/rstd, losses), not bf16
};

// Per op: the reference outputs, in the order of the Backend call's output
// arguments. Inputs are host copies of the bf16 device tensors; "+=" outputs
// get their contents before the call (`*_old`). Tokens are host ids.
std::vector<Output> encoder_forward(const std::vector<int32_t>& tokens, const std::vector<float>& wte,
                                    const std::vector<float>& wpe, int B, int T, int C);
std::vector<Output> encoder_backward(const std::vector<float>& dwte_old, const std::vector<float>& dwpe_old,
                                     const std::vector<float>& dout, const std::vector<int32_t>& tokens,
                                     int B, int T, int C);
std::vector<Output> layernorm_forward(const std::vector<float>& inp, const std::vector<float>& w,
                                      const std::vector<float>& b, int N, int C);
std::vector<Output> layernorm_backward(const std::vector<float>& dinp_old, const std::vector<float>& dw_old,
                                       const std::vector<float>& db_old, const std::vector<float>& dout,
                                       const std::vector<float>& inp, const std::vector<float>& w,
                                       const std::vector<float>& mean, const std::vector<float>& rstd,
                                       int N, int C);
// separate_bias: the cuBLAS path, which rounds the product to bf16 and then
// adds the bias in a second kernel (two roundings); cuBLASLt adds it in the
// GEMM's fp32 epilogue (one).
std::vector<Output> matmul_forward(const std::vector<float>& inp, const std::vector<float>& w,
                                   const std::vector<float>* bias, int N, int C, int OC, bool separate_bias);
std::vector<Output> matmul_backward(const std::vector<float>& dw_old, const std::vector<float>* dbias_old,
                                    const std::vector<float>& dout, const std::vector<float>& inp,
                                    const std::vector<float>& w, int N, int C, int OC);
// The attention kernel whose bf16 rounding points the reference models.
enum class AttentionKernel { kFlash, kClassic, kCudnn };
// drop: attention dropout (backend.h; p == 0: none).
std::vector<Output> attention_forward(const std::vector<float>& qkv, int B, int T, int C, int NH,
                                      const DropoutMask& drop, AttentionKernel kernel = AttentionKernel::kFlash);
// out: the forward's output as the backward got it (flash and cuDNN take D = rowsum(dout out) from it).
std::vector<Output> attention_backward(const std::vector<float>& dout, const std::vector<float>& out,
                                       const std::vector<float>& qkv, int B, int T, int C, int NH,
                                       const DropoutMask& drop, AttentionKernel kernel = AttentionKernel::kFlash);
std::vector<Output> gelu_forward(const std::vector<float>& inp);
std::vector<Output> gelu_backward(const std::vector<float>& inp, const std::vector<float>& dout);
// matmul_gelu_forward: {out, pre}; matmul_gelu_backward: {dinp, dw[, dbias]}. Either
// computation the backend may choose passes (bf16_reference.cpp, GELU epilogue).
std::vector<Output> matmul_gelu_forward(const std::vector<float>& inp, const std::vector<float>& w,
                                        const std::vector<float>* bias, int N, int C, int OC, bool separate_bias);
std::vector<Output> matmul_gelu_backward(const std::vector<float>& dw_old, const std::vector<float>* dbias_old,
                                         const std::vector<float>& dout, const std::vector<float>& inp,
                                         const std::vector<float>& w, const std::vector<float>& gelu_inp, int N,
                                         int C, int OC);
std::vector<Output> residual_forward(const std::vector<float>& a, const std::vector<float>& b);
std::vector<Output> classifier(const std::vector<float>& logits, const std::vector<int32_t>& targets, int N,
                               int V, int Vp, float dloss);
// inp times the keep scale or 0 (util/philox.h's mask): one fp32 product.
std::vector<Output> dropout(const std::vector<float>& inp, const DropoutMask& m, int N, int C);

// Spacing of fp32 numbers at |x| (24 significant bits).
double ulp_fp32(double x);

// The per-element check. Returns the ratio |got - value| / tolerance (<= 1
// passes); infinity for a NaN/Inf mismatch (NaN value: got must be NaN; +-Inf:
// got must be the same Inf). fp32: an fp32-stored output (half an fp32 ulp
// instead of a bf16 one).
double check_element(double got, double value, double delta, bool fp32 = false);

struct Stats {
  size_t elements = 0;
  size_t failures = 0;
  size_t flips = 0;        // got != round_bf16(value): the kernel rounded an fp32 value on the other side
  double worst_ratio = 0;  // max over finite elements of |got - value| / tolerance
  double worst_ulps = 0;   // max |got - round_bf16(value)| / ulp_bf16(value)
  void add(const Stats& o);
};
// Compares one output; appends up to `max_reports` problem lines to *problems.
Stats compare(const std::vector<float>& got, const Output& ref, const std::string& what, std::string* problems,
              int max_reports = 4);

// The bound this test used before (issue 14): |got - want| <= 1e-2 |want| +
// 1e-2 rms(want) per element, want = the fp32 CPU backend on bf16 inputs.
// Returns the number of elements outside it.
size_t old_bound_failures(const std::vector<float>& got, const std::vector<float>& want);

// Multiplies the smallest-magnitude 1% (at least one) of the finite nonzero
// elements by 1.1 and rounds them to bf16 (a kernel bug confined to small
// elements). Returns how many were changed.
size_t perturb_smallest(std::vector<float>& v);

}  // namespace bf16ref
}  // namespace gpt2

#endif  // TEST_BACKEND_CUDA_BF16_REFERENCE_H

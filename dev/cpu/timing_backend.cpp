#include "dev/cpu/timing_backend.h"

#include <chrono>

namespace gpt2 {
namespace cpuprof {

namespace {

constexpr double kF32 = 4;  // bytes per element of the CPU backend's tensors

double d(size_t v) { return static_cast<double>(v); }

// (query, key) pairs attention computes under the causal mask: the FLOP count's
// minimum, as test/backend/cases_attention.cpp counts it.
double causal_pairs(int B, int T, int NH) { return double(B) * NH * T * (T + 1) / 2.0; }

}  // namespace

template <class Call>
void TimingBackend::timed(const char* op, double flops, double bytes, Call&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  OpTotals& t = totals_[op];
  t.calls++;
  t.seconds += s;
  t.flops += flops;
  t.bytes += bytes;
}

// ---- memory ---------------------------------------------------------------------------------

void TimingBackend::zero(Tensor t) {
  timed("zero", 0, d(t.bytes()), [&] { inner_.zero(t); });
}
void TimingBackend::upload(Tensor dst, const float* src) {
  timed("upload", 0, 2 * d(dst.bytes()), [&] { inner_.upload(dst, src); });
}
void TimingBackend::download(float* dst, Tensor src) {
  timed("download", 0, 2 * d(src.bytes()), [&] { inner_.download(dst, src); });
}
void TimingBackend::upload_tokens(Tensor dst, const int32_t* src) {
  timed("upload_tokens", 0, 2 * d(dst.bytes()), [&] { inner_.upload_tokens(dst, src); });
}
void TimingBackend::copy(Tensor dst, Tensor src) {
  timed("copy", 0, 2 * d(dst.bytes()), [&] { inner_.copy(dst, src); });
}

// ---- forward / backward ---------------------------------------------------------------------

void TimingBackend::encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T, int C) {
  const double NC = double(B) * T * C;  // read a wte row and a wpe row, write out
  timed("encoder_forward", 0, 3 * NC * kF32, [&] { inner_.encoder_forward(out, tokens, wte, wpe, B, T, C); });
}

void TimingBackend::encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T, int C) {
  const double NC = double(B) * T * C, TC = double(T) * C;  // dwte rows read + written per token
  const double bytes = (NC + (dwte.empty() ? 0 : 2 * NC) + 2 * TC) * kF32;
  timed("encoder_backward", 0, bytes, [&] { inner_.encoder_backward(dwte, dwpe, dout, tokens, B, T, C); });
}

void TimingBackend::tied_embedding_backward_rows(Tensor dwte_rows, Tensor dlogits, Tensor lnf, Tensor dembed,
                                                 Tensor tokens, int N, int C, int Vp, int v0) {
  const double R = d(dwte_rows.numel) / C, NC = double(N) * C;
  const double flops = dlogits.empty() ? 0 : 2 * NC * R;
  const double bytes = ((dlogits.empty() ? 0 : N * R + NC) + (dembed.empty() ? 0 : NC) + 2 * R * C) * kF32;
  timed("tied_embedding_backward_rows", flops, bytes,
        [&] { inner_.tied_embedding_backward_rows(dwte_rows, dlogits, lnf, dembed, tokens, N, C, Vp, v0); });
}

void TimingBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b, int N,
                                      int C) {
  const double bytes = (2.0 * N * C + 2.0 * N) * kF32;
  timed("layernorm_forward", 0, bytes, [&] { inner_.layernorm_forward(out, mean, rstd, inp, w, b, N, C); });
}

void TimingBackend::layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                                       Tensor mean, Tensor rstd, int N, int C) {
  const double bytes = (4.0 * N * C + 2.0 * N) * kF32;  // read dout, inp, dinp; write dinp
  timed("layernorm_backward", 0, bytes,
        [&] { inner_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
}

void TimingBackend::matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC) {
  const double flops = 2.0 * N * C * OC;
  const double bytes = (double(N) * C + double(OC) * C + double(N) * OC + (bias.empty() ? 0 : OC)) * kF32;
  timed("matmul_forward", flops, bytes, [&] { inner_.matmul_forward(out, inp, w, bias, N, C, OC); });
}

void TimingBackend::matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w, int N,
                                    int C, int OC) {
  const double NC = double(N) * C, NOC = double(N) * OC, WC = double(OC) * C;
  // dinp = dout @ w; dw += dout^T @ inp (read + write dw); dbias += column sums
  const double flops = 2 * NC * OC * (dw.empty() ? 1 : 2);
  const double bytes = (NOC + WC + NC + (dw.empty() ? 0 : NOC + NC + 2 * WC) + (dbias.empty() ? 0 : 2.0 * OC)) * kF32;
  timed("matmul_backward", flops, bytes, [&] { inner_.matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC); });
}

void TimingBackend::attention_forward(Tensor out, Tensor saved, Tensor qkv, int B, int T, int C, int NH,
                                      const DropoutMask& drop) {
  const double flops = 4 * causal_pairs(B, T, NH) * (C / NH);  // S = Q K^T, O = P V
  const double bytes = (4.0 * B * T * C + double(B) * NH * T) * kF32;
  timed("attention_forward", flops, bytes, [&] { inner_.attention_forward(out, saved, qkv, B, T, C, NH, drop); });
}

void TimingBackend::attention_backward(Tensor dqkv, Tensor scratch, Tensor dout, Tensor out, Tensor qkv, Tensor saved,
                                       int B, int T, int C, int NH, const DropoutMask& drop) {
  const double flops = 10 * causal_pairs(B, T, NH) * (C / NH);  // S again, dP, dQ, dK, dV
  const double bytes = (7.0 * B * T * C + double(B) * NH * T) * kF32;
  timed("attention_backward", flops, bytes,
        [&] { inner_.attention_backward(dqkv, scratch, dout, out, qkv, saved, B, T, C, NH, drop); });
}

void TimingBackend::gelu_forward(Tensor out, Tensor inp, size_t n) {
  timed("gelu_forward", 0, 2 * d(n) * kF32, [&] { inner_.gelu_forward(out, inp, n); });
}
void TimingBackend::gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) {
  timed("gelu_backward", 0, 3 * d(n) * kF32, [&] { inner_.gelu_backward(dinp, inp, dout, n); });
}
void TimingBackend::residual_forward(Tensor out, Tensor a, Tensor b, size_t n) {
  timed("residual_forward", 0, 3 * d(n) * kF32, [&] { inner_.residual_forward(out, a, b, n); });
}
void TimingBackend::dropout(Tensor out, Tensor inp, const DropoutMask& m, int N, int C) {
  timed("dropout", 0, 2.0 * N * C * kF32, [&] { inner_.dropout(out, inp, m, N, C); });
}

void TimingBackend::classifier_forward_backward(Tensor logits, Tensor losses, Tensor targets, int N, int V, int Vp,
                                                float dloss) {
  const double bytes = 2.0 * N * Vp * kF32;  // the logits read and overwritten with dlogits
  timed("classifier_forward_backward", 0, bytes,
        [&] { inner_.classifier_forward_backward(logits, losses, targets, N, V, Vp, dloss); });
}

// ---- optimizer ------------------------------------------------------------------------------

double TimingBackend::sum_squares(Tensor g) {
  double r = 0;
  timed("sum_squares", 0, d(g.numel) * kF32, [&] { r = inner_.sum_squares(g); });
  return r;
}

void TimingBackend::adamw_update(Tensor params, Tensor master, Tensor grads, Tensor m, Tensor v, float lr,
                                 float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  const double bytes = 7 * d(params.numel) * kF32;  // read p, g, m, v; write p, m, v
  timed("adamw_update", 0, bytes, [&] {
    inner_.adamw_update(params, master, grads, m, v, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
  });
}

void TimingBackend::sum_squares_into(Tensor clip, Tensor g) {
  timed("sum_squares_into", 0, d(g.numel) * kF32, [&] { inner_.sum_squares_into(clip, g); });
}
void TimingBackend::clip_scale(Tensor clip, float max_norm) {
  timed("clip_scale", 0, 2 * 8, [&] { inner_.clip_scale(clip, max_norm); });
}
void TimingBackend::download64(double* dst, Tensor src) {
  timed("download64", 0, 2 * d(src.bytes()), [&] { inner_.download64(dst, src); });
}

}  // namespace cpuprof
}  // namespace gpt2

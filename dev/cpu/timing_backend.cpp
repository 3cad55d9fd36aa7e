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

void TimingBackend::encoder_forward(const EncoderForwardArgs& args) {
  const double NC = double(args.B) * args.T * args.C;  // read a wte row and a wpe row, write out
  timed("encoder_forward", 0, 3 * NC * kF32, [&] { inner_.encoder_forward(args); });
}

void TimingBackend::encoder_backward(const EncoderBackwardArgs& args) {
  // dwte rows read + written per token
  const double NC = double(args.B) * args.T * args.C, TC = double(args.T) * args.C;
  const double bytes = (NC + (args.dwte.empty() ? 0 : 2 * NC) + 2 * TC) * kF32;
  timed("encoder_backward", 0, bytes, [&] { inner_.encoder_backward(args); });
}

void TimingBackend::tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) {
  const double R = d(args.dwte_rows.numel) / args.C, NC = double(args.N) * args.C;
  const double flops = args.dlogits.empty() ? 0 : 2 * NC * R;
  const double bytes =
      ((args.dlogits.empty() ? 0 : args.N * R + NC) + (args.dembed.empty() ? 0 : NC) + 2 * R * args.C) * kF32;
  timed("tied_embedding_backward_rows", flops, bytes, [&] { inner_.tied_embedding_backward_rows(args); });
}

void TimingBackend::layernorm_forward(const LayernormForwardArgs& args) {
  const double bytes = (2.0 * args.N * args.C + 2.0 * args.N) * kF32;
  timed("layernorm_forward", 0, bytes, [&] { inner_.layernorm_forward(args); });
}

void TimingBackend::layernorm_backward(const LayernormBackwardArgs& args) {
  const double bytes = (4.0 * args.N * args.C + 2.0 * args.N) * kF32;  // read dout, inp, dinp; write dinp
  timed("layernorm_backward", 0, bytes, [&] { inner_.layernorm_backward(args); });
}

void TimingBackend::matmul_forward(const MatmulForwardArgs& args) {
  const double N = args.N, C = args.C, OC = args.OC;
  const double flops = 2.0 * N * C * OC;
  const double bytes = (N * C + OC * C + N * OC + (args.bias.empty() ? 0 : OC)) * kF32;
  timed("matmul_forward", flops, bytes, [&] { inner_.matmul_forward(args); });
}

void TimingBackend::matmul_backward(const MatmulBackwardArgs& args) {
  const double NC = double(args.N) * args.C, NOC = double(args.N) * args.OC, WC = double(args.OC) * args.C;
  // dinp = dout @ w; dw += dout^T @ inp (read + write dw); dbias += column sums
  const double flops = 2 * NC * args.OC * (args.dw.empty() ? 1 : 2);
  const double bytes =
      (NOC + WC + NC + (args.dw.empty() ? 0 : NOC + NC + 2 * WC) + (args.dbias.empty() ? 0 : 2.0 * args.OC)) * kF32;
  timed("matmul_backward", flops, bytes, [&] { inner_.matmul_backward(args); });
}

void TimingBackend::attention_forward(const AttentionForwardArgs& args) {
  const double flops = 4 * causal_pairs(args.B, args.T, args.NH) * (args.C / args.NH);  // S = Q K^T, O = P V
  const double bytes = (4.0 * args.B * args.T * args.C + double(args.B) * args.NH * args.T) * kF32;
  timed("attention_forward", flops, bytes, [&] { inner_.attention_forward(args); });
}

void TimingBackend::attention_backward(const AttentionBackwardArgs& args) {
  const double flops = 10 * causal_pairs(args.B, args.T, args.NH) * (args.C / args.NH);  // S again, dP, dQ, dK, dV
  const double bytes = (7.0 * args.B * args.T * args.C + double(args.B) * args.NH * args.T) * kF32;
  timed("attention_backward", flops, bytes, [&] { inner_.attention_backward(args); });
}

void TimingBackend::gelu_forward(const GeluForwardArgs& args) {
  timed("gelu_forward", 0, 2 * d(args.n) * kF32, [&] { inner_.gelu_forward(args); });
}
void TimingBackend::gelu_backward(const GeluBackwardArgs& args) {
  timed("gelu_backward", 0, 3 * d(args.n) * kF32, [&] { inner_.gelu_backward(args); });
}
void TimingBackend::residual_forward(const ResidualForwardArgs& args) {
  timed("residual_forward", 0, 3 * d(args.n) * kF32, [&] { inner_.residual_forward(args); });
}
void TimingBackend::dropout(const DropoutArgs& args) {
  timed("dropout", 0, 2.0 * args.N * args.C * kF32, [&] { inner_.dropout(args); });
}

void TimingBackend::classifier_forward_backward(const ClassifierArgs& args) {
  const double bytes = 2.0 * args.N * args.Vp * kF32;  // the logits read and overwritten with dlogits
  timed("classifier_forward_backward", 0, bytes, [&] { inner_.classifier_forward_backward(args); });
}

// ---- optimizer ------------------------------------------------------------------------------

double TimingBackend::sum_squares(Tensor g) {
  double r = 0;
  timed("sum_squares", 0, d(g.numel) * kF32, [&] { r = inner_.sum_squares(g); });
  return r;
}

void TimingBackend::adamw_update(const AdamWArgs& args) {
  const double bytes = 7 * d(args.params.numel) * kF32;  // read p, g, m, v; write p, m, v
  timed("adamw_update", 0, bytes, [&] { inner_.adamw_update(args); });
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

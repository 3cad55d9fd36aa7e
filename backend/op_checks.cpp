#include "backend/op_checks.h"

#include <stdexcept>

namespace gpt2 {

namespace {
size_t sz(long a, long b = 1, long c = 1) {
  return static_cast<size_t>(a) * static_cast<size_t>(b) * static_cast<size_t>(c);
}
}  // namespace

void OpChecks::fail(const char* op, const std::string& why) const {
  throw std::runtime_error(backend_ + ": " + op + ": " + why);
}

void OpChecks::need(const Tensor& t, size_t numel, const char* op, const char* arg, uint32_t elem_bytes) const {
  if (t.ptr == nullptr && numel > 0) fail(op, std::string(arg) + " is empty");
  if (t.numel < numel)
    fail(op, std::string(arg) + " has " + std::to_string(t.numel) + " elements, needs " + std::to_string(numel));
  if (t.ptr != nullptr && t.elem_bytes != elem_bytes)
    fail(op, std::string(arg) + " has element size " + std::to_string(t.elem_bytes) + " (expected " +
                 std::to_string(elem_bytes) + ")");
}

void OpChecks::dims(const char* op, std::initializer_list<long> ds) const {
  for (long d : ds)
    if (d <= 0) fail(op, "non-positive dimension " + std::to_string(d));
}

void OpChecks::encoder_forward(const EncoderForwardArgs& args) const {
  const char* op = "encoder_forward";
  dims(op, {args.B, args.T, args.C});
  need_x(args.out, sz(args.B, args.T, args.C), op, "out");
  need(args.tokens, sz(args.B, args.T), op, "tokens", 4);
  need_x(args.wte, sz(1, args.C), op, "wte");
  need_x(args.wpe, sz(args.T, args.C), op, "wpe");
}

void OpChecks::encoder_backward(const EncoderBackwardArgs& args) const {
  const char* op = "encoder_backward";
  dims(op, {args.B, args.T, args.C});
  need_x(args.dout, sz(args.B, args.T, args.C), op, "dout");
  need(args.tokens, sz(args.B, args.T), op, "tokens", 4);
  if (!args.dwte.empty()) need_x(args.dwte, sz(1, args.C), op, "dwte");
  need_x(args.dwpe, sz(args.T, args.C), op, "dwpe");
}

void OpChecks::tied_embedding_rows(const TiedEmbeddingRowsArgs& args) const {
  const char* op = "tied_embedding_backward_rows";
  const int N = args.N, C = args.C, Vp = args.Vp, v0 = args.v0;
  dims(op, {N, C, Vp});
  const size_t rows = args.dwte_rows.numel / static_cast<size_t>(C);
  if (args.dwte_rows.empty() || args.dwte_rows.numel % static_cast<size_t>(C) != 0 || v0 < 0 ||
      static_cast<size_t>(v0) + rows > static_cast<size_t>(Vp))
    fail(op, "dwte_rows of " + std::to_string(args.dwte_rows.numel) + " elements from row " + std::to_string(v0) +
                 " is not whole rows of C " + std::to_string(C) + " inside Vp " + std::to_string(Vp));
  need_x(args.dwte_rows, rows * static_cast<size_t>(C), op, "dwte_rows");
  if (args.dlogits.empty() != args.lnf.empty()) fail(op, "dlogits and lnf go together (both empty: no lm_head part)");
  if (!args.dlogits.empty()) {
    need_x(args.dlogits, sz(N, Vp), op, "dlogits");
    need_x(args.lnf, sz(N, C), op, "lnf");
  }
  if (!args.dembed.empty()) {
    need_x(args.dembed, sz(N, C), op, "dembed");
    need(args.tokens, sz(N), op, "tokens", 4);
  }
}

void OpChecks::layernorm_forward(const LayernormForwardArgs& args) const {
  const char* op = "layernorm_forward";
  const int N = args.N, C = args.C;
  dims(op, {N, C});
  need_x(args.out, sz(N, C), op, "out");
  need(args.mean, sz(N), op, "mean", 4);
  need(args.rstd, sz(N), op, "rstd", 4);
  need_x(args.inp, sz(N, C), op, "inp");
  need_x(args.w, sz(C), op, "w");
  need_x(args.b, sz(C), op, "b");
}

void OpChecks::layernorm_backward(const LayernormBackwardArgs& args) const {
  const char* op = "layernorm_backward";
  const int N = args.N, C = args.C;
  dims(op, {N, C});
  need_x(args.dinp, sz(N, C), op, "dinp");
  need_x(args.dw, sz(C), op, "dw");
  need_x(args.db, sz(C), op, "db");
  need_x(args.dout, sz(N, C), op, "dout");
  need_x(args.inp, sz(N, C), op, "inp");
  need_x(args.w, sz(C), op, "w");
  need(args.mean, sz(N), op, "mean", 4);
  need(args.rstd, sz(N), op, "rstd", 4);
}

void OpChecks::matmul_forward(const MatmulForwardArgs& args) const {
  const char* op = "matmul_forward";
  const int N = args.N, C = args.C, OC = args.OC;
  dims(op, {N, C, OC});
  need_x(args.out, sz(N, OC), op, "out");
  need_x(args.inp, sz(N, C), op, "inp");
  need_x(args.w, sz(OC, C), op, "w");
  if (!args.bias.empty()) need_x(args.bias, sz(OC), op, "bias");
}

void OpChecks::matmul_backward(const MatmulBackwardArgs& args) const {
  const char* op = "matmul_backward";
  const int N = args.N, C = args.C, OC = args.OC;
  dims(op, {N, C, OC});
  need_x(args.dinp, sz(N, C), op, "dinp");
  if (!args.dw.empty()) need_x(args.dw, sz(OC, C), op, "dw");
  if (!args.dbias.empty()) need_x(args.dbias, sz(OC), op, "dbias");
  need_x(args.dout, sz(N, OC), op, "dout");
  need_x(args.inp, sz(N, C), op, "inp");
  need_x(args.w, sz(OC, C), op, "w");
}

namespace {
void attention_dims(const OpChecks& c, const char* op, int B, int T, int C, int NH, const DropoutMask& drop) {
  c.dims(op, {B, T, C, NH});
  if (C % NH != 0) c.fail(op, "C " + std::to_string(C) + " is not a multiple of NH " + std::to_string(NH));
  if (!(drop.p >= 0.0f && drop.p < 1.0f)) c.fail(op, "dropout p " + std::to_string(drop.p) + " is outside [0, 1)");
}
}  // namespace

void OpChecks::attention_forward(const AttentionForwardArgs& args, size_t saved_numel) const {
  const char* op = "attention_forward";
  const int B = args.B, T = args.T, C = args.C;
  attention_dims(*this, op, B, T, C, args.NH, args.drop);
  need_x(args.out, sz(B, T, C), op, "out");
  need_x(args.saved, saved_numel, op, "saved");
  need_x(args.qkv, sz(B, T, 3L * C), op, "qkv");
}

void OpChecks::attention_backward(const AttentionBackwardArgs& args, size_t scratch_numel, size_t saved_numel) const {
  const char* op = "attention_backward";
  const int B = args.B, T = args.T, C = args.C;
  attention_dims(*this, op, B, T, C, args.NH, args.drop);
  need_x(args.dqkv, sz(B, T, 3L * C), op, "dqkv");
  need(args.scratch, scratch_numel, op, "scratch", 4);
  need_x(args.dout, sz(B, T, C), op, "dout");
  need_x(args.out, sz(B, T, C), op, "out");
  need_x(args.qkv, sz(B, T, 3L * C), op, "qkv");
  need_x(args.saved, saved_numel, op, "saved");
}

void OpChecks::gelu_forward(const GeluForwardArgs& args) const {
  need_x(args.out, args.n, "gelu_forward", "out");
  need_x(args.inp, args.n, "gelu_forward", "inp");
}

void OpChecks::gelu_backward(const GeluBackwardArgs& args) const {
  need_x(args.dinp, args.n, "gelu_backward", "dinp");
  need_x(args.inp, args.n, "gelu_backward", "inp");
  need_x(args.dout, args.n, "gelu_backward", "dout");
}

void OpChecks::residual_forward(const ResidualForwardArgs& args) const {
  need_x(args.out, args.n, "residual_forward", "out");
  need_x(args.a, args.n, "residual_forward", "a");
  need_x(args.b, args.n, "residual_forward", "b");
}

void OpChecks::dropout(const DropoutArgs& args) const {
  dims("dropout", {args.N, args.C});
  if (!(args.m.p >= 0.0f && args.m.p < 1.0f)) fail("dropout", "p " + std::to_string(args.m.p) + " is outside [0, 1)");
  need_x(args.out, sz(args.N, args.C), "dropout", "out");
  need_x(args.inp, sz(args.N, args.C), "dropout", "inp");
}

void OpChecks::classifier(const ClassifierArgs& args) const {
  const char* op = "classifier_forward_backward";
  const int N = args.N, V = args.V, Vp = args.Vp;
  dims(op, {N, V, Vp});
  if (V > Vp) fail(op, "V " + std::to_string(V) + " exceeds padded Vp " + std::to_string(Vp));
  need_x(args.logits, sz(N, Vp), op, "logits");
  need(args.losses, sz(N), op, "losses", 4);
  need(args.targets, sz(N), op, "targets", 4);
}

void OpChecks::adamw(const AdamWArgs& args) const {
  const char* op = "adamw_update";
  if (args.t < 1) fail(op, "step t = " + std::to_string(args.t) + " (must be >= 1)");
  const size_t n = args.params.numel;
  need_x(args.params, n, op, "params");
  if (!args.master.empty()) need(args.master, n, op, "master", 4);
  need_x(args.grads, n, op, "grads");
  need(args.m, n, op, "m", 4);
  need(args.v, n, op, "v", 4);
}

}  // namespace gpt2

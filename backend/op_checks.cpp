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

void OpChecks::encoder(const char* op, const Tensor& x, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                       int B, int T, int C) const {
  dims(op, {B, T, C});
  const bool fwd = std::string(op) == "encoder_forward";
  need_x(x, sz(B, T, C), op, fwd ? "out" : "dout");
  need(tokens, sz(B, T), op, "tokens", 4);
  if (fwd || !wte.empty()) need_x(wte, sz(1, C), op, fwd ? "wte" : "dwte");
  need_x(wpe, sz(T, C), op, fwd ? "wpe" : "dwpe");
}

void OpChecks::tied_embedding_rows(const Tensor& dwte_rows, const Tensor& dlogits, const Tensor& lnf,
                                   const Tensor& dembed, const Tensor& tokens, int N, int C, int Vp, int v0) const {
  const char* op = "tied_embedding_backward_rows";
  dims(op, {N, C, Vp});
  const size_t rows = dwte_rows.numel / static_cast<size_t>(C);
  if (dwte_rows.empty() || dwte_rows.numel % static_cast<size_t>(C) != 0 || v0 < 0 ||
      static_cast<size_t>(v0) + rows > static_cast<size_t>(Vp))
    fail(op, "dwte_rows of " + std::to_string(dwte_rows.numel) + " elements from row " + std::to_string(v0) +
                 " is not whole rows of C " + std::to_string(C) + " inside Vp " + std::to_string(Vp));
  need_x(dwte_rows, rows * static_cast<size_t>(C), op, "dwte_rows");
  if (dlogits.empty() != lnf.empty()) fail(op, "dlogits and lnf go together (both empty: no lm_head part)");
  if (!dlogits.empty()) {
    need_x(dlogits, sz(N, Vp), op, "dlogits");
    need_x(lnf, sz(N, C), op, "lnf");
  }
  if (!dembed.empty()) {
    need_x(dembed, sz(N, C), op, "dembed");
    need(tokens, sz(N), op, "tokens", 4);
  }
}

void OpChecks::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                 const Tensor& w, const Tensor& b, int N, int C) const {
  const char* op = "layernorm_forward";
  dims(op, {N, C});
  need_x(out, sz(N, C), op, "out");
  need(mean, sz(N), op, "mean", 4);
  need(rstd, sz(N), op, "rstd", 4);
  need_x(inp, sz(N, C), op, "inp");
  need_x(w, sz(C), op, "w");
  need_x(b, sz(C), op, "b");
}

void OpChecks::layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                  const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd, int N,
                                  int C) const {
  const char* op = "layernorm_backward";
  dims(op, {N, C});
  need_x(dinp, sz(N, C), op, "dinp");
  need_x(dw, sz(C), op, "dw");
  need_x(db, sz(C), op, "db");
  need_x(dout, sz(N, C), op, "dout");
  need_x(inp, sz(N, C), op, "inp");
  need_x(w, sz(C), op, "w");
  need(mean, sz(N), op, "mean", 4);
  need(rstd, sz(N), op, "rstd", 4);
}

void OpChecks::matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N,
                              int C, int OC) const {
  const char* op = "matmul_forward";
  dims(op, {N, C, OC});
  need_x(out, sz(N, OC), op, "out");
  need_x(inp, sz(N, C), op, "inp");
  need_x(w, sz(OC, C), op, "w");
  if (!bias.empty()) need_x(bias, sz(OC), op, "bias");
}

void OpChecks::matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                               const Tensor& inp, const Tensor& w, int N, int C, int OC) const {
  const char* op = "matmul_backward";
  dims(op, {N, C, OC});
  need_x(dinp, sz(N, C), op, "dinp");
  if (!dw.empty()) need_x(dw, sz(OC, C), op, "dw");
  if (!dbias.empty()) need_x(dbias, sz(OC), op, "dbias");
  need_x(dout, sz(N, OC), op, "dout");
  need_x(inp, sz(N, C), op, "inp");
  need_x(w, sz(OC, C), op, "w");
}

namespace {
void attention_dims(const OpChecks& c, const char* op, int B, int T, int C, int NH, const DropoutMask& drop) {
  c.dims(op, {B, T, C, NH});
  if (C % NH != 0) c.fail(op, "C " + std::to_string(C) + " is not a multiple of NH " + std::to_string(NH));
  if (!(drop.p >= 0.0f && drop.p < 1.0f)) c.fail(op, "dropout p " + std::to_string(drop.p) + " is outside [0, 1)");
}
}  // namespace

void OpChecks::attention_forward(const Tensor& out, const Tensor& saved, size_t saved_numel, const Tensor& qkv,
                                 int B, int T, int C, int NH, const DropoutMask& drop) const {
  const char* op = "attention_forward";
  attention_dims(*this, op, B, T, C, NH, drop);
  need_x(out, sz(B, T, C), op, "out");
  need_x(saved, saved_numel, op, "saved");
  need_x(qkv, sz(B, T, 3L * C), op, "qkv");
}

void OpChecks::attention_backward(const Tensor& dqkv, const Tensor& scratch, size_t scratch_numel,
                                  const Tensor& dout, const Tensor& out, const Tensor& qkv, const Tensor& saved, size_t saved_numel,
                                  int B, int T, int C, int NH, const DropoutMask& drop) const {
  const char* op = "attention_backward";
  attention_dims(*this, op, B, T, C, NH, drop);
  need_x(dqkv, sz(B, T, 3L * C), op, "dqkv");
  need(scratch, scratch_numel, op, "scratch", 4);
  need_x(dout, sz(B, T, C), op, "dout");
  need_x(out, sz(B, T, C), op, "out");
  need_x(qkv, sz(B, T, 3L * C), op, "qkv");
  need_x(saved, saved_numel, op, "saved");
}

void OpChecks::gelu_forward(const Tensor& out, const Tensor& inp, size_t n) const {
  need_x(out, n, "gelu_forward", "out");
  need_x(inp, n, "gelu_forward", "inp");
}

void OpChecks::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, size_t n) const {
  need_x(dinp, n, "gelu_backward", "dinp");
  need_x(inp, n, "gelu_backward", "inp");
  need_x(dout, n, "gelu_backward", "dout");
}

void OpChecks::residual_forward(const Tensor& out, const Tensor& a, const Tensor& b, size_t n) const {
  need_x(out, n, "residual_forward", "out");
  need_x(a, n, "residual_forward", "a");
  need_x(b, n, "residual_forward", "b");
}

void OpChecks::dropout(const Tensor& out, const Tensor& inp, const DropoutMask& m, int N, int C) const {
  dims("dropout", {N, C});
  if (!(m.p >= 0.0f && m.p < 1.0f)) fail("dropout", "p " + std::to_string(m.p) + " is outside [0, 1)");
  need_x(out, sz(N, C), "dropout", "out");
  need_x(inp, sz(N, C), "dropout", "inp");
}

void OpChecks::classifier(const Tensor& logits, const Tensor& losses, const Tensor& targets, int N, int V,
                          int Vp) const {
  const char* op = "classifier_forward_backward";
  dims(op, {N, V, Vp});
  if (V > Vp) fail(op, "V " + std::to_string(V) + " exceeds padded Vp " + std::to_string(Vp));
  need_x(logits, sz(N, Vp), op, "logits");
  need(losses, sz(N), op, "losses", 4);
  need(targets, sz(N), op, "targets", 4);
}

void OpChecks::adamw(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m,
                     const Tensor& v, int t) const {
  const char* op = "adamw_update";
  if (t < 1) fail(op, "step t = " + std::to_string(t) + " (must be >= 1)");
  const size_t n = params.numel;
  need_x(params, n, op, "params");
  if (!master.empty()) need(master, n, op, "master", 4);
  need_x(grads, n, op, "grads");
  need(m, n, op, "m", 4);
  need(v, n, op, "v", 4);
}

}  // namespace gpt2

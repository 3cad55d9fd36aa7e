#include "test/backend_cuda/bf16_checked_backend.h"

#include <cstdio>
#include <stdexcept>

namespace gpt2 {
namespace bf16ref {

namespace {
std::string shape(std::initializer_list<std::pair<const char*, long>> kv) {
  std::string s;
  for (auto& p : kv) s += (s.empty() ? "" : ",") + std::string(p.first) + "=" + std::to_string(p.second);
  return s;
}
}  // namespace

size_t CheckedBackend::failures() const {
  size_t n = 0;
  for (const auto& kv : stats) n += kv.second.failures;
  return n;
}

void CheckedBackend::print_stats(const char* prefix) const {
  for (const auto& kv : stats)
    std::printf("%s %-36s elements %8zu  worst |got-ref|/bound %.3f  not correctly rounded %zu  worst %.0f ulp"
                "  failures %zu\n",
                prefix, kv.first.c_str(), kv.second.elements, kv.second.worst_ratio, kv.second.flips,
                kv.second.worst_ulps, kv.second.failures);
}

std::vector<float> CheckedBackend::get(Tensor t) {
  std::vector<float> host(t.numel);
  if (t.numel > 0) inner_.download(host.data(), t);
  return host;
}

void CheckedBackend::upload_tokens(Tensor dst, const int32_t* src) {
  inner_.upload_tokens(dst, src);
  tokens_.push_back({static_cast<const char*>(dst.ptr), std::vector<int32_t>(src, src + dst.numel)});
}

// The ids of a token view: from the latest upload whose buffer contains it.
std::vector<int32_t> CheckedBackend::tokens_of(Tensor t) const {
  const char* p = static_cast<const char*>(t.ptr);
  for (auto it = tokens_.rbegin(); it != tokens_.rend(); ++it) {
    const char* end = it->ptr + it->ids.size() * sizeof(int32_t);
    if (p >= it->ptr && p + t.numel * sizeof(int32_t) <= end) {
      const size_t off = static_cast<size_t>(p - it->ptr) / sizeof(int32_t);
      return std::vector<int32_t>(it->ids.begin() + off, it->ids.begin() + off + t.numel);
    }
  }
  throw std::runtime_error("CheckedBackend: token tensor was not uploaded through this backend");
}

void CheckedBackend::check(const std::string& op, const std::string& shp, const std::vector<Tensor>& outs,
                           const std::vector<Output>& ref) {
  Record rec{op, {}, ref};
  for (size_t o = 0; o < outs.size(); o++) {
    rec.got.push_back(get(outs[o]));
    std::string found;
    const Stats st = compare(rec.got[o], ref[o], op + "(" + shp + ") " + ref[o].name, &found);
    stats[op + "." + ref[o].name].add(st);
    if (problems.size() < 4000) problems += found;
  }
  if (keep_records) records.push_back(rec);
  last = std::move(rec);
}

void CheckedBackend::encoder_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe, int B, int T, int C) {
  const auto ref = bf16ref::encoder_forward(tokens_of(tokens), get(wte), get(wpe), B, T, C);
  inner_.encoder_forward(out, tokens, wte, wpe, B, T, C);
  check("encoder_forward", shape({{"B", B}, {"T", T}, {"C", C}}), {out}, ref);
}

void CheckedBackend::encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, int B, int T, int C) {
  const auto ref = bf16ref::encoder_backward(get(dwte), get(dwpe), get(dout), tokens_of(tokens), B, T, C);
  inner_.encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  check("encoder_backward", shape({{"B", B}, {"T", T}, {"C", C}}), {dwte, dwpe}, ref);
}

void CheckedBackend::tied_embedding_backward_rows(Tensor dwte_rows, Tensor dlogits, Tensor lnf, Tensor dembed,
                                                  Tensor tokens, int N, int C, int Vp, int v0) {
  const int R = static_cast<int>(dwte_rows.numel / static_cast<size_t>(C));
  const std::string shp = shape({{"N", N}, {"C", C}, {"Vp", Vp}, {"v0", v0}, {"rows", R}});
  if (!dlogits.empty()) {
    const std::vector<float> dl = get(dlogits);
    std::vector<float> cols(static_cast<size_t>(N) * R);
    for (int n = 0; n < N; n++)
      for (int r = 0; r < R; r++) cols[size_t(n) * R + r] = dl[size_t(n) * Vp + v0 + r];
    const auto ref = bf16ref::matmul_backward(get(dwte_rows), nullptr, cols, get(lnf),
                                              std::vector<float>(size_t(R) * C, 0.0f), N, C, R);
    inner_.tied_embedding_backward_rows(dwte_rows, dlogits, lnf, Tensor{}, tokens, N, C, Vp, v0);
    check("tied_embedding_backward_rows", shp, {dwte_rows}, {ref[1]});
  }
  if (!dembed.empty()) {
    std::vector<int32_t> window = tokens_of(tokens);  // ids outside the window are skipped (-1)
    for (int32_t& t : window) t = t >= v0 && t < v0 + R ? t - v0 : -1;
    const auto ref = bf16ref::encoder_backward(get(dwte_rows), std::vector<float>(size_t(N) * C, 0.0f), get(dembed),
                                               window, 1, N, C);
    inner_.tied_embedding_backward_rows(dwte_rows, Tensor{}, Tensor{}, dembed, tokens, N, C, Vp, v0);
    check("tied_embedding_backward_rows", shp, {dwte_rows}, {ref[0]});
  }
}

void CheckedBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor w, Tensor b, int N,
                                       int C) {
  const auto ref = bf16ref::layernorm_forward(get(inp), get(w), get(b), N, C);
  inner_.layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  check("layernorm_forward", shape({{"N", N}, {"C", C}}), {out, mean, rstd}, ref);
}

void CheckedBackend::layernorm_backward(Tensor dinp, Tensor dw, Tensor db, Tensor dout, Tensor inp, Tensor w,
                                        Tensor mean, Tensor rstd, int N, int C) {
  const auto ref = bf16ref::layernorm_backward(get(dinp), get(dw), get(db), get(dout), get(inp), get(w),
                                               get(mean), get(rstd), N, C);
  inner_.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  check("layernorm_backward", shape({{"N", N}, {"C", C}}), {dinp, dw, db}, ref);
}

// The sum against residual_forward's reference, then the layernorm against its
// reference on the stored sum (what the kernel normalises).
void CheckedBackend::residual_layernorm_forward(Tensor residual, Tensor out, Tensor mean, Tensor rstd, Tensor a,
                                                Tensor b, Tensor w, Tensor bias, int N, int C) {
  auto sum = bf16ref::residual_forward(get(a), get(b));  // before the call: residual may alias a
  sum[0].name = "residual";
  inner_.residual_layernorm_forward(residual, out, mean, rstd, a, b, w, bias, N, C);
  const std::string shp = shape({{"N", N}, {"C", C}});
  check("residual_layernorm_forward", shp, {residual}, sum);
  check("residual_layernorm_forward", shp, {out, mean, rstd},
        bf16ref::layernorm_forward(get(residual), get(w), get(bias), N, C));
}

void CheckedBackend::matmul_forward(Tensor out, Tensor inp, Tensor w, Tensor bias, int N, int C, int OC) {
  const std::vector<float> b = get(bias);
  const auto ref = bf16ref::matmul_forward(get(inp), get(w), bias.empty() ? nullptr : &b, N, C, OC, separate_bias_);
  inner_.matmul_forward(out, inp, w, bias, N, C, OC);
  check("matmul_forward", shape({{"N", N}, {"C", C}, {"OC", OC}}), {out}, ref);
}

void CheckedBackend::matmul_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w, int N,
                                     int C, int OC) {
  const std::vector<float> db = get(dbias);
  // dw empty (the lm_head's dinp alone): reference against zeros, dw not checked.
  const std::vector<float> dw_old = dw.empty() ? std::vector<float>(size_t(OC) * C, 0.0f) : get(dw);
  auto ref = bf16ref::matmul_backward(dw_old, dbias.empty() ? nullptr : &db, get(dout), get(inp), get(w), N, C, OC);
  inner_.matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
  std::vector<Tensor> outs = {dinp};
  if (dw.empty()) ref.erase(ref.begin() + 1);
  else outs.push_back(dw);
  if (!dbias.empty()) outs.push_back(dbias);
  check("matmul_backward", shape({{"N", N}, {"C", C}, {"OC", OC}}), outs, ref);
}

void CheckedBackend::matmul_gelu_forward(Tensor out, Tensor pre, Tensor inp, Tensor w, Tensor bias, int N, int C,
                                         int OC) {
  const std::vector<float> b = get(bias);
  const auto ref =
      bf16ref::matmul_gelu_forward(get(inp), get(w), bias.empty() ? nullptr : &b, N, C, OC, separate_bias_);
  inner_.matmul_gelu_forward(out, pre, inp, w, bias, N, C, OC);
  check("matmul_gelu_forward", shape({{"N", N}, {"C", C}, {"OC", OC}}), {out, pre}, ref);
}

void CheckedBackend::matmul_gelu_backward(Tensor dinp, Tensor dw, Tensor dbias, Tensor dout, Tensor inp, Tensor w,
                                          Tensor gelu_inp, int N, int C, int OC) {
  const std::vector<float> db = get(dbias);
  auto ref = bf16ref::matmul_gelu_backward(get(dw), dbias.empty() ? nullptr : &db, get(dout), get(inp), get(w),
                                           get(gelu_inp), N, C, OC);
  inner_.matmul_gelu_backward(dinp, dw, dbias, dout, inp, w, gelu_inp, N, C, OC);
  std::vector<Tensor> outs = {dinp, dw};
  if (!dbias.empty()) outs.push_back(dbias);
  check("matmul_gelu_backward", shape({{"N", N}, {"C", C}, {"OC", OC}}), outs, ref);
}

void CheckedBackend::attention_forward(Tensor out, Tensor saved, Tensor qkv, int B, int T, int C, int NH,
                                       const DropoutMask& drop) {
  const auto ref = bf16ref::attention_forward(get(qkv), B, T, C, NH, drop, attention);
  inner_.attention_forward(out, saved, qkv, B, T, C, NH, drop);
  check("attention_forward", shape({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}}), {out}, ref);
}

void CheckedBackend::attention_backward(Tensor dqkv, Tensor scratch, Tensor dout, Tensor out, Tensor qkv,
                                        Tensor saved, int B, int T, int C, int NH, const DropoutMask& drop) {
  const auto ref = bf16ref::attention_backward(get(dout), get(out), get(qkv), B, T, C, NH, drop, attention);
  inner_.attention_backward(dqkv, scratch, dout, out, qkv, saved, B, T, C, NH, drop);
  check("attention_backward", shape({{"B", B}, {"T", T}, {"C", C}, {"NH", NH}}), {dqkv}, ref);
}

void CheckedBackend::gelu_forward(Tensor out, Tensor inp, size_t n) {
  const auto ref = bf16ref::gelu_forward(get(inp));
  inner_.gelu_forward(out, inp, n);
  check("gelu_forward", shape({{"n", long(n)}}), {out}, ref);
}

void CheckedBackend::gelu_backward(Tensor dinp, Tensor inp, Tensor dout, size_t n) {
  const auto ref = bf16ref::gelu_backward(get(inp), get(dout));  // before the call: dinp may alias dout
  inner_.gelu_backward(dinp, inp, dout, n);
  check("gelu_backward", shape({{"n", long(n)}}), {dinp}, ref);
}

void CheckedBackend::residual_forward(Tensor out, Tensor a, Tensor b, size_t n) {
  const auto ref = bf16ref::residual_forward(get(a), get(b));  // out may alias a
  inner_.residual_forward(out, a, b, n);
  check("residual_forward", shape({{"n", long(n)}}), {out}, ref);
}

void CheckedBackend::dropout(Tensor out, Tensor inp, const DropoutMask& m, int N, int C) {
  const auto ref = bf16ref::dropout(get(inp), m, N, C);  // out may alias inp
  inner_.dropout(out, inp, m, N, C);
  check("dropout", shape({{"N", N}, {"C", C}, {"p", long(m.p * 1000)}}), {out}, ref);
}

void CheckedBackend::classifier_forward_backward(Tensor logits, Tensor losses, Tensor targets, int N, int V, int Vp,
                                                 float dloss) {
  const auto ref = bf16ref::classifier(get(logits), tokens_of(targets), N, V, Vp, dloss);
  inner_.classifier_forward_backward(logits, losses, targets, N, V, Vp, dloss);
  check("classifier_forward_backward", shape({{"N", N}, {"V", V}, {"Vp", Vp}}), {logits, losses}, ref);
}

}  // namespace bf16ref
}  // namespace gpt2

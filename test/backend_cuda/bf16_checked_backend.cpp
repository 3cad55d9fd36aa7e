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

void CheckedBackend::encoder_forward(const EncoderForwardArgs& args) {
  const auto ref =
      bf16ref::encoder_forward(tokens_of(args.tokens), get(args.wte), get(args.wpe), args.B, args.T, args.C);
  inner_.encoder_forward(args);
  check("encoder_forward", shape({{"B", args.B}, {"T", args.T}, {"C", args.C}}), {args.out}, ref);
}

void CheckedBackend::encoder_backward(const EncoderBackwardArgs& args) {
  const auto ref = bf16ref::encoder_backward(get(args.dwte), get(args.dwpe), get(args.dout), tokens_of(args.tokens),
                                             args.B, args.T, args.C);
  inner_.encoder_backward(args);
  check("encoder_backward", shape({{"B", args.B}, {"T", args.T}, {"C", args.C}}), {args.dwte, args.dwpe}, ref);
}

void CheckedBackend::tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) {
  const int R = static_cast<int>(args.dwte_rows.numel / static_cast<size_t>(args.C));
  const std::string shp = shape({{"N", args.N}, {"C", args.C}, {"Vp", args.Vp}, {"v0", args.v0}, {"rows", R}});
  if (!args.dlogits.empty()) {
    const std::vector<float> dl = get(args.dlogits);
    std::vector<float> cols(static_cast<size_t>(args.N) * R);
    for (int n = 0; n < args.N; n++)
      for (int r = 0; r < R; r++) cols[size_t(n) * R + r] = dl[size_t(n) * args.Vp + args.v0 + r];
    const auto ref = bf16ref::matmul_backward(get(args.dwte_rows), nullptr, cols, get(args.lnf),
                                              std::vector<float>(size_t(R) * args.C, 0.0f), args.N, args.C, R);
    TiedEmbeddingRowsArgs lm_head_part = args;
    lm_head_part.dembed = Tensor{};
    inner_.tied_embedding_backward_rows(lm_head_part);
    check("tied_embedding_backward_rows", shp, {args.dwte_rows}, {ref[1]});
  }
  if (!args.dembed.empty()) {
    std::vector<int32_t> window = tokens_of(args.tokens);  // ids outside the window are skipped (-1)
    for (int32_t& t : window) t = t >= args.v0 && t < args.v0 + R ? t - args.v0 : -1;
    const auto ref = bf16ref::encoder_backward(get(args.dwte_rows), std::vector<float>(size_t(args.N) * args.C, 0.0f),
                                               get(args.dembed), window, 1, args.N, args.C);
    TiedEmbeddingRowsArgs embedding_part = args;
    embedding_part.dlogits = embedding_part.lnf = Tensor{};
    inner_.tied_embedding_backward_rows(embedding_part);
    check("tied_embedding_backward_rows", shp, {args.dwte_rows}, {ref[0]});
  }
}

void CheckedBackend::layernorm_forward(const LayernormForwardArgs& args) {
  const auto ref = bf16ref::layernorm_forward(get(args.inp), get(args.w), get(args.b), args.N, args.C);
  inner_.layernorm_forward(args);
  check("layernorm_forward", shape({{"N", args.N}, {"C", args.C}}), {args.out, args.mean, args.rstd}, ref);
}

void CheckedBackend::layernorm_backward(const LayernormBackwardArgs& args) {
  const auto ref =
      bf16ref::layernorm_backward(get(args.dinp), get(args.dw), get(args.db), get(args.dout), get(args.inp),
                                  get(args.w), get(args.mean), get(args.rstd), args.N, args.C);
  inner_.layernorm_backward(args);
  check("layernorm_backward", shape({{"N", args.N}, {"C", args.C}}), {args.dinp, args.dw, args.db}, ref);
}

// The sum against residual_forward's reference, then the layernorm against its
// reference on the stored sum (what the kernel normalises).
void CheckedBackend::residual_layernorm_forward(const ResidualLayernormForwardArgs& args) {
  auto sum = bf16ref::residual_forward(get(args.a), get(args.b));  // before the call: residual may alias a
  sum[0].name = "residual";
  inner_.residual_layernorm_forward(args);
  const std::string shp = shape({{"N", args.N}, {"C", args.C}});
  check("residual_layernorm_forward", shp, {args.residual}, sum);
  check("residual_layernorm_forward", shp, {args.out, args.mean, args.rstd},
        bf16ref::layernorm_forward(get(args.residual), get(args.w), get(args.bias), args.N, args.C));
}

void CheckedBackend::matmul_forward(const MatmulForwardArgs& args) {
  const std::vector<float> b = get(args.bias);
  const auto ref = bf16ref::matmul_forward(get(args.inp), get(args.w), args.bias.empty() ? nullptr : &b, args.N, args.C,
                                           args.OC, separate_bias_);
  inner_.matmul_forward(args);
  check("matmul_forward", shape({{"N", args.N}, {"C", args.C}, {"OC", args.OC}}), {args.out}, ref);
}

void CheckedBackend::matmul_backward(const MatmulBackwardArgs& args) {
  const std::vector<float> db = get(args.dbias);
  // dw empty (the lm_head's dinp alone): reference against zeros, dw not checked.
  const std::vector<float> dw_old = args.dw.empty() ? std::vector<float>(size_t(args.OC) * args.C, 0.0f) : get(args.dw);
  auto ref = bf16ref::matmul_backward(dw_old, args.dbias.empty() ? nullptr : &db, get(args.dout), get(args.inp),
                                      get(args.w), args.N, args.C, args.OC);
  inner_.matmul_backward(args);
  std::vector<Tensor> outs = {args.dinp};
  if (args.dw.empty())
    ref.erase(ref.begin() + 1);
  else
    outs.push_back(args.dw);
  if (!args.dbias.empty()) outs.push_back(args.dbias);
  check("matmul_backward", shape({{"N", args.N}, {"C", args.C}, {"OC", args.OC}}), outs, ref);
}

void CheckedBackend::matmul_gelu_forward(const MatmulGeluForwardArgs& args) {
  const std::vector<float> b = get(args.bias);
  const auto ref = bf16ref::matmul_gelu_forward(get(args.inp), get(args.w), args.bias.empty() ? nullptr : &b, args.N,
                                                args.C, args.OC, separate_bias_);
  inner_.matmul_gelu_forward(args);
  check("matmul_gelu_forward", shape({{"N", args.N}, {"C", args.C}, {"OC", args.OC}}), {args.out, args.pre}, ref);
}

void CheckedBackend::matmul_gelu_backward(const MatmulGeluBackwardArgs& args) {
  const std::vector<float> db = get(args.dbias);
  auto ref = bf16ref::matmul_gelu_backward(get(args.dw), args.dbias.empty() ? nullptr : &db, get(args.dout),
                                           get(args.inp), get(args.w), get(args.gelu_inp), args.N, args.C, args.OC);
  inner_.matmul_gelu_backward(args);
  std::vector<Tensor> outs = {args.dinp, args.dw};
  if (!args.dbias.empty()) outs.push_back(args.dbias);
  check("matmul_gelu_backward", shape({{"N", args.N}, {"C", args.C}, {"OC", args.OC}}), outs, ref);
}

void CheckedBackend::attention_forward(const AttentionForwardArgs& args) {
  const auto ref = bf16ref::attention_forward(get(args.qkv), args.B, args.T, args.C, args.NH, args.drop, attention);
  inner_.attention_forward(args);
  check("attention_forward", shape({{"B", args.B}, {"T", args.T}, {"C", args.C}, {"NH", args.NH}}), {args.out}, ref);
}

void CheckedBackend::attention_backward(const AttentionBackwardArgs& args) {
  const auto ref = bf16ref::attention_backward(get(args.dout), get(args.out), get(args.qkv), args.B, args.T, args.C,
                                               args.NH, args.drop, attention);
  inner_.attention_backward(args);
  check("attention_backward", shape({{"B", args.B}, {"T", args.T}, {"C", args.C}, {"NH", args.NH}}), {args.dqkv}, ref);
}

void CheckedBackend::gelu_forward(const GeluForwardArgs& args) {
  const auto ref = bf16ref::gelu_forward(get(args.inp));
  inner_.gelu_forward(args);
  check("gelu_forward", shape({{"n", long(args.n)}}), {args.out}, ref);
}

void CheckedBackend::gelu_backward(const GeluBackwardArgs& args) {
  const auto ref = bf16ref::gelu_backward(get(args.inp), get(args.dout));  // before the call: dinp may alias dout
  inner_.gelu_backward(args);
  check("gelu_backward", shape({{"n", long(args.n)}}), {args.dinp}, ref);
}

void CheckedBackend::residual_forward(const ResidualForwardArgs& args) {
  const auto ref = bf16ref::residual_forward(get(args.a), get(args.b));  // out may alias a
  inner_.residual_forward(args);
  check("residual_forward", shape({{"n", long(args.n)}}), {args.out}, ref);
}

void CheckedBackend::dropout(const DropoutArgs& args) {
  const auto ref = bf16ref::dropout(get(args.inp), args.m, args.N, args.C);  // out may alias inp
  inner_.dropout(args);
  check("dropout", shape({{"N", args.N}, {"C", args.C}, {"p", long(args.m.p * 1000)}}), {args.out}, ref);
}

void CheckedBackend::classifier_forward_backward(const ClassifierArgs& args) {
  const auto ref = bf16ref::classifier(get(args.logits), tokens_of(args.targets), args.N, args.V, args.Vp, args.dloss);
  inner_.classifier_forward_backward(args);
  check("classifier_forward_backward", shape({{"N", args.N}, {"V", args.V}, {"Vp", args.Vp}}),
        {args.logits, args.losses}, ref);
}

}  // namespace bf16ref
}  // namespace gpt2

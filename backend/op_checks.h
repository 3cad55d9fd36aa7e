// The argument contract of the Backend ops, checked the same way by every
// backend before it touches memory: positive dimensions, element counts large
// enough for the shapes, and element sizes (storage_bytes for float buffers:
// 4, or 2 for bf16 storage; 4 for token ids, optimizer moments and master
// weights). Errors read "<backend>: <op>: <arg> has N elements, needs M".
// What only one backend can check (token id ranges on the host, its own
// saved/scratch sizes) stays in that backend and is passed in.
#ifndef BACKEND_OP_CHECKS_H
#define BACKEND_OP_CHECKS_H

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/backend.h"

namespace gpt2 {

class OpChecks {
 public:
  OpChecks(std::string backend, uint32_t storage_bytes) : backend_(std::move(backend)), storage_(storage_bytes) {}

  [[noreturn]] void fail(const char* op, const std::string& why) const;
  void need(const Tensor& t, size_t numel, const char* op, const char* arg, uint32_t elem_bytes) const;
  void need_x(const Tensor& t, size_t numel, const char* op, const char* arg) const {
    need(t, numel, op, arg, storage_);
  }
  void dims(const char* op, std::initializer_list<long> dims) const;

  // One per op of backend.h; `x` is out (forward) or dout (backward).
  void encoder(const char* op, const Tensor& x, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int B,
               int T, int C) const;
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& w, const Tensor& b, int N, int C) const;
  void layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                          const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd, int N,
                          int C) const;
  void tied_embedding_rows(const Tensor& dwte_rows, const Tensor& dlogits, const Tensor& lnf, const Tensor& dembed,
                           const Tensor& tokens, int N, int C, int Vp, int v0) const;
  void matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N, int C,
                      int OC) const;
  void matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                       const Tensor& inp, const Tensor& w, int N, int C, int OC) const;
  void attention_forward(const Tensor& out, const Tensor& saved, size_t saved_numel, const Tensor& qkv, int B,
                         int T, int C, int NH, const DropoutMask& drop) const;
  void attention_backward(const Tensor& dqkv, const Tensor& scratch, size_t scratch_numel, const Tensor& dout,
                          const Tensor& out, const Tensor& qkv, const Tensor& saved, size_t saved_numel, int B,
                          int T, int C, int NH, const DropoutMask& drop) const;
  void gelu_forward(const Tensor& out, const Tensor& inp, size_t n) const;
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, size_t n) const;
  void residual_forward(const Tensor& out, const Tensor& a, const Tensor& b, size_t n) const;
  void dropout(const Tensor& out, const Tensor& inp, const DropoutMask& m, int N, int C) const;
  void classifier(const Tensor& logits, const Tensor& losses, const Tensor& targets, int N, int V, int Vp) const;
  void adamw(const Tensor& params, const Tensor& master, const Tensor& grads, const Tensor& m, const Tensor& v,
             int t) const;

 private:
  std::string backend_;
  uint32_t storage_;
};

}  // namespace gpt2

#endif  // BACKEND_OP_CHECKS_H

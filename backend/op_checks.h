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

  // One per op of backend.h; attention takes the backend's own saved and
  // scratch sizes.
  void encoder_forward(const EncoderForwardArgs& args) const;
  void encoder_backward(const EncoderBackwardArgs& args) const;
  void layernorm_forward(const LayernormForwardArgs& args) const;
  void layernorm_backward(const LayernormBackwardArgs& args) const;
  void tied_embedding_rows(const TiedEmbeddingRowsArgs& args) const;
  void matmul_forward(const MatmulForwardArgs& args) const;
  void matmul_backward(const MatmulBackwardArgs& args) const;
  void attention_forward(const AttentionForwardArgs& args, size_t saved_numel) const;
  void attention_backward(const AttentionBackwardArgs& args, size_t scratch_numel, size_t saved_numel) const;
  void gelu_forward(const GeluForwardArgs& args) const;
  void gelu_backward(const GeluBackwardArgs& args) const;
  void residual_forward(const ResidualForwardArgs& args) const;
  void dropout(const DropoutArgs& args) const;
  void classifier(const ClassifierArgs& args) const;
  void adamw(const AdamWArgs& args) const;

 private:
  std::string backend_;
  uint32_t storage_;
};

}  // namespace gpt2

#endif  // BACKEND_OP_CHECKS_H

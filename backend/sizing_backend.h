// A Backend that allocates nothing, for memory tables of configurations this
// machine cannot hold (the trainer's --dry-run): alloc() hands out distinct
// fake addresses that are never dereferenced and counts the bytes per role,
// with the element sizes and attention buffer sizes of the backend it stands
// for, so the model, the ZeRO plan and the optimizer allocate exactly what
// they would on that backend. zero/upload/copy/free do nothing, download
// writes zeros; every op throws.
#ifndef BACKEND_SIZING_BACKEND_H
#define BACKEND_SIZING_BACKEND_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace gpt2 {

constexpr int kNumBufferRoles = 8;
static_assert(kNumBufferRoles == static_cast<int>(BufferRole::kScalar64) + 1, "a BufferRole without a size slot");

// What a real backend would allocate: element bytes per BufferRole and its
// attention buffer sizes (Backend::attention_saved_numel / _scratch_numel).
struct BackendSizes {
  std::string name;  // the backend it stands for: "cpu", "cuda"
  bool host_memory = true;
  std::array<uint32_t, kNumBufferRoles> elem_bytes{};
  std::function<size_t(int B, int T, int NH)> attention_saved_numel;
  std::function<size_t(int B, int T, int NH)> attention_scratch_numel;
};

class SizingBackend final : public Backend {
 public:
  explicit SizingBackend(BackendSizes sizes) : sizes_(std::move(sizes)) {}
  size_t allocated_bytes(BufferRole role) const { return bytes_[static_cast<size_t>(role)]; }
  size_t allocated_bytes() const;

  std::string name() const override { return sizes_.name; }
  bool is_host_memory() const override { return sizes_.host_memory; }
  Tensor alloc(size_t numel, BufferRole role) override;
  void free(Tensor) override {}
  void zero(Tensor) override {}
  void upload(Tensor, const float*) override {}
  void download(float* dst, Tensor src) override;
  void upload_tokens(Tensor, const int32_t*) override {}
  void copy(Tensor, Tensor) override {}

  void encoder_forward(const EncoderForwardArgs&) override { no_op("encoder_forward"); }
  void encoder_backward(const EncoderBackwardArgs&) override { no_op("encoder_backward"); }
  void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs&) override { no_op("tied_embedding_backward_rows"); }
  void layernorm_forward(const LayernormForwardArgs&) override { no_op("layernorm_forward"); }
  void layernorm_backward(const LayernormBackwardArgs&) override { no_op("layernorm_backward"); }
  void matmul_forward(const MatmulForwardArgs&) override { no_op("matmul_forward"); }
  void matmul_backward(const MatmulBackwardArgs&) override { no_op("matmul_backward"); }
  size_t attention_saved_numel(int B, int T, int NH) const override { return sizes_.attention_saved_numel(B, T, NH); }
  void attention_forward(const AttentionForwardArgs&) override { no_op("attention_forward"); }
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return sizes_.attention_scratch_numel(B, T, NH);
  }
  void attention_backward(const AttentionBackwardArgs&) override { no_op("attention_backward"); }
  void gelu_forward(const GeluForwardArgs&) override { no_op("gelu_forward"); }
  void gelu_backward(const GeluBackwardArgs&) override { no_op("gelu_backward"); }
  void residual_forward(const ResidualForwardArgs&) override { no_op("residual_forward"); }
  void dropout(const DropoutArgs&) override { no_op("dropout"); }
  void classifier_forward_backward(const ClassifierArgs&) override { no_op("classifier_forward_backward"); }
  double sum_squares(Tensor) override { no_op("sum_squares"); }
  void adamw_update(const AdamWArgs&) override { no_op("adamw_update"); }
  void sum_squares_into(Tensor, Tensor) override { no_op("sum_squares_into"); }
  void clip_scale(Tensor, float) override { no_op("clip_scale"); }
  void download64(double* dst, Tensor src) override;

 private:
  [[noreturn]] void no_op(const char* op) const;

  BackendSizes sizes_;
  std::array<size_t, kNumBufferRoles> bytes_{};
  uintptr_t next_ = 4096;  // fake addresses: non-null, 256-byte aligned, never reused
};

// The CPU backend's sizes (fp32 everywhere, its attention buffers for `threads`).
BackendSizes cpu_backend_sizes(int threads);

}  // namespace gpt2

#endif  // BACKEND_SIZING_BACKEND_H

// A Backend that runs every op on a bf16 CUDA backend and checks each call's
// outputs per element against bf16_reference.h, computed from the inputs the
// call actually received (downloaded before it runs, "+=" outputs included).
// Used for the op cases (under the op harness, whose guard / inputs-unchanged
// checks still apply) and for every op of a whole training step, where each
// op is checked on the activations and gradients the bf16 backend itself
// produced upstream, so rounding differences do not compound between ops.
//
// Not checked: memory ops, sum_squares and adamw_update (tested on their own
// in cuda_bf16_test.cpp), and attention's `saved` buffer (its contents are the
// backend's business; the bf16 backward recomputes P).
#ifndef TEST_BACKEND_CUDA_BF16_CHECKED_BACKEND_H
#define TEST_BACKEND_CUDA_BF16_CHECKED_BACKEND_H

#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "test/backend_cuda/bf16_reference.h"

namespace gpt2 {
namespace bf16ref {

class CheckedBackend : public Backend {
 public:
  // separate_bias: the backend adds the matmul bias with a kernel after a bf16
  // GEMM (CudaBackendOptions::use_cublaslt == false).
  CheckedBackend(Backend& inner, bool separate_bias) : inner_(inner), separate_bias_(separate_bias) {}

  // The attention kernel the inner backend runs (its CudaBackendOptions::attention).
  bf16ref::AttentionKernel attention = bf16ref::AttentionKernel::kFlash;

  // One checked call: what the backend stored and the reference.
  struct Record {
    std::string op;
    std::vector<std::vector<float>> got;
    std::vector<Output> ref;
  };
  bool keep_records = false;        // keep every call (else only `last`)
  std::vector<Record> records;
  Record last;
  std::map<std::string, Stats> stats;  // per op name and output, e.g. "matmul_backward.dw"
  std::string problems;                // first problems, "op(shape) output[i]: ..."
  size_t failures() const;
  void print_stats(const char* prefix) const;

  // ---- Backend -----------------------------------------------------------------------------
  std::string name() const override { return inner_.name(); }
  bool is_host_memory() const override { return inner_.is_host_memory(); }
  Tensor alloc(size_t numel, BufferRole role) override { return inner_.alloc(numel, role); }
  void free(Tensor t) override { inner_.free(t); }
  void zero(Tensor t) override { inner_.zero(t); }
  void upload(Tensor dst, const float* src) override { inner_.upload(dst, src); }
  void download(float* dst, Tensor src) override { inner_.download(dst, src); }
  void upload_tokens(Tensor dst, const int32_t* src) override;
  void copy(Tensor dst, Tensor src) override { inner_.copy(dst, src); }
  void synchronize() override { inner_.synchronize(); }

  void encoder_forward(const EncoderForwardArgs& args) override;
  void encoder_backward(const EncoderBackwardArgs& args) override;
  // Checked part by part (the op's contract: the same additions either way):
  // the lm_head part as matmul_backward's dw on dlogits' columns of the
  // window, then the embedding part as encoder_backward's dwte over it.
  void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) override;
  void layernorm_forward(const LayernormForwardArgs& args) override;
  void layernorm_backward(const LayernormBackwardArgs& args) override;
  void matmul_forward(const MatmulForwardArgs& args) override;
  void matmul_backward(const MatmulBackwardArgs& args) override;
  void residual_layernorm_forward(const ResidualLayernormForwardArgs& args) override;
  void matmul_gelu_forward(const MatmulGeluForwardArgs& args) override;
  void matmul_gelu_backward(const MatmulGeluBackwardArgs& args) override;
  size_t attention_saved_numel(int B, int T, int NH) const override {
    return inner_.attention_saved_numel(B, T, NH);
  }
  void attention_forward(const AttentionForwardArgs& args) override;
  size_t attention_scratch_numel(int B, int T, int NH) const override {
    return inner_.attention_scratch_numel(B, T, NH);
  }
  void attention_backward(const AttentionBackwardArgs& args) override;
  void gelu_forward(const GeluForwardArgs& args) override;
  void gelu_backward(const GeluBackwardArgs& args) override;
  void residual_forward(const ResidualForwardArgs& args) override;
  void dropout(const DropoutArgs& args) override;
  void classifier_forward_backward(const ClassifierArgs& args) override;
  double sum_squares(Tensor g) override { return inner_.sum_squares(g); }
  void sum_squares_into(Tensor clip, Tensor g) override { inner_.sum_squares_into(clip, g); }
  void clip_scale(Tensor clip, float max_norm) override { inner_.clip_scale(clip, max_norm); }
  void download64(double* dst, Tensor src) override { inner_.download64(dst, src); }
  void adamw_update_clipped(const AdamWArgs& args, Tensor clip) override { inner_.adamw_update_clipped(args, clip); }
  void adamw_update(const AdamWArgs& args) override { inner_.adamw_update(args); }

 private:
  std::vector<float> get(Tensor t);
  std::vector<int32_t> tokens_of(Tensor t) const;
  void check(const std::string& op, const std::string& shape, const std::vector<Tensor>& outs,
             const std::vector<Output>& ref);

  Backend& inner_;
  bool separate_bias_;
  struct Uploaded {
    const char* ptr;
    std::vector<int32_t> ids;
  };
  std::vector<Uploaded> tokens_;  // host copies of uploaded token buffers (no download_tokens)
};

}  // namespace bf16ref
}  // namespace gpt2

#endif  // TEST_BACKEND_CUDA_BF16_CHECKED_BACKEND_H

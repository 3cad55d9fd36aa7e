// A Backend that forwards every op to another backend and times each call
// (steady_clock around the call: the CPU backend is synchronous), adding up per
// op name the calls, the seconds and the work the call's arguments imply:
// FLOPs for the GEMM ops (2·M·N·K per product; attention counts the causal
// minimum, as test/backend's perf mode does) and bytes read + written for
// every op (4 bytes per element: the CPU backend's fp32). An op with FLOPs is
// a compute op, one without a memory-bound op (dev/cpu/step_profile.h).
//
// The compound ops that Backend implements by default (matmul_gelu_forward,
// matmul_gelu_backward, residual_layernorm_forward, read_clip,
// adamw_update_clipped) are not overridden: their parts reach this decorator
// and are timed one by one. The CPU backend does not override them either, so
// this is the step it runs; a backend with fused versions would run the parts
// here instead (test/dev/profile_cpu_step_test.sh checks the CPU backend).
#ifndef DEV_CPU_TIMING_BACKEND_H
#define DEV_CPU_TIMING_BACKEND_H

#include <map>
#include <string>

#include "backend/backend.h"

namespace gpt2 {
namespace cpuprof {

// What the calls of one op added up to.
struct OpTotals {
  long calls = 0;
  double seconds = 0, flops = 0, bytes = 0;
  bool compute() const { return flops > 0; }
};

using OpTable = std::map<std::string, OpTotals>;  // by op name

class TimingBackend : public Backend {
 public:
  explicit TimingBackend(Backend& inner) : inner_(inner) {}

  const OpTable& totals() const { return totals_; }
  void reset() { totals_.clear(); }

  std::string name() const override { return inner_.name(); }
  bool is_host_memory() const override { return inner_.is_host_memory(); }
  Tensor alloc(size_t numel, BufferRole role) override { return inner_.alloc(numel, role); }
  void free(Tensor t) override { inner_.free(t); }
  void zero(Tensor t) override;
  void upload(Tensor dst, const float* src) override;
  void download(float* dst, Tensor src) override;
  void upload_tokens(Tensor dst, const int32_t* src) override;
  void copy(Tensor dst, Tensor src) override;
  void synchronize() override { inner_.synchronize(); }
  void range_push(const char* name) override { inner_.range_push(name); }
  void range_pop() override { inner_.range_pop(); }
  void profiler_capture(bool on) override { inner_.profiler_capture(on); }
  DeviceMemory device_memory() const override { return inner_.device_memory(); }

  void encoder_forward(const EncoderForwardArgs& args) override;
  void encoder_backward(const EncoderBackwardArgs& args) override;
  void tied_embedding_backward_rows(const TiedEmbeddingRowsArgs& args) override;
  void layernorm_forward(const LayernormForwardArgs& args) override;
  void layernorm_backward(const LayernormBackwardArgs& args) override;
  void matmul_forward(const MatmulForwardArgs& args) override;
  void matmul_backward(const MatmulBackwardArgs& args) override;
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
  double sum_squares(Tensor g) override;
  void adamw_update(const AdamWArgs& args) override;
  void sum_squares_into(Tensor clip, Tensor g) override;
  void clip_scale(Tensor clip, float max_norm) override;
  void download64(double* dst, Tensor src) override;

 private:
  // Runs call() under the clock and adds it to op's totals.
  template <class Call>
  void timed(const char* op, double flops, double bytes, Call&& call);

  Backend& inner_;
  OpTable totals_;
};

}  // namespace cpuprof
}  // namespace gpt2

#endif  // DEV_CPU_TIMING_BACKEND_H

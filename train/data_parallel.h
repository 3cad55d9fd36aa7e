// Data parallelism with ZeRO stages 0/1/2 over a Communicator, on whatever
// memory the backend owns (host pointers with MPI today; device pointers with
// NCCL when the CUDA backend arrives — the calls are the same).
//
//   stage 0: full gradients all-reduced (averaged); every rank updates every
//            parameter with its own full optimizer state.
//   stage 1: full gradients reduce-scattered (averaged) at the end of the step;
//            each rank keeps AdamW state for its shard only, updates it, and the
//            parameters are all-gathered.
//   stage 2: as 1, but no full gradient buffer exists: the model stages one
//            layer's gradients at a time (GradMode::kStaged) and, right after
//            each layer's backward, that unit is reduce-scattered and added into
//            this rank's gradient shard (the structure that overlaps
//            communication with compute on GPUs). Correct with accumulation:
//            every micro-step adds its reduced unit into the shard.
// The global gradient norm is computed once per step: each rank squares its
// shard (stage 0: the whole, identical everywhere) and one all-reduce sums.
#ifndef TRAIN_DATA_PARALLEL_H
#define TRAIN_DATA_PARALLEL_H

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "distributed/comm.h"
#include "distributed/zero_plan.h"
#include "model/gpt2.h"

namespace gpt2 {

class DataParallel {
 public:
  DataParallel(Backend& backend, Communicator& comm, const ParamLayout& layout, int zero_stage);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int stage() const { return stage_; }
  const ZeroPlan& plan() const { return plan_; }
  // How the model must allocate: gradient mode and padded parameter capacity.
  GradMode grad_mode() const { return stage_ == 2 ? GradMode::kStaged : GradMode::kFull; }
  size_t param_capacity() const { return plan_.padded_size(); }
  // Parameters this rank's optimizer updates: [begin, end) clipped to the real count.
  size_t opt_begin() const { return opt_begin_; }
  size_t opt_end() const { return opt_end_; }

  // Step protocol: begin_step, then per micro-step forward + backward(hook),
  // then reduce_gradients, grad_norm, optimizer on shard_grads, gather_params.
  void begin_step();
  std::function<void(int)> backward_hook(GPT2& model);  // empty for stages 0/1
  void reduce_gradients(GPT2& model);
  Tensor shard_grads(GPT2& model) const;  // gradients of [opt_begin, opt_end)
  double grad_norm(GPT2& model);
  void gather_params(GPT2& model);

  // Bytes of gradient memory this rank holds (model buffers + shard + staging).
  size_t gradient_bytes(const GPT2& model) const;

 private:
  void reduce_unit(GPT2& model, int unit);

  Backend& backend_;
  Communicator& comm_;
  const int stage_;
  const size_t num_params_;
  ZeroPlan plan_;
  size_t opt_begin_ = 0, opt_end_ = 0;
  Tensor shard_grads_;  // stage 2: this rank's accumulated gradient shard (shard_size)
  Tensor recv_;         // stage 2: one unit's received part
};

// The ZeroPlan tensor list of a model layout (names, sizes, stacking).
std::vector<ParamTensorSpec> zero_tensor_specs(const ParamLayout& layout);

}  // namespace gpt2

#endif  // TRAIN_DATA_PARALLEL_H

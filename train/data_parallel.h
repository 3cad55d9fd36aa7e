// Data parallelism with ZeRO stages 0/1/2, on whatever memory the backend
// owns, over two communicators:
//   * `buffers` moves the backend's tensors (gradients, parameters): the MPI
//     communicator for host memory (CPU backend), the NCCL communicator for
//     device memory (CUDA backend). The element type of each call follows the
//     tensors (Tensor::elem_bytes: 4 -> kFloat32, 2 -> kBFloat16).
//   * `host` carries host scalars (the gradient norm's partial sums): always
//     host memory (MPI). With the CPU backend both are the same communicator.
//
//   stage 0: full gradients all-reduced (averaged); every rank updates every
//            parameter with its own full optimizer state.
//   stage 1: full gradients reduce-scattered (averaged) at the end of the step;
//            each rank keeps AdamW state for its shard only, updates it, and the
//            parameters are all-gathered.
//   stage 2: as 1, but no full gradient buffer exists: the model stages one
//            layer's gradients at a time (GradMode::kStaged) and, right after
//            each layer's backward, that unit is reduce-scattered and added into
//            this rank's gradient shard (the structure that can overlap
//            communication with compute on GPUs; not yet: the NCCL calls run
//            on the compute stream). Correct with accumulation: every
//            micro-step adds its reduced unit into the shard.
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
  // `buffers` and `host` span the same ranks; `host` works on host memory and
  // `buffers` on the backend's (the same communicator for a host backend).
  DataParallel(Backend& backend, Communicator& buffers, Communicator& host, const ParamLayout& layout,
               int zero_stage);
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
  void allocate_stage2_buffers();
  void reduce_unit(GPT2& model, int unit);

  Backend& backend_;
  Communicator& comm_;  // the backend's buffers
  Communicator& host_;  // host scalars
  const int stage_;
  const size_t num_params_;
  ZeroPlan plan_;
  size_t opt_begin_ = 0, opt_end_ = 0;
  Tensor shard_grads_;  // stage 2: this rank's accumulated gradient shard (shard_size)
  Tensor recv_;         // stage 2: one unit's received part
};

// The ZeroPlan tensor list of a model layout (names, sizes, stacking).
std::vector<ParamTensorSpec> zero_tensor_specs(const ParamLayout& layout);

// The communicated element type of a floating-point buffer of this element
// size: 4 -> kFloat32, 2 -> kBFloat16 (the CUDA backend's bf16 storage).
// Throws std::runtime_error for any other size.
DataType comm_data_type(uint32_t elem_bytes);

}  // namespace gpt2

#endif  // TRAIN_DATA_PARALLEL_H

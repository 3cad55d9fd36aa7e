// Data parallelism with ZeRO stages 0/1/2 on the backend's memory, over one
// communicator, `buffers`: MPI for host memory (CPU backend), NCCL for device
// memory (CUDA backend), the element type following the tensors. The
// trainer's host scalars (losses) go over its own host communicator.
//   stage 0: gradients all-reduced (averaged); every rank updates every parameter.
//   stage 1: gradients reduce-scattered; each rank keeps AdamW state for its
//            shard only and updates it, then the parameters are all-gathered.
//   stage 2: as 1 without a full gradient buffer: each layer's gradients are
//            reduce-scattered from a layer-sized staging buffer
//            (train/zero_staging.h) right after its backward, the tied wte
//            gradient in vocabulary chunks after the backward, and added into
//            this rank's shard (every micro-step adds).
//   stage 3: as 2, and each rank keeps only its shard of the parameters: the
//            model reads layers gathered just before use (train/zero_params.h).
// With device buffers at world > 1 the collectives run beside the backward
// (stage 2: two layer buffers used alternately; stages 0/1: buckets of layers
// in the last micro-step); docs/distributed.md ("Overlap with the backward")
// has the schedule. The gradient norm's square is summed over each rank's
// shard and all-reduced once per step.
#ifndef TRAIN_DATA_PARALLEL_H
#define TRAIN_DATA_PARALLEL_H

#include <array>
#include <memory>

#include "backend/backend.h"
#include "distributed/comm.h"
#include "distributed/zero_plan.h"
#include "model/gpt2.h"
#include "train/zero_params.h"
#include "train/zero_staging.h"

namespace gpt2 {

class DataParallel {
 public:
  DataParallel(Backend& backend, Communicator& buffers, const ParamLayout& layout, int zero_stage);
  // Whether the backend's buffers go through `buffers`: with several ranks, and
  // at one for ZeRO-2/3's unit exchange. Else a host communicator moves them.
  static bool buffers_travel(int world, int zero_stage) { return world > 1 || zero_stage >= 2; }
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int stage() const { return stage_; }
  const ZeroPlan& plan() const { return plan_; }
  // How the model must be built for this schedule (recompute aside): the
  // padded parameter capacity, at stages 2/3 dlogits kept for the wte chunks,
  // at stage 3 the parameters read from this schedule's shards.
  ModelOptions model_options(int recompute) const;
  size_t param_capacity() const { return plan_.padded_size(); }
  // Parameters this rank's optimizer updates: [begin, end) clipped to the real count.
  size_t opt_begin() const { return opt_begin_; }
  size_t opt_end() const { return opt_end_; }
  // Stages 0/1: the full gradient buffer, laid out like the padded parameters.
  Tensor grads() const { return grads_; }

  // Step protocol: begin_step (zeroes the gradients); per micro-step a
  // training forward and backward (here); reduce_gradients, queue_grad_clip,
  // grad_norm (after the step's host wait), the optimizer on shard_grads with
  // clip_state(), gather_params.
  void begin_step();
  // The backward of the model's last training forward, piece by piece, each
  // layer's gradients reduced or exchanged right after its backward (see
  // Overlap above).
  void backward(GPT2& model, bool last_micro_step = false);
  // Stages 0/1: waits (device-side) for the buckets the last backward issued,
  // or reduces the whole gradient now. Stage 2: waits for the exchanges still
  // in flight and adds them into the shard.
  void reduce_gradients();
  Tensor shard_grads() const;  // gradients of [opt_begin, opt_end)
  Tensor shard_params(const GPT2& model) const;  // parameters of [opt_begin, opt_end): the optimizer's
  // Queues on the backend, with no host wait (Backend::clip_scale), the global
  // gradient norm's sum of squares (see above; on `buffers`) and the AdamW
  // scale clipping to max_norm (<= 0: none) into clip_state().
  void queue_grad_clip(float max_norm);
  Tensor clip_state() const { return clip_; }
  double grad_norm();  // of the last queue_grad_clip (Backend::read_clip)
  // After the optimizer: the updated shards to every rank that reads them
  // (stage 3: the whole tensors only; layers are gathered when used).
  void gather_params(GPT2& model);

  // Bytes of parameter memory this rank holds (the model's buffer, or stage
  // 3's shard, whole tensors and gathered layers).
  size_t parameter_bytes(const GPT2& model) const;
  // Bytes of gradient memory this rank holds (full buffer or shard + staging).
  size_t gradient_bytes() const;

 private:
  // Stage 0/1 bucket: reduced once layer low_layer's backward has run (-1:
  // at the end, with the embeddings and final layernorm).
  struct Bucket {
    int low_layer = -1;
    std::vector<ReducePiece> pieces;
  };
  struct PendingUnit {
    CommTicket ticket = 0;
    int unit = -1;  // -1: nothing in flight
  };

  // Stages 2/3: gradients go through the per-unit staging into the shard.
  bool staged_grads() const { return stage_ >= 2; }
  // This rank's shard of a buffer laid out like the padded parameters.
  Tensor my_shard(Tensor flat) const {
    const ElemRange s = plan_.shard(comm_.rank());
    return flat.slice(s.begin, s.size());
  }
  void allocate_stage2_buffers();
  bool buckets_apply(bool last_micro_step);  // stages 0/1: this backward reduces in buckets
  void issue_bucket(int layer);              // stages 0/1: the bucket whose lowest layer is final
  void exchange_layer(int layer);            // stage 2: layer l's unit, final
  void exchange_tied_and_rest(GPT2& model);  // stage 2: the wte chunks and the rest unit, after the backward
  void reduce_unit(int unit);
  void exchange_async(int unit);
  void retire(int slot);
  void add_received(const UnitExchange& ex, const Tensor& recv, size_t a, size_t b);
  void build_buckets(uint32_t elem_bytes);
  void add_bucket_range(Bucket& bucket, size_t begin, size_t end) const;

  Backend& backend_;
  Communicator& comm_;  // the backend's buffers
  const int stage_;
  const size_t num_params_;
  ZeroPlan plan_;
  size_t opt_begin_ = 0, opt_end_ = 0;
  Tensor clip_;         // kScalar64 [sum of squares, clip scale]
  Tensor grads_;        // stages 0/1: the full gradients (padded_size)
  Tensor shard_grads_;  // stage 2: this rank's accumulated gradient shard (shard_size)
  Tensor recv_;         // stage 2: one unit's received part
  std::unique_ptr<ZeroStaging> staging_;  // stages 2/3: what the backward writes
  std::unique_ptr<ZeroParams> params_;    // stage 3: this rank's parameters
  const ParamLayout layout_;
  const bool overlap_;          // device buffers at world > 1: asynchronous collectives
  bool overlap_stage2_ = false;  // every layer unit fits one exchange
  bool overlap_rest_ = false;    // so does the rest unit
  bool drop_reuse_wait_ = false;  // test hook GPT2_TEST_DROP_REUSE_WAIT
  // Stage 2 overlap, per send buffer (ZeroStaging::buffer_of: 0, 1 the layer
  // buffers, 2 the rest unit): its receive buffer and the exchange in flight.
  static constexpr int kRestSlot = ZeroStaging::kRestBuffer;
  std::array<Tensor, 3> recv_slot_;
  std::array<PendingUnit, 3> pending_{};
  size_t bucket_bytes_;
  uint32_t bucket_elem_bytes_ = 0;  // buckets_ built for this element size
  std::vector<Bucket> buckets_;     // backward order; empty: one call at the end
  size_t next_bucket_ = 0;
  std::vector<CommTicket> bucket_tickets_;
};

// The ZeroPlan tensor list of a model layout (names, sizes, stacking).
std::vector<ParamTensorSpec> zero_tensor_specs(const ParamLayout& layout);

// The communicated type of a float buffer by element size: 4 -> kFloat32,
// 2 -> kBFloat16 (the CUDA backend's bf16 storage); else std::runtime_error.
DataType comm_data_type(uint32_t elem_bytes);

}  // namespace gpt2

#endif  // TRAIN_DATA_PARALLEL_H

// AdamW over a contiguous range [begin, end) of the flat parameter buffer:
// the whole model on one rank, or this rank's ZeRO shard. Weight decay follows
// the tensor each element belongs to (ParamLayout::decays).
//
// Offloaded (--offload-optimizer cpu, ZeRO-Offload): the moments and an fp32
// copy of the parameters live on a host backend, which runs the update; each
// step the gradients come down (widened exactly), and the updated copy goes
// back up, rounded to the parameters' type as the device kernel rounds its
// master. Both backends evaluate AdamW's expressions with the same roundings
// (backend/cuda/adamw.cuh), so the weights are the on-device optimizer's.
// The step is a pipeline of chunks: while the host updates chunk c, the
// gradients of chunks c + 1 and c + 2 are on their way down and chunk c - 1's
// weights on their way up (Backend::download_async; the copy and the landed
// gradients pinned).
// The next forward still waits for the last chunk: it needs its parameters.
#ifndef TRAIN_OPTIMIZER_H
#define TRAIN_OPTIMIZER_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "train/options.h"

namespace gpt2 {

class AdamW {
 public:
  // `host`: the backend holding the state and running the update when
  // offloaded (it must outlive the optimizer); nullptr keeps it on `backend`.
  AdamW(Backend& backend, const ParamLayout& layout, size_t begin, size_t end, Backend* host = nullptr);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // `params` below: the parameters [begin, end) (DataParallel::shard_params).
  // Parameters stored below fp32 (bf16) get an fp32 master copy, initialised
  // from `params`: AdamW updates it and rounds it into params. A no-op for
  // fp32 parameters.
  void attach_master(Tensor params);
  // attach_master's allocation alone (the memory plan of --dry-run).
  void reserve_master(Tensor params);
  bool has_master() const { return !master_.empty(); }

  // params, shard_grads: parameters and gradients of [begin, end) (element 0 =
  // parameter `begin`). t is the 1-based step for bias correction.
  // `clip`: the kScalar64 clip state (DataParallel::clip_state): its scale
  // multiplies the gradients on the device, and NaN there skips the update.
  void step(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h);

  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  size_t numel() const { return end_ - begin_; }
  bool offloaded() const { return host_ != nullptr; }
  // Optimizer memory on the device (offloaded: bf16's transfer chunk), and
  // (offloaded) on the host: the state and the gradients' landing buffer.
  size_t state_bytes() const { return offloaded() ? via_.bytes() : host_state_bytes_of(); }
  size_t host_bytes() const { return offloaded() ? 4 * numel() * sizeof(float) : 0; }
  // The offload's pipeline chunk, in elements.
  static constexpr size_t kOffloadChunk = size_t{1} << 22;
  // Host copies of the moments (and master weights, empty without), for checkpoints.
  void get_state(std::vector<float>* m, std::vector<float>* v, std::vector<float>* master) const;
  // `master` may be empty: keep the master attached from the parameters.
  void set_state(const std::vector<float>& m, const std::vector<float>& v, const std::vector<float>& master);

 private:
  size_t host_state_bytes_of() const { return (has_master() ? 3 : 2) * numel() * sizeof(float); }
  Backend& state_backend() const { return host_ ? *host_ : backend_; }
  void step_offloaded(Tensor params, Tensor shard_grads, float lr, Tensor clip, int t, const AdamWHyper& h);
  // One update call per (tensor ∩ [lo, hi)), relative to begin, so each piece
  // gets its own decay.
  template <class Update>
  void for_each_piece(size_t lo, size_t hi, Update update) const;

  Backend& backend_;
  Backend* const host_;
  const ParamLayout layout_;
  size_t begin_, end_;
  Tensor m_, v_, master_;  // on state_backend(); offloaded, master_ is the fp32 copy at any precision
  // Offloaded: one pinned host block, the copy (master_) then the landed
  // gradients (host_grads_); via_, the device's fp32 chunk for bf16 transfers.
  Tensor host_io_, host_grads_, via_;
  bool pinned_ = false;
  uint64_t uploaded_ = 0;  // the mark behind the last step's uploads
  size_t chunk_ = kOffloadChunk;
  bool drop_landing_wait_ = false;  // test hook GPT2_TEST_DROP_OFFLOAD_WAIT
  bool fp32_copy_ = false;  // offloaded fp32 parameters: master_ is their exact copy
};

}  // namespace gpt2

#endif  // TRAIN_OPTIMIZER_H

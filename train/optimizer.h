// AdamW over a contiguous range [begin, end) of the flat parameter buffer:
// the whole model on one rank, or this rank's ZeRO shard. Weight decay follows
// the tensor each element belongs to (ParamLayout::decays).
#ifndef TRAIN_OPTIMIZER_H
#define TRAIN_OPTIMIZER_H

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "model/gpt2.h"
#include "train/options.h"

namespace gpt2 {

class AdamW {
 public:
  AdamW(Backend& backend, const ParamLayout& layout, size_t begin, size_t end);
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
  size_t state_bytes() const { return (has_master() ? 3 : 2) * numel() * sizeof(float); }
  // Host copies of the moments (and master weights, empty without), for checkpoints.
  void get_state(std::vector<float>* m, std::vector<float>* v, std::vector<float>* master) const;
  // `master` may be empty: keep the master attached from the parameters.
  void set_state(const std::vector<float>& m, const std::vector<float>& v, const std::vector<float>& master);

 private:
  Backend& backend_;
  const ParamLayout layout_;
  size_t begin_, end_;
  Tensor m_, v_, master_;
};

}  // namespace gpt2

#endif  // TRAIN_OPTIMIZER_H

// ZeRO-3's parameters. This rank keeps only its shard of the padded flat
// buffer (ZeroPlan::shard); the model reads views (ParamSource) filled just
// before they are used:
//   - a layer's twelve tensors are all-gathered into a unit buffer ("slot"),
//     packed as ZeroPlan packs the unit (its ranges in flat order, so every
//     rank's part is one block: Communicator::all_gather_v in place). Layer l
//     takes slot l % slots and stays there until another layer needs the
//     slot, so the forward's next layer and the backward's first layers are
//     not gathered twice;
//   - wte, wpe, lnfw and lnfb are gathered once after every update and stay
//     whole: the embedding, the head and the tied gradient read them at both
//     ends of every micro-step. They are what a rank holds beyond its shard
//     and the slots (GPT-2 XL: 5% of the parameters).
// Where the communicator overlaps (Communicator::overlaps: NCCL at world > 1,
// MPI's non-blocking gather) the next layer in the direction of travel is
// gathered while this one computes (three slots); else every gather completes
// before the compute that reads it (two).
// The gathered values are the shard's bits, so the forward and backward are
// bitwise those of stages 0-2.
#ifndef TRAIN_ZERO_PARAMS_H
#define TRAIN_ZERO_PARAMS_H

#include <array>
#include <vector>

#include "backend/backend.h"
#include "distributed/comm.h"
#include "distributed/zero_plan.h"
#include "model/gpt2.h"
#include "train/zero_staging.h"

namespace gpt2 {

class ZeroParams final : public ParamSource {
 public:
  // Allocates the shard, the whole tensors and the slots; no communication.
  // `plan` must outlive it (DataParallel owns both).
  ZeroParams(Backend& backend, Communicator& comm, const ZeroPlan& plan, const ParamLayout& layout);
  ZeroParams(Backend&, Communicator&, ZeroPlan&&, const ParamLayout&) = delete;
  ~ZeroParams() override;
  ZeroParams(const ZeroParams&) = delete;
  ZeroParams& operator=(const ZeroParams&) = delete;

  Tensor shard() const { return shard_; }  // plan.shard_size() elements, padding zero
  ParamTensors views(int l) override;
  // Uploads this rank's part of `host`, then refresh().
  void set_parameters(const std::vector<float>& host) override;
  // Every rank gets all of them: the whole tensors as they are, each layer
  // gathered through slot 0.
  std::vector<float> get_parameters() override;
  // After the shard changed (the optimizer): the whole tensors gathered anew,
  // the gathered layers forgotten.
  void refresh();
  size_t bytes() const;

 private:
  struct Slot {
    Tensor buffer;
    int layer = -1;       // -1: holds nothing current
    CommTicket ticket = 0;  // its gather, when still in flight
  };
  // Copies this rank's pieces of unit u into `packed` at their pack offsets,
  // then all-gathers the unit there (asynchronously when `async`).
  CommTicket gather_unit(int u, Tensor packed, bool async);
  Slot& slot_of(int l) { return slots_[static_cast<size_t>(l) % num_slots_]; }
  void ensure_gathered(int l, bool ahead);
  ParamTensors gathered_views(int l);  // layer l's slot (gathered) and the whole tensors
  void forget_layers();

  Backend& backend_;
  Communicator& comm_;
  const ZeroPlan& plan_;
  const ParamLayout layout_;
  const bool overlap_;
  const size_t num_slots_;
  Tensor shard_;
  Tensor whole_;  // wte, then the rest unit packed (wpe, lnfw, lnfb)
  std::array<Slot, 3> slots_;
  ParamTensors whole_views_;  // wte, wpe, lnfw, lnfb inside whole_ (the others empty)
  int last_layer_ = 0;
  bool upward_ = true;  // the direction the layers were last asked for in
  bool drop_wait_ = false;  // test hook GPT2_TEST_DROP_REUSE_WAIT=gather
};

}  // namespace gpt2

#endif  // TRAIN_ZERO_PARAMS_H

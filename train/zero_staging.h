// ZeRO-2's gradient staging, what the backward writes into in place of a full
// gradient buffer: one layer's unit buffer at a
// time (two used alternately, layer l in buffer l % 2, when one's exchange may
// still read it while the next layer's backward writes the other), and the
// rest unit (wpe, lnfw, lnfb). Each buffer holds its unit packed as ZeroPlan
// lays it out (ranges concatenated in flat order): the unit's reduce-scatter
// send buffer as it stands. The tied wte gradient's chunk units, built by the
// caller after the backward (GPT2::wte_grad_chunk), take the layer buffers in
// turn (chunk k in buffer k % 2): the whole V x C table is never staged.
#ifndef TRAIN_ZERO_STAGING_H
#define TRAIN_ZERO_STAGING_H

#include <array>

#include "backend/backend.h"
#include "distributed/zero_plan.h"
#include "model/gpt2.h"

namespace gpt2 {

class ZeroStaging {
 public:
  // `layer_buffers`: 1, or 2 to alternate. Buffers are of the backend's
  // gradient type. `plan` must outlive the staging (DataParallel owns both).
  ZeroStaging(Backend& backend, const ZeroPlan& plan, const ParamLayout& layout, int layer_buffers);
  ZeroStaging(Backend&, ZeroPlan&&, const ParamLayout&, int) = delete;
  ~ZeroStaging();
  ZeroStaging(const ZeroStaging&) = delete;
  ZeroStaging& operator=(const ZeroStaging&) = delete;

  // Zeroes the buffer of layer l's unit (l = -1: the rest unit's) and returns
  // the views of its tensors in the plan's packing, for the backward to add
  // into. kWte stays empty: its chunks are made after the backward.
  ParamTensors begin_unit(int l);
  // The packed send buffer of plan unit u (layer, rest or wte chunk), and
  // which buffer that is: layer buffer 0 or 1, or 2 for the rest.
  Tensor unit(int u) const;
  int buffer_of(int u) const;
  static constexpr int kRestBuffer = 2;
  size_t bytes() const;

 private:
  Backend& backend_;
  const ZeroPlan& plan_;
  const ParamLayout layout_;
  const int layer_buffers_;
  std::array<Tensor, 3> buffers_;  // layer buffers 0, 1 (one when not alternating), the rest
};

// The tensors of a buffer holding a plan unit packed (its ranges concatenated
// in flat order): layer l's twelve (l >= 0) or the rest unit's wpe, lnfw and
// lnfb (l = -1); the other entries empty.
ParamTensors unit_views(const ZeroPlan& plan, const ParamLayout& layout, Tensor packed, int l);

}  // namespace gpt2

#endif  // TRAIN_ZERO_STAGING_H

#include "train/zero_params.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <string>

#include "train/data_parallel.h"
#include "util/test_hook.h"

namespace gpt2 {

ZeroParams::ZeroParams(Backend& backend, Communicator& comm, const ZeroPlan& plan, const ParamLayout& layout)
    : backend_(backend),
      comm_(comm),
      plan_(plan),
      layout_(layout),
      overlap_(comm.overlaps()),
      num_slots_(overlap_ ? 3 : 2) {
  if (layout.num_layers < 1 || plan.num_layers() != layout.num_layers)
    throw std::runtime_error("ZeRO-3: the plan's layer units disagree with the model");
  shard_ = backend_.alloc(plan_.shard_size(), BufferRole::kParams);
  backend_.zero(shard_);
  whole_ = backend_.alloc(layout_.numel[kWte] + plan_.unit(plan_.rest_unit()).numel, BufferRole::kParams);
  for (size_t i = 0; i < num_slots_; i++) slots_[i].buffer = backend_.alloc(plan_.unit(0).numel, BufferRole::kParams);
  whole_views_ = unit_views(plan_, layout_, whole_.slice(layout_.numel[kWte], plan_.unit(plan_.rest_unit()).numel), -1);
  whole_views_[kWte] = whole_.slice(0, layout_.numel[kWte]);
  // Tests only: the compute stream reads a layer gathered ahead without
  // waiting for it, which the deferred stream emulation must catch.
  drop_wait_ = test_hook_drops_wait("GPT2_TEST_DROP_REUSE_WAIT", "gather", "rank " + std::to_string(comm.rank()) + ": ",
                                    "the wait for a ZeRO-3 layer gathered ahead");
}

ZeroParams::~ZeroParams() {
  // A gather still in flight writes into a slot (MPI: and must complete before
  // MPI_Finalize); after an error the job is being torn down anyway.
  if (std::uncaught_exceptions() == 0)
    for (Slot& s : slots_)
      if (s.ticket) comm_.wait(s.ticket);
  for (Tensor* t : {&shard_, &whole_, &slots_[0].buffer, &slots_[1].buffer, &slots_[2].buffer})
    if (!t->empty()) backend_.free(*t);
}

size_t ZeroParams::bytes() const {
  size_t n = shard_.bytes() + whole_.bytes();
  for (const Slot& s : slots_) n += s.buffer.bytes();
  return n;
}

ParamTensors ZeroParams::gathered_views(int l) {
  ParamTensors v = unit_views(plan_, layout_, slot_of(l).buffer, l);
  for (int t = 0; t < kNumParamTensors; t++)
    if (!ParamLayout::is_per_layer(t)) v[t] = whole_views_[t];
  return v;
}

CommTicket ZeroParams::gather_unit(int u, Tensor packed, bool async) {
  const UnitExchange& ex = plan_.unit(u);
  const size_t me = static_cast<size_t>(comm_.rank());
  for (size_t p = ex.first_piece_of_rank[me]; p < ex.first_piece_of_rank[me + 1]; p++) {
    const ExchangePiece& piece = ex.pieces[p];
    const size_t n = piece.global.size();
    backend_.copy(packed.slice(piece.pack_offset, n), shard_.slice(piece.shard_offset, n));
  }
  const ProfileRange range(backend_, "zero-3 gather unit " + std::to_string(u) + " (collective)");
  if (async) comm_.begin_async();
  comm_.all_gather_v(packed.ptr, ex.counts, comm_data_type(packed.elem_bytes));
  return async ? comm_.end_async() : 0;
}

// A slot whose earlier gather is still in flight is waited for before it is
// written again; `ahead` leaves the new gather in flight.
void ZeroParams::ensure_gathered(int l, bool ahead) {
  Slot& s = slot_of(l);
  if (s.layer != l) {
    if (s.ticket) comm_.wait(s.ticket);
    s.ticket = gather_unit(l, s.buffer.slice(0, plan_.unit(l).numel), ahead);
    s.layer = l;
  }
  if (!ahead && s.ticket) {
    if (!drop_wait_) comm_.wait(s.ticket);
    s.ticket = 0;
  }
}

ParamTensors ZeroParams::views(int l) {
  if (l < 0 || l >= layout_.num_layers) throw std::runtime_error("ZeRO-3: no layer " + std::to_string(l));
  if (l != last_layer_) upward_ = l > last_layer_;
  last_layer_ = l;
  ensure_gathered(l, false);
  const int ahead = upward_ ? l + 1 : l - 1;
  if (overlap_ && ahead >= 0 && ahead < layout_.num_layers) ensure_gathered(ahead, true);
  return gathered_views(l);
}

void ZeroParams::forget_layers() {
  for (Slot& s : slots_) s.layer = -1;  // a gather still in flight is waited for before reuse
}

void ZeroParams::refresh() {
  forget_layers();
  const int rest = plan_.rest_unit();
  gather_unit(rest, whole_.slice(layout_.numel[kWte], plan_.unit(rest).numel), false);
  for (int k = 0; k < plan_.num_chunk_units(); k++) {
    const UnitExchange& ex = plan_.unit(plan_.first_chunk_unit() + k);
    gather_unit(plan_.first_chunk_unit() + k, whole_.slice(ex.ranges.front().begin, ex.numel), false);
  }
}

void ZeroParams::set_parameters(const std::vector<float>& host) {
  if (host.size() != layout_.total) throw std::runtime_error("ZeRO-3: set_parameters of the wrong size");
  backend_.zero(shard_);
  const ElemRange mine = plan_.shard(comm_.rank());
  const size_t end = std::min(mine.end, layout_.total);
  if (end > mine.begin) backend_.upload(shard_.slice(0, end - mine.begin), host.data() + mine.begin);
  refresh();
}

std::vector<float> ZeroParams::get_parameters() {
  std::vector<float> host(layout_.total);
  for (int l = 0; l < layout_.num_layers; l++) {
    ensure_gathered(l, false);
    const ParamTensors v = gathered_views(l);
    for (int t = 0; t < kNumParamTensors; t++) {
      if (!ParamLayout::is_per_layer(t) && l > 0) continue;  // the whole tensors once
      backend_.download(host.data() + (ParamLayout::is_per_layer(t) ? layout_.layer_offset(t, l) : layout_.offset[t]),
                        v[t]);
    }
  }
  return host;
}

}  // namespace gpt2

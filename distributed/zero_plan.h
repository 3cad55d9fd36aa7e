// ZeRO sharding plan: pure bookkeeping over the flat parameter buffer, no
// communication and no memory.
//
// The model's parameters live in one flat buffer, tensor after tensor in the
// model's order (llm.c's order: wte, wpe, ln1w, ..., lnfb). Tensors stacked
// over layers (ln1w is [L, C]) hold layer l's slice at [l*numel/L, (l+1)*numel/L)
// of the tensor. The plan:
//   * pads the flat size up so it splits into `world` equal shards (any
//     parameter count and world size works; padding elements are zero in
//     params, grads and optimizer state and never change);
//   * gives rank r the shard [r*S, (r+1)*S) of the padded range, S = shard size;
//   * groups the gradient into backward "units": unit l < L is layer l (one
//     range per stacked tensor), unit L ("rest") is every tensor not stacked
//     over layers (embeddings, final layernorm) except those given a chunk
//     size: each of those is cut into "chunk units" L+1, L+2, ... of
//     chunk_elems elements (the tied token embedding, exchanged in vocabulary
//     chunks so ZeRO-2 never stages it whole). For ZeRO-2 each unit comes with
//     the exchange that hands its finished gradients to their owners in one
//     Communicator::reduce_scatter_v:
//       send buffer  = pieces packed in owner-rank order (pack_offset)
//       counts[r]    = how many of the unit's elements rank r owns
//       rank r's recv: its pieces, in order; piece p then adds into the owner's
//                      shard at shard_offset.
//     Shards are contiguous and ascending in rank, so owner order is flat
//     order: the packed buffer is simply the unit's ranges concatenated in
//     ascending order (pack_offset = position in that concatenation). A
//     staging buffer holding the unit's gradients in flat order needs no
//     packing copy.
#ifndef DISTRIBUTED_ZERO_PLAN_H
#define DISTRIBUTED_ZERO_PLAN_H

#include <cstddef>
#include <string>
#include <vector>

namespace gpt2 {

struct ParamTensorSpec {
  std::string name;
  size_t numel = 0;
  int num_layers = 0;  // > 0: stacked over this many layers (numel divisible by it); 0: not per layer
  size_t chunk_elems = 0;  // > 0 (only when num_layers == 0): own units of this many elements, the last shorter
};

struct ElemRange {
  size_t begin = 0;
  size_t end = 0;  // exclusive
  size_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const ElemRange& o) const { return begin == o.begin && end == o.end; }
};

// A part of a unit's gradient owned by one rank.
struct ExchangePiece {
  int owner = 0;
  ElemRange global;         // in the flat (padded) parameter buffer
  size_t pack_offset = 0;   // where it sits in the unit's packed send buffer
  size_t shard_offset = 0;  // where it lands inside the owner's shard
};

struct UnitExchange {
  std::vector<ElemRange> ranges;      // the unit's gradient ranges, ascending, disjoint
  size_t numel = 0;                   // total elements of the unit
  std::vector<ExchangePiece> pieces;  // sorted by (owner, global.begin); tile `ranges`
  std::vector<size_t> counts;         // per rank: elements of the unit it owns
  std::vector<int> touched_ranks;     // ranks with counts > 0, ascending
  // Index of rank r's first piece in `pieces` (pieces of r are consecutive), for r in [0, world].
  std::vector<size_t> first_piece_of_rank;
  // Where flat element `global` (inside `ranges`) sits in the packed send
  // buffer: the ranges concatenated. Throws for an element of another unit.
  size_t packed_position(size_t global) const;
};

class ZeroPlan {
 public:
  // `shard_alignment`: each shard's size is a multiple of this many elements
  // (1 for the CPU backend; a device backend may want 16-byte aligned shards).
  // Throws std::runtime_error on a world < 1, alignment < 1, or a stacked
  // tensor whose numel is not divisible by its layer count or whose layer count
  // differs from another stacked tensor's.
  ZeroPlan(std::vector<ParamTensorSpec> tensors, int world, size_t shard_alignment = 1);

  int world() const { return world_; }
  size_t num_params() const { return num_params_; }  // real elements
  size_t padded_size() const { return shard_size_ * static_cast<size_t>(world_); }
  size_t padding() const { return padded_size() - num_params_; }
  size_t shard_size() const { return shard_size_; }
  ElemRange shard(int rank) const;
  int owner_of(size_t element) const;  // element < padded_size()

  size_t num_tensors() const { return tensors_.size(); }
  const ParamTensorSpec& tensor(size_t i) const { return tensors_[i]; }
  ElemRange tensor_range(size_t i) const;  // in the flat buffer

  int num_layers() const { return num_layers_; }  // 0 when no tensor is stacked
  // Units: 0..num_layers()-1 are layers, num_layers() is the rest (may be
  // empty), then the chunk units in tensor order.
  int num_units() const { return static_cast<int>(units_.size()); }
  int rest_unit() const { return num_layers_; }
  int first_chunk_unit() const { return num_layers_ + 1; }
  int num_chunk_units() const { return num_units() - first_chunk_unit(); }
  const UnitExchange& unit(int u) const;

  // Part of `range` that lies in rank r's shard, as an offset range inside the
  // shard (empty when none): the elements of a tensor rank r updates.
  ElemRange local_part(int rank, ElemRange range) const;

 private:
  std::vector<ParamTensorSpec> tensors_;
  std::vector<size_t> offsets_;
  int world_ = 1;
  int num_layers_ = 0;
  size_t num_params_ = 0;
  size_t shard_size_ = 0;
  std::vector<UnitExchange> units_;
};

// A short table: flat size, padding, shard size and each rank's range.
std::string describe_plan(const ZeroPlan& plan);

}  // namespace gpt2

#endif  // DISTRIBUTED_ZERO_PLAN_H

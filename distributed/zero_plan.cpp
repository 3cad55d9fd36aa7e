#include "distributed/zero_plan.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace gpt2 {

ZeroPlan::ZeroPlan(std::vector<ParamTensorSpec> tensors, int world, size_t shard_alignment)
    : tensors_(std::move(tensors)), world_(world) {
  if (world < 1)
    throw std::runtime_error("distributed/zero_plan.cpp: world size " + std::to_string(world) +
                             " (must be >= 1)");
  if (shard_alignment < 1)
    throw std::runtime_error("distributed/zero_plan.cpp: shard alignment must be >= 1");
  for (const ParamTensorSpec& t : tensors_) {
    if (t.num_layers < 0)
      throw std::runtime_error("distributed/zero_plan.cpp: tensor " + t.name + " has " +
                               std::to_string(t.num_layers) + " layers");
    if (t.num_layers > 0) {
      if (t.numel % static_cast<size_t>(t.num_layers) != 0)
        throw std::runtime_error("distributed/zero_plan.cpp: tensor " + t.name + " has " +
                                 std::to_string(t.numel) + " elements, not divisible by its " +
                                 std::to_string(t.num_layers) + " layers");
      if (num_layers_ != 0 && num_layers_ != t.num_layers)
        throw std::runtime_error("distributed/zero_plan.cpp: tensor " + t.name + " is stacked over " +
                                 std::to_string(t.num_layers) + " layers, others over " +
                                 std::to_string(num_layers_));
      num_layers_ = t.num_layers;
      if (t.chunk_elems != 0)
        throw std::runtime_error("distributed/zero_plan.cpp: tensor " + t.name +
                                 " is stacked over layers and cannot also be chunked");
    }
    offsets_.push_back(num_params_);
    num_params_ += t.numel;
  }
  // Smallest shard that covers num_params_ / world, rounded up to the alignment.
  const size_t w = static_cast<size_t>(world_);
  const size_t per_rank = (num_params_ + w - 1) / w;
  shard_size_ = (per_rank + shard_alignment - 1) / shard_alignment * shard_alignment;

  // Gradient ranges of each unit, ascending (tensors are laid out in order);
  // chunk units follow the layers and the rest.
  units_.resize(static_cast<size_t>(num_layers_ + 1));
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const ParamTensorSpec& t = tensors_[i];
    if (t.numel == 0) continue;
    if (t.chunk_elems > 0) {
      for (size_t b = 0; b < t.numel; b += t.chunk_elems) {
        units_.emplace_back();
        units_.back().ranges.push_back({offsets_[i] + b, offsets_[i] + std::min(t.numel, b + t.chunk_elems)});
      }
      continue;
    }
    if (t.num_layers == 0) {
      units_[static_cast<size_t>(rest_unit())].ranges.push_back(
          {offsets_[i], offsets_[i] + t.numel});
      continue;
    }
    const size_t per_layer = t.numel / static_cast<size_t>(t.num_layers);
    for (int l = 0; l < t.num_layers; ++l) {
      const size_t b = offsets_[i] + per_layer * static_cast<size_t>(l);
      units_[static_cast<size_t>(l)].ranges.push_back({b, b + per_layer});
    }
  }
  // Cut every range at shard boundaries; group the pieces by owner.
  for (UnitExchange& u : units_) {
    u.counts.assign(w, 0);
    for (const ElemRange& r : u.ranges) {
      u.numel += r.size();
      size_t pos = r.begin;
      while (pos < r.end) {
        const int owner = owner_of(pos);
        const size_t stop = std::min(r.end, shard(owner).end);
        u.pieces.push_back({owner, {pos, stop}, 0, pos - shard(owner).begin});
        pos = stop;
      }
    }
    std::stable_sort(u.pieces.begin(), u.pieces.end(),
                     [](const ExchangePiece& a, const ExchangePiece& b) {
                       return a.owner != b.owner ? a.owner < b.owner
                                                 : a.global.begin < b.global.begin;
                     });
    u.first_piece_of_rank.assign(w + 1, 0);
    size_t packed = 0;
    for (size_t p = 0; p < u.pieces.size(); ++p) {
      ExchangePiece& piece = u.pieces[p];
      piece.pack_offset = packed;
      packed += piece.global.size();
      u.counts[static_cast<size_t>(piece.owner)] += piece.global.size();
    }
    // first_piece_of_rank[r] = number of pieces owned by ranks < r.
    for (const ExchangePiece& piece : u.pieces)
      for (size_t r = static_cast<size_t>(piece.owner) + 1; r <= w; ++r)
        u.first_piece_of_rank[r] += 1;
    for (int r = 0; r < world_; ++r)
      if (u.counts[static_cast<size_t>(r)] > 0) u.touched_ranks.push_back(r);
  }
}

size_t UnitExchange::packed_position(size_t global) const {
  size_t packed = 0;
  for (const ElemRange& r : ranges) {
    if (global >= r.begin && global < r.end) return packed + (global - r.begin);
    packed += r.size();
  }
  throw std::runtime_error("distributed/zero_plan.cpp: element " + std::to_string(global) + " is not in this unit");
}

ElemRange ZeroPlan::shard(int rank) const {
  if (rank < 0 || rank >= world_)
    throw std::runtime_error("distributed/zero_plan.cpp: rank " + std::to_string(rank) +
                             " outside world of " + std::to_string(world_));
  const size_t b = shard_size_ * static_cast<size_t>(rank);
  return {b, b + shard_size_};
}

int ZeroPlan::owner_of(size_t element) const {
  if (element >= padded_size())
    throw std::runtime_error("distributed/zero_plan.cpp: element " + std::to_string(element) +
                             " outside padded size " + std::to_string(padded_size()));
  return static_cast<int>(element / shard_size_);
}

ElemRange ZeroPlan::tensor_range(size_t i) const {
  if (i >= tensors_.size())
    throw std::runtime_error("distributed/zero_plan.cpp: tensor index " + std::to_string(i) +
                             " out of " + std::to_string(tensors_.size()));
  return {offsets_[i], offsets_[i] + tensors_[i].numel};
}

const UnitExchange& ZeroPlan::unit(int u) const {
  if (u < 0 || u >= num_units())
    throw std::runtime_error("distributed/zero_plan.cpp: unit " + std::to_string(u) + " out of " +
                             std::to_string(num_units()));
  return units_[static_cast<size_t>(u)];
}

ElemRange ZeroPlan::local_part(int rank, ElemRange range) const {
  const ElemRange s = shard(rank);
  const size_t b = std::max(s.begin, range.begin);
  const size_t e = std::min(s.end, range.end);
  if (b >= e) return {0, 0};
  return {b - s.begin, e - s.begin};
}

std::string describe_plan(const ZeroPlan& plan) {
  std::ostringstream out;
  out << "zero plan: " << plan.num_params() << " params, padded to " << plan.padded_size()
      << " (+" << plan.padding() << "), " << plan.world() << " shards of " << plan.shard_size()
      << "\n";
  for (int r = 0; r < plan.world(); ++r) {
    const ElemRange s = plan.shard(r);
    out << "  rank " << r << ": [" << s.begin << ", " << s.end << ")\n";
  }
  return out.str();
}

}  // namespace gpt2

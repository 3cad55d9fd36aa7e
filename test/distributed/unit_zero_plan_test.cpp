// ZeRO plan: exact small cases worked out by hand, then randomized tables and
// world sizes checked against an independent recomputation of every invariant.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "distributed/zero_plan.h"

namespace gpt2 {
namespace {

// a: 2 layers x 2, b: 2 layers x 3, c: not per layer. Flat: a [0,4) b [4,10) c [10,13).
std::vector<ParamTensorSpec> small_table() {
  return {{"a", 4, 2}, {"b", 6, 2}, {"c", 3, 0}};
}

TEST(ZeroPlan, PadsToEqualShards) {
  ZeroPlan plan(small_table(), 3);
  EXPECT_EQ(plan.num_params(), 13u);
  EXPECT_EQ(plan.shard_size(), 5u);  // ceil(13 / 3)
  EXPECT_EQ(plan.padded_size(), 15u);
  EXPECT_EQ(plan.padding(), 2u);
  EXPECT_EQ(plan.shard(0), (ElemRange{0, 5}));
  EXPECT_EQ(plan.shard(1), (ElemRange{5, 10}));
  EXPECT_EQ(plan.shard(2), (ElemRange{10, 15}));
  EXPECT_EQ(plan.owner_of(4), 0);
  EXPECT_EQ(plan.owner_of(5), 1);
  EXPECT_EQ(plan.owner_of(14), 2);  // padding is owned too
  EXPECT_THROW(plan.owner_of(15), std::runtime_error);
}

TEST(ZeroPlan, NoPaddingWhenDivisibleAndAlignmentRoundsUp) {
  ZeroPlan exact({{"x", 12, 0}}, 4);
  EXPECT_EQ(exact.shard_size(), 3u);
  EXPECT_EQ(exact.padding(), 0u);
  ZeroPlan aligned({{"x", 13, 0}}, 4, 8);
  EXPECT_EQ(aligned.shard_size(), 8u);  // ceil(13/4) = 4 -> 8
  EXPECT_EQ(aligned.padded_size(), 32u);
  ZeroPlan more_ranks_than_params({{"x", 2, 0}}, 5);
  EXPECT_EQ(more_ranks_than_params.shard_size(), 1u);
  EXPECT_EQ(more_ranks_than_params.padded_size(), 5u);
  EXPECT_EQ(more_ranks_than_params.unit(0).touched_ranks, (std::vector<int>{0, 1}));
}

TEST(ZeroPlan, LayerUnitsByHand) {
  ZeroPlan plan(small_table(), 3);
  ASSERT_EQ(plan.num_layers(), 2);
  ASSERT_EQ(plan.num_units(), 3);
  // Layer 0: a[0,2) and b[4,7); shard 0 is [0,5), shard 1 is [5,10).
  const UnitExchange& u0 = plan.unit(0);
  EXPECT_EQ(u0.ranges, (std::vector<ElemRange>{{0, 2}, {4, 7}}));
  EXPECT_EQ(u0.numel, 5u);
  ASSERT_EQ(u0.pieces.size(), 3u);
  EXPECT_EQ(u0.pieces[0].owner, 0);
  EXPECT_EQ(u0.pieces[0].global, (ElemRange{0, 2}));
  EXPECT_EQ(u0.pieces[0].pack_offset, 0u);
  EXPECT_EQ(u0.pieces[0].shard_offset, 0u);
  EXPECT_EQ(u0.pieces[1].owner, 0);
  EXPECT_EQ(u0.pieces[1].global, (ElemRange{4, 5}));
  EXPECT_EQ(u0.pieces[1].pack_offset, 2u);
  EXPECT_EQ(u0.pieces[1].shard_offset, 4u);
  EXPECT_EQ(u0.pieces[2].owner, 1);
  EXPECT_EQ(u0.pieces[2].global, (ElemRange{5, 7}));
  EXPECT_EQ(u0.pieces[2].pack_offset, 3u);
  EXPECT_EQ(u0.pieces[2].shard_offset, 0u);
  EXPECT_EQ(u0.counts, (std::vector<size_t>{3, 2, 0}));
  EXPECT_EQ(u0.touched_ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(u0.first_piece_of_rank, (std::vector<size_t>{0, 2, 3, 3}));
  // Layer 1: a[2,4) -> rank 0, b[7,10) -> rank 1 at shard offset 2.
  const UnitExchange& u1 = plan.unit(1);
  EXPECT_EQ(u1.ranges, (std::vector<ElemRange>{{2, 4}, {7, 10}}));
  EXPECT_EQ(u1.counts, (std::vector<size_t>{2, 3, 0}));
  ASSERT_EQ(u1.pieces.size(), 2u);
  EXPECT_EQ(u1.pieces[1].global, (ElemRange{7, 10}));
  EXPECT_EQ(u1.pieces[1].shard_offset, 2u);
  // Rest: c[10,13) entirely on rank 2.
  const UnitExchange& rest = plan.unit(plan.rest_unit());
  EXPECT_EQ(rest.ranges, (std::vector<ElemRange>{{10, 13}}));
  EXPECT_EQ(rest.counts, (std::vector<size_t>{0, 0, 3}));
  EXPECT_EQ(rest.touched_ranks, (std::vector<int>{2}));
  // Tensor b seen from each rank.
  EXPECT_EQ(plan.local_part(0, plan.tensor_range(1)), (ElemRange{4, 5}));
  EXPECT_EQ(plan.local_part(1, plan.tensor_range(1)), (ElemRange{0, 5}));
  EXPECT_TRUE(plan.local_part(2, plan.tensor_range(1)).empty());
}

TEST(ZeroPlan, RejectsInconsistentTables) {
  EXPECT_THROW(ZeroPlan(small_table(), 0), std::runtime_error);
  EXPECT_THROW(ZeroPlan(small_table(), 2, 0), std::runtime_error);
  EXPECT_THROW(ZeroPlan({{"a", 5, 2}}, 2), std::runtime_error);  // 5 not divisible by 2
  EXPECT_THROW(ZeroPlan({{"a", 4, 2}, {"b", 6, 3}}, 2), std::runtime_error);
  ZeroPlan plan(small_table(), 2);
  EXPECT_THROW(plan.shard(2), std::runtime_error);
  EXPECT_THROW(plan.unit(3), std::runtime_error);
}

TEST(ZeroPlan, Gpt2SmallTableShardsEvenly) {
  // GPT-2 124M in llm.c's order with the vocabulary padded to 50304.
  const size_t V = 50304, T = 1024, C = 768;
  const int L = 12;
  const size_t l = static_cast<size_t>(L);
  std::vector<ParamTensorSpec> table = {
      {"wte", V * C, 0},          {"wpe", T * C, 0},           {"ln1w", l * C, L},
      {"ln1b", l * C, L},         {"qkvw", l * 3 * C * C, L},  {"qkvb", l * 3 * C, L},
      {"attprojw", l * C * C, L}, {"attprojb", l * C, L},      {"ln2w", l * C, L},
      {"ln2b", l * C, L},         {"fcw", l * 4 * C * C, L},   {"fcb", l * 4 * C, L},
      {"fcprojw", l * C * 4 * C, L}, {"fcprojb", l * C, L},    {"lnfw", C, 0},
      {"lnfb", C, 0}};
  for (int world : {1, 2, 3, 5, 8, 64}) {
    ZeroPlan plan(table, world);
    EXPECT_EQ(plan.num_params(), 124475904u);
    EXPECT_LT(plan.padding(), static_cast<size_t>(world));
    size_t per_layer = 0;
    for (int u = 0; u < L; ++u) {
      per_layer = plan.unit(u).numel;
      EXPECT_EQ(per_layer, 12 * C * C + 13 * C) << "layer " << u;
      EXPECT_EQ(plan.unit(u).ranges.size(), 12u);
    }
    EXPECT_EQ(plan.unit(plan.rest_unit()).numel, V * C + T * C + 2 * C);
  }
  // ZeRO-2's table: wte in chunks of 9216 rows (ParamLayout::wte_chunk_rows for
  // d12) leaves wpe and the final layernorm in the rest unit.
  table[0].chunk_elems = 9216 * C;
  const ZeroPlan plan(table, 8);
  ASSERT_EQ(plan.num_chunk_units(), 6);
  ASSERT_EQ(plan.first_chunk_unit(), static_cast<int>(L) + 1);
  EXPECT_EQ(plan.unit(plan.rest_unit()).numel, T * C + 2 * C);
  for (int k = 0; k < 6; ++k) {
    const UnitExchange& ex = plan.unit(plan.first_chunk_unit() + k);
    ASSERT_EQ(ex.ranges.size(), 1u);
    EXPECT_EQ(ex.ranges[0].begin, k * 9216 * C);
    EXPECT_EQ(ex.ranges[0].end, std::min<size_t>(V, (k + 1) * 9216) * C);
  }
  // A tensor stacked over layers cannot be chunked.
  table[2].chunk_elems = 4;
  EXPECT_THROW(ZeroPlan(table, 2), std::runtime_error);
}

// Builds a random table: some tensors stacked over a common layer count.
std::vector<ParamTensorSpec> random_table(std::mt19937& rng) {
  std::uniform_int_distribution<int> n_tensors(1, 12), layers(1, 6), per(0, 40), coin(0, 2);
  const int L = layers(rng);
  std::vector<ParamTensorSpec> t;
  const int n = n_tensors(rng);
  for (int i = 0; i < n; ++i) {
    const bool stacked = coin(rng) != 0;
    const size_t unit = static_cast<size_t>(per(rng));
    // Some unstacked tensors are exchanged in chunk units (like GPT-2's wte).
    const size_t chunk = !stacked && coin(rng) == 0 ? static_cast<size_t>(per(rng) / 4 + 1) : 0;
    t.push_back({"t" + std::to_string(i), stacked ? unit * static_cast<size_t>(L) : unit,
                 stacked ? L : 0, chunk});
  }
  return t;
}

TEST(ZeroPlan, RandomTablesKeepEveryInvariant) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> world_dist(1, 17), align_pick(0, 3);
  const size_t alignments[] = {1, 2, 8, 64};
  for (int trial = 0; trial < 600; ++trial) {
    const std::vector<ParamTensorSpec> table = random_table(rng);
    const int world = world_dist(rng);
    const size_t align = alignments[align_pick(rng)];
    const ZeroPlan plan(table, world, align);
    SCOPED_TRACE("trial " + std::to_string(trial) + " world " + std::to_string(world) +
                 " align " + std::to_string(align));

    // Sizes: smallest aligned shard covering every real element.
    size_t total = 0;
    for (const auto& t : table) total += t.numel;
    ASSERT_EQ(plan.num_params(), total);
    const size_t w = static_cast<size_t>(world);
    EXPECT_EQ(plan.shard_size() % align, 0u);
    EXPECT_EQ(plan.padded_size(), plan.shard_size() * w);
    EXPECT_GE(plan.padded_size(), total);
    if (plan.shard_size() > 0) {
      EXPECT_LT((plan.shard_size() - align) * w, total);
    }

    // Shards tile [0, padded): every element owned exactly once, by owner_of.
    std::vector<int> owned(plan.padded_size(), 0);
    size_t expect_begin = 0;
    for (int r = 0; r < world; ++r) {
      const ElemRange s = plan.shard(r);
      EXPECT_EQ(s.begin, expect_begin);
      expect_begin = s.end;
      for (size_t e = s.begin; e < s.end; ++e) {
        owned[e] += 1;
        EXPECT_EQ(plan.owner_of(e), r);
      }
    }
    EXPECT_EQ(expect_begin, plan.padded_size());
    for (size_t e = 0; e < owned.size(); ++e) ASSERT_EQ(owned[e], 1) << "element " << e;

    // Units: recompute each element's unit from the table independently.
    // Chunked tensors: units after the rest, numbered in tensor order
    // (-2 - n marks the n-th chunk unit until L is known).
    std::vector<int> expected_unit(total, -1);
    int L = 0, chunk_units = 0;
    size_t off = 0;
    for (const auto& t : table) {
      if (t.num_layers > 0) L = t.num_layers;
      for (size_t k = 0; k < t.numel; ++k)
        expected_unit[off + k] =
            t.num_layers > 0  ? static_cast<int>(k / (t.numel / static_cast<size_t>(t.num_layers)))
            : t.chunk_elems ? -2 - (chunk_units + static_cast<int>(k / t.chunk_elems))
                            : -1;  // rest, fixed below
      if (t.chunk_elems) chunk_units += static_cast<int>((t.numel + t.chunk_elems - 1) / t.chunk_elems);
      off += t.numel;
    }
    ASSERT_EQ(plan.num_layers(), L);
    ASSERT_EQ(plan.num_chunk_units(), chunk_units);
    ASSERT_EQ(plan.num_units(), L + 1 + chunk_units);
    for (int& u : expected_unit)
      if (u == -1) u = L;
      else if (u < -1) u = L + 1 + (-2 - u);
    std::vector<int> covered(total, 0);
    for (int u = 0; u < plan.num_units(); ++u) {
      const UnitExchange& ex = plan.unit(u);
      size_t numel = 0, prev_end = 0;
      for (const ElemRange& r : ex.ranges) {
        EXPECT_GE(r.begin, prev_end);  // ascending, disjoint
        prev_end = r.end;
        numel += r.size();
        for (size_t e = r.begin; e < r.end; ++e) {
          covered[e] += 1;
          EXPECT_EQ(expected_unit[e], u) << "element " << e;
        }
      }
      EXPECT_EQ(ex.numel, numel);

      // Packing by owner is the ranges' flat order: piece k starts where the
      // concatenation of the unit's ranges has the element piece.global.begin.
      std::vector<size_t> concat_pos(total, 0);
      size_t pos = 0;
      for (const ElemRange& r : ex.ranges)
        for (size_t e = r.begin; e < r.end; ++e) concat_pos[e] = pos++;
      for (const ExchangePiece& piece : ex.pieces)
        EXPECT_EQ(piece.pack_offset, concat_pos[piece.global.begin]);

      // Pieces tile the unit's ranges, sit in one shard, pack consecutively by owner.
      std::vector<int> in_piece(total, 0);
      std::vector<size_t> counts(w, 0);
      size_t pack = 0;
      ASSERT_EQ(ex.first_piece_of_rank.size(), w + 1);
      for (size_t p = 0; p < ex.pieces.size(); ++p) {
        const ExchangePiece& piece = ex.pieces[p];
        ASSERT_FALSE(piece.global.empty());
        if (p > 0) {
          const ExchangePiece& prev = ex.pieces[p - 1];
          EXPECT_TRUE(prev.owner < piece.owner ||
                      (prev.owner == piece.owner && prev.global.end <= piece.global.begin));
        }
        EXPECT_EQ(plan.owner_of(piece.global.begin), piece.owner);
        EXPECT_EQ(plan.owner_of(piece.global.end - 1), piece.owner);
        EXPECT_EQ(piece.shard_offset, piece.global.begin - plan.shard(piece.owner).begin);
        EXPECT_EQ(piece.pack_offset, pack);
        pack += piece.global.size();
        counts[static_cast<size_t>(piece.owner)] += piece.global.size();
        EXPECT_GE(p, ex.first_piece_of_rank[static_cast<size_t>(piece.owner)]);
        EXPECT_LT(p, ex.first_piece_of_rank[static_cast<size_t>(piece.owner) + 1]);
        for (size_t e = piece.global.begin; e < piece.global.end; ++e) in_piece[e] += 1;
      }
      EXPECT_EQ(pack, ex.numel);
      EXPECT_EQ(ex.first_piece_of_rank[w], ex.pieces.size());
      EXPECT_EQ(ex.counts, counts);
      std::vector<int> touched;
      for (int r = 0; r < world; ++r)
        if (counts[static_cast<size_t>(r)] > 0) touched.push_back(r);
      EXPECT_EQ(ex.touched_ranks, touched);
      for (size_t e = 0; e < total; ++e)
        ASSERT_EQ(in_piece[e], expected_unit[e] == u ? 1 : 0) << "element " << e;
    }
    for (size_t e = 0; e < total; ++e) ASSERT_EQ(covered[e], 1) << "element " << e;

    // Each tensor's local parts over all ranks add up to the tensor.
    for (size_t i = 0; i < plan.num_tensors(); ++i) {
      size_t sum = 0;
      for (int r = 0; r < world; ++r) sum += plan.local_part(r, plan.tensor_range(i)).size();
      EXPECT_EQ(sum, table[i].numel);
    }
  }
}

}  // namespace
}  // namespace gpt2

// DataLoader: exact batches, llm.c's distributed convention, N ranks == 1 rank
// with N micro-batches, epoch coverage, shuffling, exact resume (also 2 ranks ->
// 1 rank), unequal shards, and every bad input named in its error.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "dataloader/dataloader.h"
#include "dataloader/shard.h"
#include "test/temp_dir.h"
#include "test/dataloader/test_util.h"

namespace gpt2 {
namespace {

// Token i of shard s is s*kStride + i: every window is identified by its first
// token, and tokens are consecutive inside a shard so batches are checkable.
constexpr uint32_t kStride = 100000;
constexpr uint32_t kBigVocab = 1u << 22;

// Writes shards dir/shard_000.bin... with the given token counts (uint32).
std::string make_shards(const TempDir& dir, const std::vector<uint32_t>& lengths,
                        TokenWidth width = TokenWidth::kU32, const std::string& prefix = "shard_") {
  for (size_t s = 0; s < lengths.size(); ++s) {
    std::vector<uint32_t> tokens(lengths[s]);
    for (uint32_t i = 0; i < lengths[s]; ++i)
      tokens[i] = width == TokenWidth::kU32 ? static_cast<uint32_t>(s) * kStride + i : i % 50000;
    char name[64];
    std::snprintf(name, sizeof(name), "%s%03zu.bin", prefix.c_str(), s);
    write_shard(dir.file(name), tokens, width);
  }
  return dir.file(prefix + "*.bin");
}

DataLoaderOptions options(const std::string& pattern, int B, int T, int world = 1, int grad_accum = 1,
                          bool shuffle = false, uint64_t seed = 0) {
  DataLoaderOptions o;
  o.pattern = pattern;
  o.B = B;
  o.T = T;
  o.world = world;
  o.grad_accum = grad_accum;
  o.shuffle = shuffle;
  o.seed = seed;
  o.vocab_size = kBigVocab;
  return o;
}

// Reads one batch, checks inputs are consecutive tokens and targets are inputs
// shifted by one, and returns the window's first token (its identity).
uint32_t next_window(DataLoader& loader, int BT) {
  std::vector<int32_t> in(BT), tg(BT);
  loader.next_batch(in.data(), tg.data());
  for (int j = 0; j < BT; ++j) {
    EXPECT_EQ(in[j], in[0] + j) << "input " << j;
    EXPECT_EQ(tg[j], in[0] + j + 1) << "target " << j;
  }
  return static_cast<uint32_t>(in[0]);
}

// `world` loaders with `grad_accum` micro-batches per step, run for `steps`
// steps; window ids in (step, micro-batch, rank) order.
std::vector<uint32_t> run(DataLoaderOptions o, int steps) {
  std::vector<DataLoader> ranks;
  for (int r = 0; r < o.world; ++r) {
    o.rank = r;
    ranks.emplace_back(o);
  }
  std::vector<uint32_t> ids;
  for (int s = 0; s < steps; ++s)
    for (int m = 0; m < o.grad_accum; ++m)
      for (DataLoader& l : ranks) ids.push_back(next_window(l, o.B * o.T));
  return ids;
}

TEST(SplitMix64, MatchesReferenceStream) {
  // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c).
  Rng rng(0);
  EXPECT_EQ(rng.next_u64(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next_u64(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.next_u64(), 0x06C45D188009454FULL);
}

TEST(SplitMix64, PermutationIsAPermutationAndBelowIsInRange) {
  Rng rng(42);
  std::vector<uint64_t> p = random_permutation(1000, rng);
  std::vector<uint64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, sorted);
  std::vector<int> hist(3, 0);
  for (int i = 0; i < 30000; ++i) ++hist[rng.below(3)];
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);  // ~5 standard deviations
}

TEST(DataLoader, SequentialBatchesAndShiftedTargets) {
  TempDir dir;
  // uint16 shard of 50 tokens (token i = i): B*T = 8 gives (50-1)/8 = 6 windows.
  const std::string pattern = make_shards(dir, {50}, TokenWidth::kU16);
  DataLoaderOptions o = options(pattern, 2, 4);
  o.vocab_size = 50257;
  DataLoader loader(o);
  EXPECT_EQ(loader.num_shards(), 1u);
  EXPECT_EQ(loader.total_tokens(), 50u);
  EXPECT_EQ(loader.samples_per_epoch(), 6u);
  int32_t in[8], tg[8];
  for (int k = 0; k < 6; ++k) {
    loader.next_batch(in, tg);
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(in[j], 8 * k + j);
      EXPECT_EQ(tg[j], 8 * k + j + 1);
    }
    EXPECT_EQ(loader.epoch(), 0u);
  }
  loader.next_batch(in, tg);  // wraps: epoch 1 starts at token 0 again
  EXPECT_EQ(loader.epoch(), 1u);
  EXPECT_EQ(in[0], 0);
  EXPECT_EQ(tg[7], 8);
  loader.reset();
  EXPECT_EQ(loader.epoch(), 0u);
  loader.next_batch(in, tg);
  EXPECT_EQ(in[3], 3);
}

TEST(DataLoader, MixedWidthsAndUnequalShardsSequential) {
  TempDir dir;
  make_shards(dir, {41}, TokenWidth::kU16, "a_");   // 5 windows of 8+1
  make_shards(dir, {30}, TokenWidth::kU32, "b_");   // 3 windows
  DataLoaderOptions o = options(dir.file("a_*.bin") + "," + dir.file("b_*.bin"), 2, 4);
  o.vocab_size = 50257;
  DataLoader loader(o);
  EXPECT_EQ(loader.num_shards(), 2u);
  EXPECT_EQ(loader.total_tokens(), 71u);
  EXPECT_EQ(loader.samples_per_epoch(), 8u);
  std::vector<int32_t> firsts;
  int32_t in[8], tg[8];
  for (int k = 0; k < 9; ++k) {
    loader.next_batch(in, tg);
    firsts.push_back(in[0]);
  }
  // b_000 holds tokens 0*kStride + i as uint32.
  EXPECT_EQ(firsts, (std::vector<int32_t>{0, 8, 16, 24, 32, 0, 8, 16, 0}));
  EXPECT_EQ(loader.epoch(), 1u);
}

TEST(DataLoader, LlmcRankConventionWithoutShuffle) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 12 + 1});  // 12 windows of B*T = 8
  for (int r = 0; r < 3; ++r) {
    DataLoaderOptions o = options(pattern, 2, 4, 3);
    o.rank = r;
    DataLoader loader(o);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(next_window(loader, 8), static_cast<uint32_t>((3 * k + r) * 8));
    // The 5th call would need windows 12..14: next epoch, same shard, from 0.
    EXPECT_EQ(next_window(loader, 8), static_cast<uint32_t>(r * 8));
    EXPECT_EQ(loader.epoch(), 1u);
  }
}

TEST(DataLoader, RanksEqualMicroBatches) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 13 + 1, 8 * 9 + 5, 8 * 21 + 1});
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "sequential");
    // 40 windows per 10 steps of 4: well past one epoch (12+8+20 = 40 usable).
    const auto w2 = run(options(pattern, 2, 4, 2, 1, shuffle, 7), 30);
    const auto g2 = run(options(pattern, 2, 4, 1, 2, shuffle, 7), 30);
    EXPECT_EQ(w2, g2);
    const auto w4 = run(options(pattern, 2, 4, 4, 1, shuffle, 7), 15);
    const auto w2g2 = run(options(pattern, 2, 4, 2, 2, shuffle, 7), 15);
    const auto g4 = run(options(pattern, 2, 4, 1, 4, shuffle, 7), 15);
    EXPECT_EQ(w4, w2g2);
    EXPECT_EQ(w4, g4);
  }
}

TEST(DataLoader, EachWindowOfAnEpochExactlyOnceAcrossRanks) {
  TempDir dir;
  const std::vector<uint32_t> lengths = {8 * 13 + 1, 8 * 9 + 5, 8 * 21 + 1, 8 * 4 + 2};
  const std::string pattern = make_shards(dir, lengths);
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "sequential");
    DataLoaderOptions o = options(pattern, 2, 4, 2, 2, shuffle, 3);
    std::vector<DataLoader> ranks;
    for (int r = 0; r < 2; ++r) {
      o.rank = r;
      ranks.emplace_back(o);
    }
    // Windows per shard 13, 9, 21, 4 -> usable 12, 8, 20, 4 with S = 4.
    ASSERT_EQ(ranks[0].samples_per_epoch(), 44u);
    std::vector<uint32_t> ids;
    for (int step = 0; step < 11; ++step)
      for (int m = 0; m < 2; ++m)
        for (DataLoader& l : ranks) ids.push_back(next_window(l, 8));
    EXPECT_EQ(ranks[0].epoch(), 0u);
    std::set<uint32_t> unique(ids.begin(), ids.end());
    EXPECT_EQ(unique.size(), ids.size()) << "a window was read twice";
    std::map<uint32_t, int> per_shard;
    for (uint32_t id : ids) {
      EXPECT_EQ(id % kStride % 8, 0u) << "window not at a multiple of B*T";
      EXPECT_LT(id % kStride / 8, (lengths[id / kStride] - 1) / 8) << "window past the shard";
      ++per_shard[id / kStride];
    }
    EXPECT_EQ(per_shard, (std::map<uint32_t, int>{{0, 12}, {1, 8}, {2, 20}, {3, 4}}));
    if (!shuffle) {
      std::vector<uint32_t> expected;
      const int usable[4] = {12, 8, 20, 4};
      for (uint32_t s = 0; s < 4; ++s)
        for (int w = 0; w < usable[s]; ++w) expected.push_back(s * kStride + 8 * w);
      EXPECT_EQ(ids, expected);
    }
    next_window(ranks[0], 8);
    EXPECT_EQ(ranks[0].epoch(), 1u);
  }
}

TEST(DataLoader, ShuffleIsDeterministicAndSeedDependent) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 30 + 1, 8 * 25 + 1, 8 * 40 + 1});
  const auto a = run(options(pattern, 2, 4, 1, 1, true, 1234), 95);  // 95 = one epoch
  const auto b = run(options(pattern, 2, 4, 1, 1, true, 1234), 95);
  const auto c = run(options(pattern, 2, 4, 1, 1, true, 1235), 95);
  const auto seq = run(options(pattern, 2, 4, 1, 1, false, 1234), 95);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, seq);
  // Same windows, other order: a shuffle is a permutation of the epoch.
  auto sa = a, sseq = seq;
  std::sort(sa.begin(), sa.end());
  std::sort(sseq.begin(), sseq.end());
  EXPECT_EQ(sa, sseq);
  // Epoch 1 is re-permuted, not a replay of epoch 0.
  const auto two = run(options(pattern, 2, 4, 1, 1, true, 1234), 190);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), two.begin()));
  EXPECT_FALSE(std::equal(a.begin(), a.end(), two.begin() + 95));
  // Inside one shard too: the window order of epoch 1 is a new permutation.
  const std::string single = make_shards(dir, {8 * 50 + 1}, TokenWidth::kU32, "single_");
  const auto one = run(options(single, 2, 4, 1, 1, true, 1234), 100);
  EXPECT_FALSE(std::equal(one.begin(), one.begin() + 50, one.begin() + 50));
  // Validation never sees shuffle: no seed changes a sequential loader.
  EXPECT_EQ(seq, run(options(pattern, 2, 4, 1, 1, false, 99), 95));
}

// Continues `original` and freshly restored `resumed` in lockstep; both groups
// must produce the same windows in (micro-batch, rank) order.
void expect_same_future(std::vector<DataLoader>& original, std::vector<DataLoader>& resumed, int calls) {
  std::vector<uint32_t> a, b;
  for (int k = 0; k < calls; ++k)
    for (DataLoader& l : original) a.push_back(next_window(l, 8));
  for (size_t k = 0; k < a.size() / resumed.size(); ++k)
    for (DataLoader& l : resumed) b.push_back(next_window(l, 8));
  EXPECT_EQ(a, b);
  EXPECT_EQ(original[0].epoch(), resumed[0].epoch());
}

TEST(DataLoader, ResumeMidEpochMidStepSameWorld) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 10 + 1, 8 * 6 + 3, 8 * 13 + 1});
  DataLoaderOptions o = options(pattern, 2, 4, 2, 2, true, 5);
  std::vector<DataLoader> original, resumed;
  for (int r = 0; r < 2; ++r) {
    o.rank = r;
    original.emplace_back(o);
    resumed.emplace_back(o);
  }
  for (int k = 0; k < 5; ++k)  // 5 calls: second shard, inside a step
    for (DataLoader& l : original) next_window(l, 8);
  const std::vector<uint8_t> state = original[0].save_state();
  EXPECT_EQ(state, original[1].save_state()) << "state must not depend on the rank";
  for (DataLoader& l : resumed) {
    for (int k = 0; k < 2; ++k) next_window(l, 8);  // drift to another step position
    l.load_state(state);
  }
  expect_same_future(original, resumed, 40);  // crosses shards and epochs
}

TEST(DataLoader, ResumeTwoRanksToOneWithDoubleGradAccum) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 10 + 1, 8 * 6 + 3, 8 * 13 + 1});
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "sequential");
    DataLoaderOptions two = options(pattern, 2, 4, 2, 1, shuffle, 11);
    std::vector<DataLoader> original;
    for (int r = 0; r < 2; ++r) {
      two.rank = r;
      original.emplace_back(two);
    }
    for (int k = 0; k < 7; ++k)
      for (DataLoader& l : original) next_window(l, 8);
    std::vector<DataLoader> one;
    one.emplace_back(options(pattern, 2, 4, 1, 2, shuffle, 11));
    one[0].load_state(original[1].save_state());
    expect_same_future(original, one, 30);

    // And back: 1 rank x 2 micro-batches -> 2 ranks.
    std::vector<DataLoader> back;
    for (int r = 0; r < 2; ++r) {
      two.rank = r;
      back.emplace_back(two);
      back[r].load_state(one[0].save_state());
    }
    expect_same_future(one, back, 20);
  }
}

TEST(DataLoader, LoadStateRejectsIncompatibleOrCorruptState) {
  TempDir dir;
  const std::string pattern = make_shards(dir, {8 * 10 + 1, 8 * 6 + 3});
  DataLoaderOptions o = options(pattern, 2, 4, 2, 2, true, 5);
  DataLoader saved(o);
  next_window(saved, 8);  // mid-step
  const std::vector<uint8_t> state = saved.save_state();
  auto text = std::string(state.begin(), state.end());
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return bytes(t.replace(at, from.size(), to));
  };

  { DataLoader l(options(pattern, 4, 2, 2, 2, true, 5)); expect_error([&] { l.load_state(state); }, {pattern, "B=2 T=4", "B=4 T=2"}); }
  { DataLoader l(options(pattern, 2, 4, 2, 2, true, 6)); expect_error([&] { l.load_state(state); }, {"seed=5", "seed=6"}); }
  { DataLoader l(options(pattern, 2, 4, 2, 2, false, 5)); expect_error([&] { l.load_state(state); }, {"shuffle=1"}); }
  { DataLoader l(options(pattern, 2, 4, 1, 2, true, 5)); expect_error([&] { l.load_state(state); }, {"world*grad_accum", "2*2 = 4"}); }
  { DataLoader l(options(pattern, 2, 4, 1, 4, true, 5)); expect_error([&] { l.load_state(state); }, {"middle of an optimizer step", "world=2"}); }
  {
    const std::string other = make_shards(dir, {8 * 10 + 1}, TokenWidth::kU32, "other_");
    DataLoader l(options(other, 2, 4, 2, 2, true, 5));
    expect_error([&] { l.load_state(state); }, {other, "other shard files", "2 shards"});
  }
  DataLoader l(o);
  const std::vector<uint8_t> before = l.save_state();
  expect_error([&] { l.load_state({}); }, {"empty"});
  expect_error([&] { l.load_state(bytes("PK\x03\x04 junk\n")); }, {"not a dataloader state"});
  expect_error([&] { l.load_state(replaced("gpt2-dataloader-state 1", "gpt2-dataloader-state 2")); },
               {"unsupported version '2'"});
  expect_error([&] { l.load_state(bytes(text.substr(0, text.size() - 3))); }, {"truncated"});
  expect_error([&] { l.load_state(replaced("cursor 2", "cursor 4")); }, {"cursor 4", "not a valid position"});
  expect_error([&] { l.load_state(replaced("cursor 2", "cursor x")); }, {"'cursor' is not a number"});
  expect_error([&] { l.load_state(replaced("shard_pos 0", "shard_pos 2")); }, {"shard_pos out of range"});
  expect_error([&] { l.load_state(replaced("call_in_step 1", "call_in_step 2")); }, {"call_in_step out of range"});
  expect_error([&] { l.load_state(replaced("epoch 0\n", "")); }, {"missing key 'epoch'"});
  expect_error([&] { l.load_state(replaced("epoch 0\n", "epoch 0\nepoch 1\n")); }, {"'epoch' repeated"});
  expect_error([&] { l.load_state(replaced("epoch 0\n", "epoch 0\nextra 1\n")); }, {"unknown key 'extra'"});
  expect_error([&] { l.load_state(replaced("epoch 0", "epoch 99999999999999999999")); }, {"overflows"});
  EXPECT_EQ(l.save_state(), before) << "a rejected state must leave the loader where it was";
  l.load_state(state);
  EXPECT_EQ(l.save_state(), state);
}

TEST(DataLoader, ErrorsNameTheFile) {
  TempDir dir;
  const std::string good = make_shards(dir, {8 * 4 + 1});
  expect_error([&] { DataLoader l(options(dir.file("missing_*.bin"), 2, 4)); },
               {dir.file("missing_*.bin"), "no file matches"});
  expect_error([&] { DataLoader l(options(good + "," + dir.file("none.bin"), 2, 4)); },
               {dir.file("none.bin"), "no file matches"});
  expect_error([&] { DataLoader l(options(good + "," + good, 2, 4)); }, {"shard_000.bin", "listed twice"});

  // A bad shard among good ones: the bad one is named.
  const std::string bad = dir.file("shard_001.bin");
  {
    std::ofstream out(bad, std::ios::binary);
    std::vector<int32_t> header(256, 0);
    header[0] = 20240521;
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
  }
  expect_error([&] { DataLoader l(options(good, 2, 4)); }, {bad, "bad magic 20240521"});
  write_shard(bad, std::vector<uint32_t>(50, 1), TokenWidth::kU16);
  ::truncate(bad.c_str(), 1024 + 99);
  expect_error([&] { DataLoader l(options(good, 2, 4)); }, {bad, "truncated"});

  write_shard(bad, std::vector<uint32_t>(8, 1), TokenWidth::kU16);  // 8 tokens < B*T+1 = 9
  expect_error([&] { DataLoader l(options(good, 2, 4)); }, {bad, "shorter than one window", "9 tokens"});
  write_shard(bad, std::vector<uint32_t>(8 * 3 + 1, 1), TokenWidth::kU16);  // 3 windows < world*ga = 4
  expect_error([&] { DataLoader l(options(good, 2, 4, 2, 2)); }, {bad, "3 windows", "world*grad_accum = 4"});

  // Token ids are scanned when a shard is first read: shard 0 at construction,
  // shard 1 when the loader reaches it.
  std::vector<uint32_t> tokens(8 * 4 + 1, 7);
  tokens[20] = 50257;
  write_shard(bad, tokens, TokenWidth::kU16);
  DataLoaderOptions o = options(good, 2, 4);
  o.vocab_size = 50257;
  DataLoader l(o);
  int32_t in[8], tg[8];
  for (int k = 0; k < 4; ++k) l.next_batch(in, tg);
  expect_error([&] { l.next_batch(in, tg); }, {bad, "token id 50257", "at token 20", "byte offset 1064"});
  o.pattern = bad;
  expect_error([&] { DataLoader l2(o); }, {bad, "token id 50257"});

  expect_error([&] { DataLoader l2(options(good, 0, 4)); }, {"B and T must be positive"});
  expect_error([&] { DataLoader l2(options(good, 65536, 65536)); }, {"B*T = 4294967296 exceeds"});
  DataLoaderOptions r = options(dir.file("shard_000.bin"), 2, 4, 2);
  r.rank = 2;
  expect_error([&] { DataLoader l2(r); }, {"rank 2 outside world of 2"});
}

TEST(DataLoader, PatternExpansionIsSortedAndLiteral) {
  TempDir dir;
  for (const char* name : {"c.bin", "a.bin", "b.bin", "x,y.bin"}) write_shard(dir.file(name), {1, 2}, TokenWidth::kU16);
  EXPECT_EQ(expand_shard_pattern(dir.file("?.bin")),
            (std::vector<std::string>{dir.file("a.bin"), dir.file("b.bin"), dir.file("c.bin")}));
  EXPECT_EQ(expand_shard_pattern(dir.file("c.bin") + "," + dir.file("[ab].bin")),
            (std::vector<std::string>{dir.file("c.bin"), dir.file("a.bin"), dir.file("b.bin")}));
  EXPECT_EQ(expand_shard_pattern(dir.file("x,y.bin")), (std::vector<std::string>{dir.file("x,y.bin")}));
}

}  // namespace
}  // namespace gpt2

// The strided sliding-window evaluation (train/evaluation.h) against Hugging
// Face's loop run literally, one window per forward at its own length; and
// HellaSwag's refusals, each naming FILE:LINE.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "distributed/preempt.h"
#include "model/gpt2.h"
#include "test/tiny_config.h"
#include "train/evaluation.h"
#include "util/rng.h"

namespace gpt2 {
namespace {

constexpr int kT = 16;

GPT2Config tiny_config() { return tiny_gpt2_config(2, 2, 32, kT, 64, 64); }

std::vector<uint32_t> random_tokens(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng.below(64));
  return t;
}

struct Reference {
  double nll_sum = 0.0;
  uint64_t tokens = 0, windows = 0;
};

// transformers' "Perplexity of fixed-length models" loop: labels[:-trg_len] =
// -100, the model shifts labels by one; here targets[i] = labels[i + 1].
Reference hf_loop(GPT2& model, const std::vector<uint32_t>& tokens, int T, int S) {
  Reference r;
  const size_t n = tokens.size();
  size_t prev_end = 0;
  for (size_t begin = 0; begin < n; begin += S) {
    const size_t end = std::min(begin + T, n), len = end - begin, trg_len = end - prev_end;
    std::vector<int32_t> input(tokens.begin() + begin, tokens.begin() + end), labels = input;
    for (size_t i = 0; i + trg_len < len; i++) labels[i] = kIgnoreTarget;
    std::vector<int32_t> targets(len, kIgnoreTarget);
    for (size_t i = 0; i + 1 < len; i++) targets[i] = labels[i + 1];
    model.forward(input.data(), targets.data(), 1, static_cast<int>(len));
    const std::vector<float> losses = model.losses();
    for (size_t i = 0; i < len; i++)
      if (targets[i] != kIgnoreTarget) {
        r.nll_sum += losses[i];
        r.tokens++;
      }
    r.windows++;
    prev_end = end;
    if (end == n) break;
  }
  return r;
}

TokenReader vector_reader(const std::vector<std::vector<uint32_t>>& streams) {
  return [&streams](size_t s, uint64_t first, size_t n, uint32_t* out) {
    for (size_t i = 0; i < n; i++) out[i] = streams[s].at(first + i);
  };
}

TEST(EvalWindows, EveryTokenButTheFirstIsScoredOnceWhenTheStrideIsBelowT) {
  for (uint64_t n : {1, 2, 15, 16, 17, 33, 100, 101}) {
    for (int S : {1, 3, 5, 8, 15, 16}) {
      const uint64_t W = count_windows(n, kT, S);
      std::vector<int> scored(n, 0);
      for (uint64_t k = 0; k < W; k++) {
        const EvalWindow w = window_at(n, kT, S, k);
        EXPECT_EQ(w.end == n, k + 1 == W) << "n=" << n << " S=" << S << " k=" << k;
        for (uint64_t p = w.score_from; p < w.end; p++) scored[p]++;
      }
      uint64_t count = 0;
      for (uint64_t p = 0; p < n; p++) {
        EXPECT_LE(scored[p], 1);
        count += scored[p];
      }
      EXPECT_EQ(scored[0], 0);
      // S < T: all of [1, n); S = T: disjoint windows, each window's first token unscored.
      EXPECT_EQ(count, S < kT ? n - 1 : n - W) << "n=" << n << " S=" << S;
    }
  }
  EXPECT_EQ(count_windows(0, kT, 4), 0u);
  EXPECT_EQ(count_windows(100, kT, 16), 7u);  // begins 0, 16, ..., 96
  EXPECT_EQ(count_windows(100, kT, 8), 12u);  // the last begins at 88 and ends at 100
}

TEST(EvalWindows, RowHoldsTheWindowPaddingAndOnlyItsScoredTargets) {
  EXPECT_EQ(count_windows(10, 4, 2), 4u);
  const EvalWindow w = window_at(10, 4, 2, 3);  // begin 6, end 10; window 2 ended at 8
  EXPECT_EQ(w.begin, 6u);
  EXPECT_EQ(w.end, 10u);
  EXPECT_EQ(w.score_from, 8u);
  EXPECT_EQ(w.scored(), 2u);
  const EvalWindow v = window_at(11, 4, 2, 2);  // begin 4, end 8, previous end 6
  EXPECT_EQ(v.score_from, 6u);
  const uint32_t tokens[4] = {40, 41, 42, 43};  // tokens[4..8)
  int32_t in[6], tg[6];
  fill_window_row(v, tokens, 6, 63, in, tg);
  EXPECT_EQ(std::vector<int32_t>(in, in + 6), (std::vector<int32_t>{40, 41, 42, 43, 63, 63}));
  EXPECT_EQ(std::vector<int32_t>(tg, tg + 6), (std::vector<int32_t>{-1, 42, 43, -1, -1, -1}));
}

class EvalAgainstHf : public ::testing::TestWithParam<int> {};

TEST_P(EvalAgainstHf, SumsAndCountsMatchTheLiteralLoop) {
  const int S = GetParam();
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const GPT2Config cfg = tiny_config();
  GPT2 ref_model(*be, cfg, 1, kT);
  ref_model.init_random(5);
  const std::vector<std::vector<uint32_t>> streams = {random_tokens(101, 1), random_tokens(37, 2)};
  Reference want;
  for (const auto& s : streams) {
    const Reference r = hf_loop(ref_model, s, kT, S);
    want.nll_sum += r.nll_sum;
    want.tokens += r.tokens;
    want.windows += r.windows;
  }
  for (int B : {1, 3}) {
    GPT2 model(*be, cfg, B, kT);
    model.init_random(5);
    EvalSpec spec;
    spec.stream_tokens = {101, 37};
    spec.T = kT;
    spec.S = S;
    spec.B = B;
    const EvalTotals got = evaluate_sliding_windows(model, spec, vector_reader(streams), nullptr);
    EXPECT_EQ(got.tokens, want.tokens) << "B=" << B;
    EXPECT_EQ(got.windows, want.windows) << "B=" << B;
    EXPECT_EQ(got.tokens, S < kT ? 100u + 36u : 138u - got.windows);
    // B = 3 changes the GEMM row count, so OpenBLAS may round a row differently:
    // each positive per-token loss differs by random-sign fp32 roundings through
    // the model (~1e-7 relative), and so does their sum; 1e-5 is ~170 u (measured
    // <= 4e-9 under Haswell, SkylakeX, Zen). The loss (~4.2) likewise: 1e-5 absolute.
    EXPECT_NEAR(got.nll_sum, want.nll_sum, 1e-5 * want.nll_sum) << "B=" << B;
    EXPECT_NEAR(got.loss(), want.nll_sum / want.tokens, 1e-5) << "B=" << B;
    EXPECT_GT(got.loss(), 3.0);  // about ln 64 = 4.16 for random weights
    EXPECT_EQ(got.perplexity(), std::exp(got.loss()));  // the same double exp of the same value
  }
}

INSTANTIATE_TEST_SUITE_P(Strides, EvalAgainstHf, ::testing::Values(kT, kT / 2, 5, 1));

TEST(EvalSlidingWindows, RefusesAStrideAboveTheContext) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  GPT2 model(*be, tiny_config(), 1, kT);
  EvalSpec spec;
  spec.stream_tokens = {50};
  spec.T = 8;
  spec.S = 9;
  EXPECT_THROW(evaluate_sliding_windows(model, spec, nullptr, nullptr), std::runtime_error);
}

// Rank r of 2 computes only its batches; summing the two ranks' per-window
// vectors (as the all-reduce does) gives the one-rank result bit for bit.
TEST(EvalSlidingWindows, TwoRanksSumToTheOneRankResultBitwise) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const std::vector<std::vector<uint32_t>> streams = {random_tokens(203, 3)};
  EvalSpec spec;
  spec.stream_tokens = {203};
  spec.T = kT;
  spec.S = 6;
  spec.B = 2;
  GPT2 model(*be, tiny_config(), 2, kT);
  model.init_random(9);
  const EvalTotals one = evaluate_sliding_windows(model, spec, vector_reader(streams), nullptr);
  std::vector<std::vector<double>> rounds[2];
  spec.world = 2;
  for (int r = 0; r < 2; r++) {
    spec.rank = r;
    evaluate_sliding_windows(model, spec, vector_reader(streams),
                             [&rounds, r](std::vector<double>& v) { rounds[r].push_back(v); });
  }
  ASSERT_EQ(rounds[0].size(), rounds[1].size());
  double total = 0.0;
  for (size_t i = 0; i < rounds[0].size(); i++)
    for (size_t j = 0; j < rounds[0][i].size(); j++) total += rounds[0][i][j] + rounds[1][i][j];
  EXPECT_EQ(total, one.nll_sum);
}

std::vector<HellaSwagExample> hellaswag_examples(int n) {
  std::vector<HellaSwagExample> out(static_cast<size_t>(n));
  for (int e = 0; e < n; e++) {
    HellaSwagExample& ex = out[static_cast<size_t>(e)];
    ex.context = random_tokens(5, 100 + e);
    for (int i = 0; i < 4; i++) ex.endings[i] = random_tokens(3, 200 + 4 * e + i);
    ex.label = e % 4;
    ex.where = "hs.jsonl:" + std::to_string(e + 1);
  }
  return out;
}

// The message of what `f` throws ("" when it does not).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(HellaSwag, AnEndingLongerThanTheContextIsNamedByFileAndLine) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny_config(), 2, kT);
  model.init_random(9);
  std::vector<HellaSwagExample> examples = hellaswag_examples(3);
  examples[2].endings[1] = random_tokens(kT + 1, 7);
  const RankSum alone = [](std::vector<double>&) {};
  EXPECT_EQ(error_of([&] { evaluate_hellaswag(model, 2, kT, examples, 0, 1, alone); }),
            "hs.jsonl:3: ending 1 has 17 tokens, more than the context of 16 (-T) scores");
  examples[2].endings[1].resize(kT);  // fits
  EXPECT_EQ(evaluate_hellaswag(model, 2, kT, examples, 0, 1, alone).n, 3u);
}

// Rank 0 of 2, the other rank's sums stood in for: its examples differ at line
// 2, or it holds one example more.
TEST(HellaSwag, RanksHoldingOtherExamplesAreNamedByFileAndLine) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny_config(), 2, kT);
  model.init_random(9);
  const std::vector<HellaSwagExample> examples = hellaswag_examples(3);
  int call = 0;
  const RankSum other_line_2 = [&](std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); i++) v[i] += v[i] + (call == 1 && i / 2 == 1 ? 1.0 : 0.0);
    call++;
  };
  EXPECT_EQ(error_of([&] { evaluate_hellaswag(model, 2, kT, examples, 0, 2, other_line_2); }),
            "hs.jsonl:2: this HellaSwag example differs between the ranks (rank 0 reads another file or version of "
            "--eval-hellaswag?)");
  const RankSum one_more = [](std::vector<double>& v) { v[0] += v[0] + 1.0; };
  EXPECT_EQ(error_of([&] { evaluate_hellaswag(model, 2, kT, examples, 0, 2, one_more); }),
            "hs.jsonl: rank 0 reads 3 HellaSwag examples, another rank a different number (a different "
            "--eval-hellaswag file?)");
  const RankSum same = [](std::vector<double>& v) {
    for (double& x : v) x += x;
  };
  EXPECT_EQ(evaluate_hellaswag(model, 2, kT, examples, 0, 2, same).n, 3u);
}

// 5 examples are 20 rows: 10 rounds of B = 2 on one rank, 5 on each of 2 ranks
// (rank 1 idle in none); a stop thrown after round 3 ends the pass there.
TEST(HellaSwag, AStopBetweenRoundsEndsThePassAfterTheRoundInFlight) {
  auto be = make_cpu_backend(1);
  GPT2 model(*be, tiny_config(), 2, kT);
  model.init_random(9);
  const std::vector<HellaSwagExample> examples = hellaswag_examples(5);
  const RankSum alone = [](std::vector<double>&) {};
  const RankSum twice = [](std::vector<double>& v) {
    for (double& x : v) x += x;
  };
  int rounds = 0;
  const auto count = [&] { rounds++; };
  EXPECT_EQ(evaluate_hellaswag(model, 2, kT, examples, 0, 1, alone, count).n, 5u);
  EXPECT_EQ(rounds, 10);
  for (int rank = 0; rank < 2; rank++) {
    rounds = 0;
    evaluate_hellaswag(model, 2, kT, examples, rank, 2, twice, count);
    EXPECT_EQ(rounds, 5) << "rank " << rank;
  }
  rounds = 0;
  const auto stop_after_3 = [&] {
    if (++rounds == 3) throw StopRequested(15);
  };
  EXPECT_THROW(evaluate_hellaswag(model, 2, kT, examples, 0, 1, alone, stop_after_3), StopRequested);
  EXPECT_EQ(rounds, 3);
}

}  // namespace
}  // namespace gpt2

// HellaSwag in the loop and in --eval-only (issue 24, item 2), scored as
// llm.c's dev/data/hellaswag.py: each example's context `ctx` is followed by
// each of its 4 endings (tokens of " " + ending); an ending's loss is summed
// over its tokens. acc: the lowest sum is the label; acc_norm: the lowest mean
// (sum / its token count). (lm-evaluation-harness's acc_norm divides by the
// ending's characters instead; docs/cli.md.)
#ifndef TRAIN_HELLASWAG_H
#define TRAIN_HELLASWAG_H

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/evaluation.h"
#include "train/options.h"

namespace gpt2 {

struct HellaSwagExample {
  std::vector<uint32_t> context;
  std::array<std::vector<uint32_t>, 4> endings;
  int label = 0;
};

// The official JSONL (one object per line with "ctx", "endings" (4 strings)
// and "label" (0-3; a number or a string of one)); errors name FILE:LINE and
// the key. Blank lines are skipped.
std::vector<HellaSwagExample> read_hellaswag(const std::string& path, const Tokenizer& tok);

struct HellaSwagResult {
  uint64_t n = 0, correct = 0, correct_norm = 0;
  double acc() const { return n ? static_cast<double>(correct) / n : 0.0; }
  double acc_norm() const { return n ? static_cast<double>(correct_norm) / n : 0.0; }
};

// --eval-hellaswag's examples, tokenised with the GPT-2 vocabulary (an error
// saying the flag needs it when it cannot be loaded).
std::vector<HellaSwagExample> read_hellaswag_for(const TrainOptions& opts);

// Every example's 4 rows, B per forward; forward k runs on rank k % world, so
// each row is computed in the same batch at any world size, and the per-row
// loss sums are exchanged once: every rank gets the same result, the same as 1 rank's.
HellaSwagResult evaluate_hellaswag(GPT2& model, int B, int T, const std::vector<HellaSwagExample>& examples,
                                   int rank, int world, const RankSum& sum);

}  // namespace gpt2

#endif  // TRAIN_HELLASWAG_H

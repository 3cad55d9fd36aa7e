// --eval-only: perplexity of token streams with Hugging Face's strided
// sliding window ("Perplexity of fixed-length models", transformers docs).
//
// For a stream of n tokens, context length T and stride S (1 <= S <= T):
//   prev_end = 0
//   for begin = 0, S, 2S, ...:
//     end = min(begin + T, n)
//     the window reads tokens[begin, end) and scores the targets at absolute
//     positions p in [max(prev_end, begin + 1), end) (position i of the window
//     predicts token begin + i + 1)
//     prev_end = end; stop once end == n
// loss = mean scored NLL, perplexity = exp(loss). With S < T every token but
// the stream's first is scored exactly once (n - 1); with S = T (disjoint
// windows) each window's first token has no context and is not scored
// (n - windows). Each shard is its own stream: no window crosses shards.
#ifndef TRAIN_EVALUATION_H
#define TRAIN_EVALUATION_H

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "model/gpt2.h"
#include "tokenizer/tokenizer.h"
#include "train/options.h"

namespace gpt2 {

struct EvalWindow {
  uint64_t begin = 0;       // first input token
  uint64_t end = 0;         // one past the last input token
  uint64_t score_from = 0;  // first scored target position
  uint64_t scored() const { return end > score_from ? end - score_from : 0; }
};

// Windows over a stream of n tokens (0 when n == 0), and window k of them.
uint64_t count_windows(uint64_t n, int T, int S);
EvalWindow window_at(uint64_t n, int T, int S, uint64_t k);

// Window w's row from `tokens` = tokens[begin, end): inputs[T] = those, then `pad`;
// targets[i] = tokens[begin + i + 1] where scored, else kIgnoreTarget.
void fill_window_row(const EvalWindow& w, const uint32_t* tokens, int T, int32_t pad, int32_t* inputs,
                     int32_t* targets);

// Writes batch row `row`'s T inputs and targets.
using RowFill = std::function<void(int row, int32_t* inputs, int32_t* targets)>;
// One forward of `rows` (<= B) rows filled by `fill` (the rest read `pad`, score
// nothing). out[i] = row i's non-ignored losses, added in order into a double.
void forward_rows(GPT2& model, int B, int T, int32_t pad, int rows, const RowFill& fill, double* out);

// Reads tokens [first, first + n) of stream `stream` into out.
using TokenReader = std::function<void(size_t stream, uint64_t first, size_t n, uint32_t* out)>;
// Sums a vector over the ranks, in place (identity at one rank).
using RankSum = std::function<void(std::vector<double>& v)>;

struct EvalSpec {
  std::vector<uint64_t> stream_tokens;  // n of each stream
  int T = 0, S = 0, B = 1;              // context, stride, windows per forward
  int rank = 0, world = 1;
};

struct EvalTotals {
  double nll_sum = 0.0;  // sum of the scored negative log-likelihoods (nats)
  uint64_t tokens = 0;   // scored targets
  uint64_t windows = 0;
  double loss() const;        // nll_sum / tokens (NaN when nothing was scored)
  double perplexity() const;  // exp(loss())
};

// Batches of B consecutive windows (a partial last one padded with all-ignored
// rows) are dealt to the ranks round-robin; each window's NLL is summed by one
// rank, per-window sums are exchanged with `sum` once per round of `world`
// batches, and every rank adds them in window order: bitwise the same result
// at any world size. `progress(done, total)` (optional) runs after each round.
EvalTotals evaluate_sliding_windows(GPT2& model, const EvalSpec& spec, const TokenReader& read, const RankSum& sum,
                                    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// --eval-only on this rank (every rank calls it). Returns the exit code.
int run_evaluation(const TrainOptions& opts, const DistContext& dist, Communicator& comm);

// ---- HellaSwag -------------------------------------------------------------------------

// HellaSwag in the loop and in --eval-only, scored as llm.c's
// dev/data/hellaswag.py: the context `ctx` followed by each of the 4 endings
// (tokens of " " + ending), an ending's loss summed over its tokens. acc: the
// lowest sum is the label; acc_norm: the lowest mean per token
// (lm-evaluation-harness divides by characters instead; docs/cli.md).

struct HellaSwagExample {
  std::vector<uint32_t> context;
  std::array<std::vector<uint32_t>, 4> endings;
  int label = 0;
  std::string where;  // FILE:LINE, for errors
};

struct HellaSwagResult {
  uint64_t n = 0, correct = 0, correct_norm = 0;
  double acc() const { return n ? static_cast<double>(correct) / n : 0.0; }
  double acc_norm() const { return n ? static_cast<double>(correct_norm) / n : 0.0; }
};

// --eval-hellaswag's examples from the official JSONL: per line "ctx",
// "endings" (4 strings) and "label" (0-3, number or string), tokenised with the
// GPT-2 vocabulary; blank lines skipped; errors name FILE:LINE and the key, or
// the flag when the vocabulary cannot be loaded.
std::vector<HellaSwagExample> read_hellaswag_for(const TrainOptions& opts);

// Every example's 4 rows, B per forward; forward k runs on rank k % world, so
// each row is computed in the same batch at any world size; the per-row sums
// are exchanged once: every rank gets 1 rank's result. First every ending must
// fit T and every rank must hold the same examples (ranks reading different
// files): else an error naming FILE:LINE. `between_rounds` runs on every rank
// after each round of world x B rows, as often on each: where a stop signal is
// honoured (it throws), so a signal waits for one round, not the whole pass.
HellaSwagResult evaluate_hellaswag(GPT2& model, int B, int T, const std::vector<HellaSwagExample>& examples,
                                   int rank, int world, const RankSum& sum,
                                   const std::function<void()>& between_rounds = {});

}  // namespace gpt2

#endif  // TRAIN_EVALUATION_H

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
// loss = (sum of the scored negative log-likelihoods) / (their count), and
// perplexity = exp(loss). With S < T every token but the stream's first is
// scored exactly once (count n - 1); with S = T (disjoint windows) the first
// token of every window has no context and is not scored (n - windows).
// Every shard is a stream of its own: no window crosses a shard boundary.
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

// One batch row of window w: inputs[T] = tokens[begin, end) then `pad`;
// targets[i] = tokens[begin + i + 1] where that position is scored, else
// kIgnoreTarget. `tokens` holds tokens[begin, end).
void fill_window_row(const EvalWindow& w, const uint32_t* tokens, int T, int32_t pad, int32_t* inputs,
                     int32_t* targets);

// Writes batch row `row`'s T inputs and targets.
using RowFill = std::function<void(int row, int32_t* inputs, int32_t* targets)>;
// One forward of `rows` (<= B) batch rows filled by `fill`; the rows past them
// read `pad` and score nothing. out[i] = row i's summed loss: the losses of its
// positions whose target is not kIgnoreTarget, added in order into a double.
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

// The evaluation of every window of every stream. Batches of B consecutive
// windows (a partial last one padded with all-ignored rows) are dealt to the
// ranks round-robin; every window's NLL is summed by one rank, the per-window
// sums are exchanged with `sum` once per round of `world` batches, and every
// rank adds them in window order: the result is bitwise the same at any
// world size. `progress(done, total)` (optional) runs after each round.
EvalTotals evaluate_sliding_windows(GPT2& model, const EvalSpec& spec, const TokenReader& read, const RankSum& sum,
                                    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// --eval-only on this rank (every rank calls it). Returns the exit code.
int run_evaluation(const TrainOptions& opts, const DistContext& dist, Communicator& comm);

// ---- HellaSwag -------------------------------------------------------------------------

// HellaSwag in the loop and in --eval-only, scored as
// llm.c's dev/data/hellaswag.py: each example's context `ctx` is followed by
// each of its 4 endings (tokens of " " + ending); an ending's loss is summed
// over its tokens. acc: the lowest sum is the label; acc_norm: the lowest mean
// (sum / its token count). (lm-evaluation-harness's acc_norm divides by the
// ending's characters instead; docs/cli.md.)

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

#endif  // TRAIN_EVALUATION_H

#include "train/evaluation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "dataloader/dataloader.h"
#include "dataloader/shard.h"
#include "distributed/preempt.h"
#include "train/run_plan.h"
#include "util/checked_io.h"

namespace gpt2 {

uint64_t count_windows(uint64_t n, int T, int S) {
  if (n == 0) return 0;
  if (n <= static_cast<uint64_t>(T)) return 1;
  return 1 + (n - T + S - 1) / S;  // the first k with k*S + T >= n, plus one
}

EvalWindow window_at(uint64_t n, int T, int S, uint64_t k) {
  EvalWindow w;
  w.begin = k * S;
  w.end = std::min<uint64_t>(w.begin + T, n);
  const uint64_t prev_end = k == 0 ? 0 : std::min<uint64_t>((k - 1) * S + T, n);
  w.score_from = std::max(prev_end, w.begin + 1);
  return w;
}

void fill_window_row(const EvalWindow& w, const uint32_t* tokens, int T, int32_t pad, int32_t* inputs,
                     int32_t* targets) {
  const uint64_t len = w.end - w.begin;
  for (int i = 0; i < T; i++) {
    inputs[i] = static_cast<uint64_t>(i) < len ? static_cast<int32_t>(tokens[i]) : pad;
    const uint64_t p = w.begin + i + 1;  // the position input i predicts
    targets[i] = (p >= w.score_from && p < w.end) ? static_cast<int32_t>(tokens[p - w.begin]) : kIgnoreTarget;
  }
}

void forward_rows(GPT2& model, int B, int T, int32_t pad, int rows, const RowFill& fill, double* out) {
  std::vector<int32_t> inputs(static_cast<size_t>(B) * T, pad), targets(inputs.size(), kIgnoreTarget);
  for (int b = 0; b < rows; b++) fill(b, &inputs[static_cast<size_t>(b) * T], &targets[static_cast<size_t>(b) * T]);
  model.forward(inputs.data(), targets.data(), B, T);
  const std::vector<float> losses = model.losses();
  for (int b = 0; b < rows; b++) {
    double sum = 0.0;
    for (size_t i = static_cast<size_t>(b) * T; i < static_cast<size_t>(b + 1) * T; i++)
      if (targets[i] != kIgnoreTarget) sum += losses[i];
    out[b] = sum;
  }
}

double EvalTotals::loss() const {
  return tokens ? nll_sum / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
}

double EvalTotals::perplexity() const { return std::exp(loss()); }

namespace {

// Global window numbers across the streams, in stream order.
class WindowIndex {
 public:
  explicit WindowIndex(const EvalSpec& s) : spec_(s) {
    first_.push_back(0);
    for (uint64_t n : s.stream_tokens) first_.push_back(first_.back() + count_windows(n, s.T, s.S));
  }
  uint64_t total() const { return first_.back(); }
  size_t stream_of(uint64_t g) const {
    return static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), g) - first_.begin()) - 1;
  }
  EvalWindow window(size_t stream, uint64_t g) const {
    return window_at(spec_.stream_tokens[stream], spec_.T, spec_.S, g - first_[stream]);
  }
  EvalWindow window(uint64_t g) const { return window(stream_of(g), g); }

 private:
  const EvalSpec& spec_;
  std::vector<uint64_t> first_;  // first global window of each stream; the total last
};

void check_spec(const GPT2& model, const EvalSpec& s) {
  if (s.T < 1 || s.S < 1 || s.S > s.T)
    throw std::runtime_error("sliding-window evaluation: stride " + std::to_string(s.S) + " outside [1, " +
                             std::to_string(s.T) + "] (the context length)");
  if (s.B > model.max_batch() || s.T > model.max_seq())
    throw std::runtime_error("sliding-window evaluation: " + std::to_string(s.B) + "x" + std::to_string(s.T) +
                             " is larger than the model's buffers");
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) throw std::runtime_error("sliding-window evaluation: bad rank");
}

}  // namespace

EvalTotals evaluate_sliding_windows(GPT2& model, const EvalSpec& spec, const TokenReader& read, const RankSum& sum,
                                    const std::function<void(uint64_t, uint64_t)>& progress) {
  check_spec(model, spec);
  const WindowIndex index(spec);
  const int32_t pad = std::min<int32_t>(50256, model.config().vocab_size - 1);
  std::vector<uint32_t> tokens(spec.T);
  const uint64_t total = index.total(), B = spec.B, W = spec.world;
  const uint64_t batches = (total + B - 1) / B, rounds = (batches + W - 1) / W;
  std::vector<double> nll(W * B);
  EvalTotals t;
  t.windows = total;
  for (uint64_t r = 0; r < rounds; r++) {
    std::fill(nll.begin(), nll.end(), 0.0);
    const uint64_t b = r * W + spec.rank;
    const auto fill = [&](int i, int32_t* inputs, int32_t* targets) {
      const size_t stream = index.stream_of(b * B + i);
      const EvalWindow w = index.window(stream, b * B + i);
      read(stream, w.begin, w.end - w.begin, tokens.data());
      fill_window_row(w, tokens.data(), spec.T, pad, inputs, targets);
    };
    if (b < batches)
      forward_rows(model, spec.B, spec.T, pad, static_cast<int>(std::min(total, (b + 1) * B) - b * B), fill,
                   nll.data() + spec.rank * B);
    if (sum) sum(nll);
    const uint64_t g0 = r * W * B, g1 = std::min(total, (r + 1) * W * B);
    for (uint64_t g = g0; g < g1; g++) {
      t.nll_sum += nll[g - g0];
      t.tokens += index.window(g).scored();
    }
    if (progress) progress(g1, total);
  }
  return t;
}

// ---- --eval-only ---------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

// The --val-data shards, opened and length-checked; each one a stream.
struct EvalData {
  std::vector<ShardFile> shards;

  explicit EvalData(const std::string& pattern) {
    for (const std::string& path : expand_shard_pattern(pattern)) shards.emplace_back(path);
  }
  // A reader that refuses ids outside the model's vocabulary, naming the shard.
  TokenReader reader(int vocab_size) const {
    return [this, vocab_size](size_t s, uint64_t first, size_t n, uint32_t* out) {
      shards[s].read(first, n, out);
      for (size_t i = 0; i < n; i++)
        if (out[i] >= static_cast<uint32_t>(vocab_size))
          throw std::runtime_error(shards[s].path() + ": token " + std::to_string(first + i) + " is " +
                                   std::to_string(out[i]) + ", outside the model's vocabulary of " +
                                   std::to_string(vocab_size));
    };
  }
};

struct EvalReport {
  std::string model, data, backend, dtype;
  EvalSpec spec;  // one stream per shard
  EvalTotals totals;
  double seconds = 0.0;
  std::optional<HellaSwagResult> hellaswag;
};

void print_report(const EvalReport& r) {
  const EvalTotals& t = r.totals;
  std::printf("eval model       %s\n", r.model.c_str());
  std::printf("eval data        %s (%zu shard(s), each its own stream)\n", r.data.c_str(),
              r.spec.stream_tokens.size());
  std::printf("eval windows     %llu (context %d, stride %d, %d per forward per rank, %d rank(s), %s %s)\n",
              static_cast<unsigned long long>(t.windows), r.spec.T, r.spec.S, r.spec.B, r.spec.world,
              r.backend.c_str(), r.dtype.c_str());
  std::printf("eval tokens      %llu scored\n", static_cast<unsigned long long>(t.tokens));
  std::printf("eval loss        %.6f\n", t.loss());
  std::printf("eval perplexity  %.4f\n", t.perplexity());
  std::printf("eval time        %.2f s, %.0f tokens/s\n", r.seconds, t.tokens / std::max(r.seconds, 1e-9));
  std::fflush(stdout);
}

void write_report_json(const std::string& path, const EvalReport& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["data"] = r.data;
  j["shards"] = r.spec.stream_tokens.size();
  j["seq_len"] = r.spec.T;
  j["stride"] = r.spec.S;
  j["batch_size"] = r.spec.B;
  j["windows"] = r.totals.windows;
  j["tokens"] = r.totals.tokens;
  j["nll_sum"] = r.totals.nll_sum;
  j["loss"] = r.totals.loss();
  j["perplexity"] = r.totals.perplexity();
  j["world"] = r.spec.world;
  j["backend"] = r.backend;
  j["dtype"] = r.dtype;
  j["seconds"] = r.seconds;
  j["tokens_per_s"] = r.totals.tokens / std::max(r.seconds, 1e-9);
  if (r.hellaswag)
    j["hellaswag"] = {{"n", r.hellaswag->n}, {"acc", r.hellaswag->acc()}, {"acc_norm", r.hellaswag->acc_norm()}};
  write_text_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace

int run_evaluation(const TrainOptions& opts, const DistContext& dist, Communicator& comm) {
  if (dist.is_main()) check_output_path("--eval-json", opts.eval_json, false);  // before the evaluation, not after
  TrainedModel trained(opts, dist, "--eval-only");
  const GPT2Config& cfg = trained.weights.config;
  EvalReport r{trained.path, opts.val_data, trained.backend->name(), precision_name(opts.dtype)};
  EvalSpec& spec = r.spec;
  std::string cap_note;
  spec.T = capped_seq_len(opts, cfg, &cap_note);
  spec.S = opts.eval_stride > 0 ? opts.eval_stride : spec.T;
  spec.B = opts.batch_size;
  spec.rank = dist.rank;
  spec.world = dist.world;
  if (spec.S > spec.T)
    throw UsageError("--eval-stride " + std::to_string(spec.S) + " is larger than the context length " +
                             std::to_string(spec.T) + " (tokens between windows would never be scored)");
  const EvalData data(opts.val_data);
  for (const ShardFile& shard : data.shards) spec.stream_tokens.push_back(shard.count());
  GPT2& model = trained.load(spec.B, spec.T);
  if (dist.is_main() && !cap_note.empty()) std::fprintf(stderr, "%s\n", cap_note.c_str());
  comm.barrier();
  const auto t0 = Clock::now();
  const RankSum sum = [&comm](std::vector<double>& v) { all_reduce(comm, v.data(), v.size(), ReduceOp::kSum); };
  // A stop signal is honoured after the round in flight (every rank agrees).
  const auto stop_check = [&comm] { throw_if_stop_requested(comm); };
  Clock::time_point printed = t0;
  const auto progress = [&](uint64_t done, uint64_t total) {
    // rank 0's progress line on stderr, at most every 10 seconds
    if (dist.is_main() && done < total && Clock::now() - printed >= std::chrono::seconds(10)) {
      printed = Clock::now();
      std::fprintf(stderr, "eval: %llu/%llu windows\n", static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total));
    }
    stop_check();
  };
  try {
    r.totals = evaluate_sliding_windows(model, spec, data.reader(cfg.vocab_size), sum, progress);
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r.totals.tokens == 0) throw std::runtime_error(opts.val_data + ": no token to score (shards of < 2 tokens)");
    if (dist.is_main()) print_report(r);  // before HellaSwag: a stop there keeps the perplexity on stdout
    if (!opts.eval_hellaswag.empty())
      r.hellaswag =
          evaluate_hellaswag(model, spec.B, spec.T, read_hellaswag_for(opts), dist.rank, dist.world, sum, stop_check);
  } catch (const StopRequested& stop) {
    if (dist.is_main())
      std::fprintf(stderr, "--eval-only: %s; no %sresult (exit %d)\n", stop.what(), r.totals.tokens ? "HellaSwag " : "",
                   stopped_exit_code(stop.signum));
    return stopped_exit_code(stop.signum);
  }
  if (dist.is_main() && r.hellaswag)
    std::printf("eval hellaswag   n %llu, acc %.4f, acc_norm %.4f\n", static_cast<unsigned long long>(r.hellaswag->n),
                r.hellaswag->acc(), r.hellaswag->acc_norm());
  if (dist.is_main() && !opts.eval_json.empty()) write_report_json(opts.eval_json, r);
  return 0;
}

// ---- HellaSwag -------------------------------------------------------------------------

namespace {

int parse_label(const nlohmann::json& j, const std::string& where) {
  int label = -1;
  if (j.is_number_integer()) label = j.get<int>();
  else if (j.is_string() && j.get<std::string>().size() == 1) label = j.get<std::string>()[0] - '0';
  if (label < 0 || label > 3) throw std::runtime_error(where + ": \"label\" must be 0, 1, 2 or 3");
  return label;
}

HellaSwagExample parse_example(const std::string& line, const std::string& where, const Tokenizer& tok) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception& e) {
    throw std::runtime_error(where + ": not a JSON object (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("ctx") || !j["ctx"].is_string())
    throw std::runtime_error(where + ": no string \"ctx\"");
  if (!j.contains("endings") || !j["endings"].is_array() || j["endings"].size() != 4)
    throw std::runtime_error(where + ": \"endings\" must be a list of 4 strings");
  if (!j.contains("label")) throw std::runtime_error(where + ": no \"label\"");
  HellaSwagExample ex;
  ex.where = where;
  ex.context = tok.encode(j["ctx"].get<std::string>());
  for (int i = 0; i < 4; i++) {
    if (!j["endings"][i].is_string()) throw std::runtime_error(where + ": \"endings\" must be a list of 4 strings");
    ex.endings[i] = tok.encode(" " + j["endings"][i].get<std::string>());  // as llm.c: " " + ending
    if (ex.endings[i].empty()) throw std::runtime_error(where + ": ending " + std::to_string(i) + " has no token");
  }
  ex.label = parse_label(j["label"], where);
  return ex;
}

// One candidate row (context + ending) as the model reads it in T positions:
// inputs = row[0, len-1), targets = the ending's tokens where they are
// predicted, kIgnoreTarget elsewhere. A row longer than T + 1 tokens loses
// its oldest context tokens; an ending of more than T tokens is an error.
void fill_hellaswag_row(const HellaSwagExample& ex, int ending, int T, int32_t pad, int32_t* inputs,
                        int32_t* targets) {
  const std::vector<uint32_t>& end = ex.endings[ending];
  // the newest context tokens that fit: inputs hold row[0, len - 1)
  const size_t keep = std::min(ex.context.size(), static_cast<size_t>(T) + 1 - end.size());
  std::vector<uint32_t> row(ex.context.end() - static_cast<std::ptrdiff_t>(keep), ex.context.end());
  row.insert(row.end(), end.begin(), end.end());
  for (int i = 0; i < T; i++) {
    const bool in = static_cast<size_t>(i) + 1 < row.size();
    inputs[i] = in ? static_cast<int32_t>(row[i]) : pad;
    // position i predicts row[i + 1]: scored where that is an ending token
    targets[i] = in && static_cast<size_t>(i) + 1 >= keep ? static_cast<int32_t>(row[i + 1]) : kIgnoreTarget;
  }
}

// Each ending is scored in one row of T positions.
void check_endings_fit(const std::vector<HellaSwagExample>& examples, int T) {
  for (const HellaSwagExample& ex : examples)
    for (int i = 0; i < 4; i++)
      if (ex.endings[i].size() > static_cast<size_t>(T))
        throw std::runtime_error(ex.where + ": ending " + std::to_string(i) + " has " +
                                 std::to_string(ex.endings[i].size()) + " tokens, more than the context of " +
                                 std::to_string(T) + " (-T) scores");
}

// 52 bits of an example's tokens and label, in two 26-bit halves: summed over
// up to 2^20 ranks they stay exact in a double.
std::array<double, 2> example_digest(const HellaSwagExample& ex) {
  uint64_t h = fnv1a64(&ex.label, sizeof ex.label);
  for (const auto* t : {&ex.context, &ex.endings[0], &ex.endings[1], &ex.endings[2], &ex.endings[3]}) {
    const uint64_t n = t->size();  // so that tokens cannot move between the lists unnoticed
    h = fnv1a64(t->data(), n * sizeof(uint32_t), fnv1a64(&n, sizeof n, h));
  }
  return {static_cast<double>(h & 0x3FFFFFF), static_cast<double>((h >> 26) & 0x3FFFFFF)};
}

// Ranks holding other examples would sum rows that are not the same rows.
void check_ranks_agree(const std::vector<HellaSwagExample>& examples, int rank, int world, const RankSum& sum) {
  if (world == 1) return;
  std::vector<double> count{static_cast<double>(examples.size())};
  sum(count);
  const std::string file =
      examples.empty() ? "--eval-hellaswag" : examples.front().where.substr(0, examples.front().where.rfind(':'));
  if (count[0] != static_cast<double>(world) * static_cast<double>(examples.size()))
    throw std::runtime_error(file + ": rank " +
                             std::to_string(rank) + " reads " + std::to_string(examples.size()) +
                             " HellaSwag examples, another rank a different number (a different --eval-hellaswag file?)");
  std::vector<double> digests;
  for (const HellaSwagExample& ex : examples)
    for (double d : example_digest(ex)) digests.push_back(d);
  const std::vector<double> mine = digests;
  sum(digests);
  for (size_t i = 0; i < mine.size(); i++)
    if (digests[i] != static_cast<double>(world) * mine[i])
      throw std::runtime_error(examples[i / 2].where + ": this HellaSwag example differs between the ranks (rank " +
                               std::to_string(rank) + " reads another file or version of --eval-hellaswag?)");
}

}  // namespace

std::vector<HellaSwagExample> read_hellaswag_for(const TrainOptions& opts) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("--eval-hellaswag needs the GPT-2 vocabulary: ") + e.what());
  }
  const std::string& path = opts.eval_hellaswag;
  std::istringstream lines(read_text_file(path));
  std::vector<HellaSwagExample> out;
  size_t line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    line_no++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_example(line, path + ":" + std::to_string(line_no), *tok));
  }
  if (out.empty()) throw std::runtime_error(path + ": no HellaSwag example");
  return out;
}

HellaSwagResult evaluate_hellaswag(GPT2& model, int B, int T, const std::vector<HellaSwagExample>& examples,
                                   int rank, int world, const RankSum& sum,
                                   const std::function<void()>& between_rounds) {
  check_endings_fit(examples, T);
  check_ranks_agree(examples, rank, world, sum);
  const size_t rows = examples.size() * 4, per_round = static_cast<size_t>(world) * B;
  const int32_t pad = static_cast<int32_t>(model.config().vocab_size) - 1;
  std::vector<double> loss(rows, 0.0);  // each row's summed loss, from the rank that ran it
  for (size_t round0 = 0; round0 < rows; round0 += per_round) {
    const size_t first = round0 + static_cast<size_t>(rank) * B;  // the last round may leave a rank idle
    const auto fill = [&](int i, int32_t* inputs, int32_t* targets) {
      fill_hellaswag_row(examples[(first + i) / 4], static_cast<int>((first + i) % 4), T, pad, inputs, targets);
    };
    if (first < rows)
      forward_rows(model, B, T, pad, static_cast<int>(std::min<size_t>(B, rows - first)), fill, loss.data() + first);
    else if (model.forward_is_collective())  // the other ranks' forwards need this rank's shards
      forward_rows(model, B, T, pad, 0, fill, nullptr);
    if (between_rounds) between_rounds();
  }
  sum(loss);
  HellaSwagResult res;
  for (size_t e = 0; e < examples.size(); e++) {
    int best = 0, best_norm = 0;
    for (int j = 1; j < 4; j++) {  // the first of equal scores wins, as argmin
      if (loss[e * 4 + j] < loss[e * 4 + best]) best = j;
      const auto mean = [&](int k) { return loss[e * 4 + k] / static_cast<double>(examples[e].endings[k].size()); };
      if (mean(j) < mean(best_norm)) best_norm = j;
    }
    res.n++;
    res.correct += best == examples[e].label;
    res.correct_norm += best_norm == examples[e].label;
  }
  return res;
}

}  // namespace gpt2

#include "train/hellaswag.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/checked_io.h"

namespace gpt2 {

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
  if (end.size() > static_cast<size_t>(T))
    throw std::runtime_error("--eval-hellaswag: an ending of " + std::to_string(end.size()) +
                             " tokens does not fit the context of " + std::to_string(T));
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

}  // namespace

std::vector<HellaSwagExample> read_hellaswag(const std::string& path, const Tokenizer& tok) {
  const std::string text = read_text_file(path);
  std::vector<HellaSwagExample> out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    line_no++;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_example(line, path + ":" + std::to_string(line_no), tok));
  }
  if (out.empty()) throw std::runtime_error(path + ": no HellaSwag example");
  return out;
}

std::vector<HellaSwagExample> read_hellaswag_for(const TrainOptions& opts) {
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_default_location());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("--eval-hellaswag needs the GPT-2 vocabulary: ") + e.what());
  }
  return read_hellaswag(opts.eval_hellaswag, *tok);
}

HellaSwagResult evaluate_hellaswag(GPT2& model, int B, int T, const std::vector<HellaSwagExample>& examples,
                                   int rank, int world, const RankSum& sum) {
  const size_t rows = examples.size() * 4;
  const int32_t pad = static_cast<int32_t>(model.config().vocab_size) - 1;
  std::vector<double> loss(rows, 0.0);  // each row's summed loss, from the rank that ran it
  for (size_t first = static_cast<size_t>(rank) * B; first < rows; first += static_cast<size_t>(world) * B) {
    const auto fill = [&](int i, int32_t* inputs, int32_t* targets) {
      fill_hellaswag_row(examples[(first + i) / 4], static_cast<int>((first + i) % 4), T, pad, inputs, targets);
    };
    forward_rows(model, B, T, pad, static_cast<int>(std::min<size_t>(B, rows - first)), fill, loss.data() + first);
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

#include "dataprep/sft.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "dataloader/loss_mask.h"
#include "dataprep/prep_common.h"

namespace gpt2 {
namespace {

constexpr uint32_t kPad = Tokenizer::kEndOfText;

// Appends the ids of `text` with mask byte `m`.
void append_piece(const Tokenizer& tok, const std::string& text, uint8_t m, SftExample& e) {
  tok.encode_append(text, e.tokens);
  e.mask.resize(e.tokens.size(), m);
}

const std::string& string_field(const nlohmann::json& obj, const std::string& key, const std::string& where,
                                const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw std::runtime_error(where + ": " + what + " has no \"" + key + "\" field");
  if (!it->is_string())
    throw std::runtime_error(where + ": " + what + " field \"" + key + "\" is not a string (" + it->type_name() + ")");
  return it->get_ref<const std::string&>();
}

}  // namespace

SftExample sft_example_from_line(std::string_view line, const SftOptions& o, const Tokenizer& tok,
                                 const std::string& where) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + ": " + e.what());
  }
  if (!doc.is_object()) throw std::runtime_error(where + ": expected a JSON object");
  const bool has_pc = doc.contains(o.prompt_field) || doc.contains(o.completion_field);
  const bool has_messages = doc.contains(o.messages_field);
  if (has_pc && has_messages)
    throw std::runtime_error(where + ": has both \"" + o.messages_field + "\" and \"" + o.prompt_field + "\"/\"" +
                             o.completion_field + "\"; an example takes one form");
  if (!has_pc && !has_messages)
    throw std::runtime_error(where + ": neither \"" + o.prompt_field + "\"/\"" + o.completion_field + "\" nor \"" +
                             o.messages_field + "\" (each SFT line needs one of the two forms)");
  SftExample e;
  try {
    if (has_pc) {
      // TRL's convention: prompt and completion are encoded separately and concatenated.
      append_piece(tok, string_field(doc, o.prompt_field, where, "the line"), 0, e);
      append_piece(tok, string_field(doc, o.completion_field, where, "the line"), 1, e);
      e.tokens.push_back(kPad);
      e.mask.push_back(1);
    } else {
      const nlohmann::json& messages = doc[o.messages_field];
      if (!messages.is_array() || messages.empty())
        throw std::runtime_error(where + ": \"" + o.messages_field + "\" must be a non-empty array of messages");
      for (size_t i = 0; i < messages.size(); ++i) {
        const nlohmann::json& m = messages[i];
        const std::string what = "message " + std::to_string(i + 1);
        if (!m.is_object()) throw std::runtime_error(where + ": " + what + " is not a JSON object");
        const std::string& role = string_field(m, "role", where, what);
        const std::string& content = string_field(m, "content", where, what);
        const bool last = i + 1 == messages.size();
        if (role == "system") {
          if (i != 0) throw std::runtime_error(where + ": " + what + ": a system message must be the first message");
          append_piece(tok, content + "\n\n", 0, e);
        } else if (role == "user") {
          append_piece(tok, "User: " + content + "\n", 0, e);
        } else if (role == "assistant") {
          append_piece(tok, "Assistant:", 0, e);
          append_piece(tok, " " + content, 1, e);
          if (last) {
            e.tokens.push_back(kPad);
            e.mask.push_back(1);
          } else {
            append_piece(tok, "\n", 1, e);
          }
        } else {
          throw std::runtime_error(where + ": " + what + ": unknown role \"" + role +
                                   "\" (expected system, user or assistant)");
        }
        if (last && role != "assistant")
          throw std::runtime_error(where + ": the last message must be the assistant's (got \"" + role + "\")");
      }
    }
  } catch (const std::runtime_error& err) {
    const std::string msg = err.what();
    if (msg.compare(0, where.size(), where) == 0) throw;
    throw std::runtime_error(where + ": " + msg);  // the tokenizer's (invalid UTF-8)
  }
  if (!e.mask.empty()) e.mask[0] = 0;  // nothing precedes the first token
  return e;
}

// ---------------------------------------------------------------- packer

SftPacker::SftPacker(int T, bool pack, BlockFn on_block)
    : T_(T), pack_(pack), on_block_(std::move(on_block)), tokens_(static_cast<size_t>(T)), mask_(static_cast<size_t>(T)) {
  if (T <= 0) throw std::runtime_error("SftPacker: T must be positive");
}

void SftPacker::add(const SftExample& e) {
  const size_t n = e.tokens.size();
  if (n == 0 || n > static_cast<size_t>(T_) || e.mask.size() != n)
    throw std::runtime_error("SftPacker: example of " + std::to_string(n) + " tokens does not fit T=" +
                             std::to_string(T_));
  if (used_ > 0 && (!pack_ || used_ + n > static_cast<size_t>(T_))) emit();
  std::copy(e.tokens.begin(), e.tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(used_));
  std::copy(e.mask.begin(), e.mask.end(), mask_.begin() + static_cast<std::ptrdiff_t>(used_));
  mask_[used_] = 0;  // an example's first token is never a target
  used_ += n;
  ++examples_;
}

void SftPacker::finish() {
  if (used_ > 0) emit();
}

void SftPacker::emit() {
  std::fill(tokens_.begin() + static_cast<std::ptrdiff_t>(used_), tokens_.end(), kPad);
  std::fill(mask_.begin() + static_cast<std::ptrdiff_t>(used_), mask_.end(), 0);
  pad_tokens_ += static_cast<uint64_t>(T_) - used_;
  ++blocks_;
  const uint32_t examples = examples_;
  used_ = 0;
  examples_ = 0;
  on_block_(tokens_.data(), mask_.data(), examples);
}

// ---------------------------------------------------------------- output

namespace {

// One split's shards: blocks in, shards of `blocks_per_shard` blocks + a trailing pad token out.
class SplitWriter {
 public:
  SplitWriter(const SftOptions& o, std::string split, uint64_t first_index, uint64_t blocks_per_shard,
              std::vector<std::string>& written)
      : o_(o), split_(std::move(split)), index_(first_index), blocks_per_shard_(blocks_per_shard), written_(written) {}

  void block(const uint32_t* tokens, const uint8_t* mask, uint32_t examples) {
    if (!shard_) open();
    shard_->append(tokens, static_cast<size_t>(o_.T));
    mask_->append(mask, static_cast<size_t>(o_.T));
    mask_->add_examples(examples);
    if (++blocks_ == blocks_per_shard_) close();
  }

  void finish() {
    if (shard_) close();
  }

 private:
  void open() {
    if (o_.no_shard_index && shards_ > 0)
      throw std::runtime_error(shard_output_path(o_.out_prefix, split_, 0, true) + ": the " + split_ +
                               " split needs more than one shard of " + with_commas(blocks_per_shard_) +
                               " blocks; drop --no-shard-index");
    path_ = shard_output_path(o_.out_prefix, split_, index_++, o_.no_shard_index);
    shard_ = std::make_unique<ShardWriter>(path_, o_.width);
    mask_ = std::make_unique<LossMaskWriter>(loss_mask_path(path_), o_.T);
    blocks_ = 0;
    ++shards_;
  }

  void close() {
    const uint32_t pad = kPad;
    const uint8_t zero = 0;
    shard_->append(&pad, 1);
    mask_->append(&zero, 1);
    // The sidecar goes into place first: a loader globbing *.bin never sees a shard without it.
    mask_->close();
    shard_->close();
    written_.push_back(loss_mask_path(path_));
    written_.push_back(path_);
    if (o_.verbose)
      std::fprintf(stderr, "wrote %s tokens (%s blocks of %d + 1 pad) to %s and its loss mask\n",
                   with_commas(shard_->count()).c_str(), with_commas(blocks_).c_str(), o_.T, path_.c_str());
    shard_.reset();
    mask_.reset();
  }

  const SftOptions& o_;
  std::string split_;
  uint64_t index_, blocks_per_shard_;
  std::vector<std::string>& written_;
  std::string path_;
  std::unique_ptr<ShardWriter> shard_;
  std::unique_ptr<LossMaskWriter> mask_;
  uint64_t blocks_ = 0, shards_ = 0;
};

std::string percent(uint64_t part, uint64_t whole) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f%%", whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return s;
}

}  // namespace

SftSummary run_sft(const SftOptions& o, const Tokenizer& tok) {
  if (o.T <= 0) throw std::runtime_error("--sft needs --seq-len T (the training run's sequence length)");
  if (o.out_prefix.empty()) throw std::runtime_error("--out-prefix is required");
  make_parent_dirs(o.out_prefix);
  SftSummary s;
  const uint64_t T = static_cast<uint64_t>(o.T);
  const uint64_t train_blocks_per_shard = o.shard_tokens == 0 ? UINT64_MAX : std::max<uint64_t>(1, o.shard_tokens / T);
  SplitWriter val(o, "val", 0, UINT64_MAX, s.written);
  SplitWriter train(o, "train", 1, train_blocks_per_shard, s.written);
  SftPacker val_packer(o.T, o.pack, [&](const uint32_t* t, const uint8_t* m, uint32_t n) { val.block(t, m, n); });
  SftPacker train_packer(o.T, o.pack, [&](const uint32_t* t, const uint8_t* m, uint32_t n) { train.block(t, m, n); });

  for (const std::string& path : o.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
    std::string line;
    uint64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are skipped
      const std::string where = path + ":" + std::to_string(line_no);
      if (o.replace_invalid && find_invalid_utf8(line) != std::string::npos) line = replace_invalid_utf8(line);
      SftExample e = sft_example_from_line(line, o, tok, where);
      if (e.tokens.size() > T) {
        if (!o.truncate)
          throw std::runtime_error(where + ": example of " + with_commas(e.tokens.size()) +
                                   " tokens is longer than --seq-len " + std::to_string(o.T) +
                                   " (--sft-truncate error; the default truncates)");
        e.tokens.resize(T);
        e.mask.resize(T);
        ++s.truncated;
      }
      for (uint8_t m : e.mask) s.supervised += m;
      const bool to_val = s.examples < o.val_examples;
      (to_val ? val_packer : train_packer).add(e);
      ++(to_val ? s.val_examples : s.train_examples);
      ++s.examples;
    }
    if (in.bad()) throw std::runtime_error(path + ": read error");
  }
  val_packer.finish();
  train_packer.finish();
  val.finish();
  train.finish();
  s.val_blocks = val_packer.blocks();
  s.train_blocks = train_packer.blocks();
  s.pad_tokens = val_packer.pad_tokens() + train_packer.pad_tokens();
  remove_stale_outputs(o.out_prefix, s.written, o.verbose);

  const uint64_t block_tokens = (s.val_blocks + s.train_blocks) * T;
  std::fprintf(stderr, "sft: %s examples (%s val, %s train) in %s blocks of %d tokens (%s val, %s train), %s\n",
               with_commas(s.examples).c_str(), with_commas(s.val_examples).c_str(),
               with_commas(s.train_examples).c_str(), with_commas(s.val_blocks + s.train_blocks).c_str(), o.T,
               with_commas(s.val_blocks).c_str(), with_commas(s.train_blocks).c_str(),
               o.pack ? "packed" : "one example per block (--no-pack)");
  std::fprintf(stderr, "sft: %s supervised tokens (%s of %s block tokens), padding %s (%s pad tokens)\n",
               with_commas(s.supervised).c_str(), percent(s.supervised, block_tokens).c_str(),
               with_commas(block_tokens).c_str(), percent(s.pad_tokens, block_tokens).c_str(),
               with_commas(s.pad_tokens).c_str());
  std::fprintf(stderr, "sft: truncated %s of %s examples to %d tokens\n", with_commas(s.truncated).c_str(),
               with_commas(s.examples).c_str(), o.T);
  if (s.examples == 0) std::fprintf(stderr, "note: the inputs hold no examples; no shard was written\n");
  else if (s.train_examples == 0)
    std::fprintf(stderr, "warning: all %s examples went to the validation shard and no train shard was written; "
                 "pass a smaller --val-examples\n", with_commas(s.examples).c_str());
  return s;
}

}  // namespace gpt2

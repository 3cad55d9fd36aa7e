// prepare_data --sft: JSONL instruction data -> packed token shards + loss-mask sidecars.
//
// Each JSONL line is one example, either {"prompt": P, "completion": C} or
// {"messages": [{"role": "system"|"user"|"assistant", "content": ...}, ...]}; it becomes a token
// sequence with a per-token mask (1 = supervised target). Examples are packed into blocks of
// exactly T tokens (never split across blocks, the rest padded with <|endoftext|> / mask 0); a
// shard is its blocks followed by one trailing pad token, so the DataLoader's rows (b*T ..
// b*T+T+1) coincide with blocks. Full description: docs/sft.md.
#ifndef GPT2_DATAPREP_SFT_H
#define GPT2_DATAPREP_SFT_H

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dataloader/shard.h"
#include "tokenizer/tokenizer.h"

namespace gpt2 {

struct SftOptions {
  std::vector<std::string> inputs;   // JSONL files, read in order
  std::string out_prefix;            // PREFIX_val_000000.bin/.mask, PREFIX_train_000001.bin/.mask, ...
  int T = 0;                         // --seq-len: block (row) length, required
  bool pack = true;                  // false (--no-pack): one example per block
  bool truncate = true;              // false (--sft-truncate error): longer examples are an error
  uint64_t val_examples = 0;         // the first N examples go to the val shard
  uint64_t shard_tokens = 100'000'000;  // train shard size, rounded down to whole blocks (>= 1 block)
  bool no_shard_index = false;       // PREFIX_val.bin / PREFIX_train.bin
  TokenWidth width = TokenWidth::kU16;
  bool replace_invalid = false;      // --invalid-utf8 replace
  bool verbose = true;               // "wrote ..." lines (the summary is always printed)
  std::string prompt_field = "prompt", completion_field = "completion", messages_field = "messages";
};

struct SftExample {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;  // same length; 1 = supervised target; mask[0] is always 0
};

// One JSONL line -> an example (not truncated). Throws std::runtime_error starting with `where`
// ("FILE:LINE") on malformed JSON, a line with neither form or both, a non-string field, an
// unknown role, a system message after the first, no final assistant message, invalid UTF-8.
SftExample sft_example_from_line(std::string_view line, const SftOptions& options, const Tokenizer& tok,
                                 const std::string& where);

// Greedy packer, in input order. add() puts the example in the current block when it fits
// (and --pack), else emits the current block (padded with 50256, mask 0) and starts a new one.
class SftPacker {
 public:
  // Called once per finished block with exactly T tokens, T mask bytes and its example count.
  using BlockFn = std::function<void(const uint32_t* tokens, const uint8_t* mask, uint32_t examples)>;
  SftPacker(int T, bool pack, BlockFn on_block);
  void add(const SftExample& example);  // 1 <= size <= T (truncate first)
  void finish();                        // emits a partly filled block
  uint64_t blocks() const { return blocks_; }
  uint64_t pad_tokens() const { return pad_tokens_; }

 private:
  void emit();
  int T_;
  bool pack_;
  BlockFn on_block_;
  std::vector<uint32_t> tokens_;
  std::vector<uint8_t> mask_;
  size_t used_ = 0;
  uint32_t examples_ = 0;
  uint64_t blocks_ = 0, pad_tokens_ = 0;
};

struct SftSummary {
  uint64_t examples = 0, val_examples = 0, train_examples = 0;
  uint64_t val_blocks = 0, train_blocks = 0;
  uint64_t supervised = 0;  // mask-1 tokens
  uint64_t pad_tokens = 0;  // padding inside blocks (not counting each shard's trailing pad token)
  uint64_t truncated = 0;
  std::vector<std::string> written;  // every .bin and .mask, in order
};

// The whole SFT mode: reads every input, writes the shards and sidecars, removes stale outputs
// of an earlier run into the prefix, prints the summary to stderr.
SftSummary run_sft(const SftOptions& options, const Tokenizer& tok);

}  // namespace gpt2

#endif  // GPT2_DATAPREP_SFT_H

// Distributed, optionally shuffled, exactly resumable loader of token shards.
//
// A "window" is B*T+1 contiguous tokens starting at a multiple of B*T inside
// one shard (inputs = first B*T, targets = last B*T). A shard of n tokens holds
// (n-1)/(B*T) windows. Rank r's k-th call in a shard reads window
// order[k*world + r]: the ranks of one call read consecutive windows, so N ranks
// see exactly the windows 1 rank sees with N micro-batches (grad_accum = N).
// An optimizer step (grad_accum calls) never straddles shards: at its start, if
// fewer than world*grad_accum windows remain, the loader moves to the next shard
// (the next epoch after the last one). Full semantics: docs/dataloader.md.
//
// Loss masks (SFT data, docs/sft.md): when the shards have loss-mask sidecars
// (dataloader/loss_mask.h; all of them or none), next_batch sets targets[j] = -1
// wherever the mask byte of that target token is 0.
#ifndef GPT2_DATALOADER_DATALOADER_H
#define GPT2_DATALOADER_DATALOADER_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dataloader/loss_mask.h"
#include "dataloader/shard.h"
#include "util/rng.h"

namespace gpt2 {

struct DataLoaderOptions {
  std::string pattern;      // file, or glob (sorted); also a comma-separated list of globs
  int B = 0, T = 0;
  int rank = 0, world = 1;  // data-parallel position
  int grad_accum = 1;       // micro-batches per optimizer step on this rank
  bool shuffle = false;     // training default on (the trainer sets it); validation never shuffles
  uint64_t seed = 0;
  uint32_t vocab_size = 50257;  // ids >= this are an error naming the file and offset
};

// Expands a pattern into shard paths: each comma-separated entry is a glob
// whose matches are sorted bytewise; entries are concatenated in order. A
// pattern naming an existing file is taken literally (even with commas).
// Throws when an entry matches nothing or a file is listed twice.
std::vector<std::string> expand_shard_pattern(const std::string& pattern);

// Fisher-Yates permutation of [0, n) drawn from `rng` (util/rng.h: splitmix64,
// identical on every platform and compiler, so shuffled orders are
// reproducible across machines and resumes).
std::vector<uint64_t> random_permutation(uint64_t n, Rng& rng);

class DataLoader {
 public:
  explicit DataLoader(const DataLoaderOptions& options);

  // Fills B*T inputs and the B*T targets (inputs shifted by one token). With loss
  // masks, a target whose mask byte is 0 is -1 (the trainer ignores it).
  void next_batch(int32_t* inputs, int32_t* targets);
  // Back to the start of epoch 0 (validation calls this before each eval).
  void reset();

  // Exact position, identical on every rank (any rank may save it, all may load
  // it). Versioned text "key value" lines; see docs/dataloader.md.
  std::vector<uint8_t> save_state() const;
  // Throws std::runtime_error if the state is malformed or was saved for other
  // shards, B, T, seed, shuffle or world*grad_accum (or, mid-step, another world).
  void load_state(const std::vector<uint8_t>& state);

  uint64_t epoch() const { return epoch_; }
  size_t num_shards() const { return shards_.size(); }
  uint64_t total_tokens() const { return total_tokens_; }
  // True when the shards have loss-mask sidecars (then every shard has one).
  bool has_loss_mask() const { return has_mask_; }
  // Windows read in one epoch by all ranks together: sum over shards of
  // floor(windows / S) * S with S = world*grad_accum. Steps per epoch = this / S.
  uint64_t samples_per_epoch() const { return samples_per_epoch_; }

  // Introspection for logs and tests.
  const std::vector<std::string>& files() const { return files_; }
  size_t shard_position() const { return shard_pos_; }      // index into this epoch's shard order
  size_t current_shard() const { return shard_order_[shard_pos_]; }  // index into files()
  uint64_t cursor() const { return cursor_; }               // windows consumed in this shard, all ranks
  uint64_t windows_in_shard(size_t file_index) const { return shards_[file_index].windows; }

 private:
  struct Shard {
    uint64_t count = 0;    // tokens
    uint64_t windows = 0;  // (count-1) / (B*T)
    TokenWidth width = TokenWidth::kU16;
    bool ids_checked = false;   // token ids (and mask bytes) scanned once
  };

  void begin_epoch(uint64_t epoch);   // shard order for `epoch`
  void enter_shard();                 // open, scan once, window order
  void advance_shard();
  uint64_t window_at(uint64_t i) const { return options_.shuffle ? window_order_[i] : i; }
  uint64_t fingerprint() const;
  std::string where() const;          // "dataloader 'PATTERN'" for messages
  void validate_loss_masks();         // sets has_mask_; throws on a missing or mismatched sidecar

  DataLoaderOptions options_;
  uint64_t tokens_per_window_ = 0;    // B*T (a window reads one more)
  uint64_t step_windows_ = 0;         // world * grad_accum
  std::vector<std::string> files_;
  std::vector<Shard> shards_;
  uint64_t total_tokens_ = 0, samples_per_epoch_ = 0;

  // Position: everything save_state() records.
  uint64_t epoch_ = 0;
  size_t shard_pos_ = 0;
  uint64_t cursor_ = 0;
  int call_in_step_ = 0;

  // Derived from the position.
  std::vector<size_t> shard_order_;
  std::vector<uint64_t> window_order_;  // empty without shuffle (identity)
  ShardFile file_;
  std::vector<uint32_t> buffer_;        // one window
  bool has_mask_ = false;
  LossMaskFile mask_file_;              // the current shard's sidecar (with has_mask_)
  std::vector<uint8_t> mask_buffer_;    // mask bytes of one window's targets
};

}  // namespace gpt2

#endif  // GPT2_DATALOADER_DATALOADER_H

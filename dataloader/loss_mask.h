// Loss-mask sidecar files: one byte per token of a token shard saying whether that token is a
// supervised TARGET (1: the loss for predicting token i from tokens < i counts) or not (0).
// Written by `prepare_data --sft` next to each shard, read by the DataLoader, which turns the
// targets of unsupervised tokens into -1. See docs/sft.md and docs/formats.md.
//
//   path      the shard's path with a trailing ".bin" replaced by ".mask" (else path + ".mask")
//   header    256 little-endian int32: [0] magic 20241123, [1] version 1,
//             [2]/[3] token count low/high 32 bits (== the shard's), [4] the row length T the
//             examples were packed for (0 = not packed), [5] examples (informational), rest 0
//   payload   count bytes, each 0 or 1; file size == 1024 + count exactly
#ifndef GPT2_DATALOADER_LOSS_MASK_H
#define GPT2_DATALOADER_LOSS_MASK_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dataloader/file_io.h"

namespace gpt2 {

constexpr int32_t kLossMaskMagic = 20241123, kLossMaskVersion = 1;
constexpr size_t kLossMaskHeaderBytes = 1024;

// "x/a_train_000001.bin" -> "x/a_train_000001.mask"; "x/data" -> "x/data.mask".
std::string loss_mask_path(const std::string& shard_path);

struct LossMaskInfo {
  uint64_t count = 0;     // tokens (== mask bytes)
  int32_t T = 0;          // row length the examples were packed for; 0 = any
  uint32_t examples = 0;  // informational
};

// Validates a header (`n` bytes available) against the file size. Throws std::runtime_error
// naming `path` on a short file, bad magic or version, negative T, or a size != 1024 + count.
LossMaskInfo parse_loss_mask_header(const uint8_t* header, size_t n, uint64_t file_size,
                                    const std::string& path);

// Throws std::runtime_error naming `path` and the token index of the first byte that is
// neither 0 nor 1. `first_index` is the token index of mask[0] (for the message).
void check_loss_mask_bytes(const uint8_t* mask, size_t n, uint64_t first_index, const std::string& path);

// Streaming, atomic writer (like ShardWriter): writes PATH.tmp, close() writes the header,
// fsyncs and renames to PATH; destroyed without close() it removes the tmp file. Bytes other
// than 0 and 1 are an error naming the file.
class LossMaskWriter {
 public:
  LossMaskWriter(const std::string& path, int32_t T);
  LossMaskWriter(const LossMaskWriter&) = delete;
  LossMaskWriter& operator=(const LossMaskWriter&) = delete;
  ~LossMaskWriter();
  void append(const uint8_t* mask, size_t n);
  void add_examples(uint32_t n) { examples_ += n; }
  uint64_t count() const { return count_; }
  void close();

 private:
  int32_t T_;  // before out_: checked before the tmp file is created
  uint32_t examples_ = 0;
  fileio::AtomicFileWriter out_;
  uint64_t count_ = 0;
};

// Whole file at once.
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask, int32_t T,
                     uint32_t examples = 0);
// Reads and validates a whole file (header, size, every byte 0/1).
std::vector<uint8_t> read_loss_mask(const std::string& path, LossMaskInfo* info = nullptr);

// An open, header-validated sidecar for random access by token index (pread). Move-only.
class LossMaskFile {
 public:
  LossMaskFile() = default;
  explicit LossMaskFile(const std::string& path);
  LossMaskFile(LossMaskFile&& other) noexcept = default;
  LossMaskFile& operator=(LossMaskFile&& other) noexcept = default;
  LossMaskFile(const LossMaskFile&) = delete;
  LossMaskFile& operator=(const LossMaskFile&) = delete;
  ~LossMaskFile() = default;

  const std::string& path() const { return file_.path(); }
  const LossMaskInfo& info() const { return info_; }
  uint64_t count() const { return info_.count; }
  bool is_open() const { return file_.is_open(); }

  // Mask bytes of tokens [first, first + n), each checked to be 0 or 1. Throws on a range past
  // the end, an I/O error or a bad byte.
  void read(uint64_t first, size_t n, uint8_t* out) const;
  // Scans every byte once in bounded memory.
  void check_all() const;

 private:
  fileio::ReadOnlyFile file_;
  LossMaskInfo info_;
};

}  // namespace gpt2

#endif  // GPT2_DATALOADER_LOSS_MASK_H

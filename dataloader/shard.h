// Token shard files (llm.c's format): a 1024-byte header of 256 little-endian
// int32 followed by the tokens.
//   header[0] magic   20240520 (uint16 tokens) or 20240801 (uint32 tokens)
//   header[1] version 1 (uint16) or 7 (uint32)
//   header[2] token count, low 32 bits  (llm.c reads it as int32: identical
//   header[3] token count, high 32 bits  for every shard below 2^31 tokens)
//   header[4..255] zero
// The file size must be exactly 1024 + width * count. See docs/dataloader.md.
#ifndef GPT2_DATALOADER_SHARD_H
#define GPT2_DATALOADER_SHARD_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dataloader/file_io.h"

namespace gpt2 {

constexpr int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;  // uint16 tokens
constexpr int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 7;  // uint32 tokens
constexpr size_t kShardHeaderBytes = 1024;  // 256 int32

enum class TokenWidth { kU16, kU32 };

inline size_t token_bytes(TokenWidth width) { return width == TokenWidth::kU16 ? 2 : 4; }

// Byte offset of token `index` in a shard file; 64-bit so shards above 2 GiB
// (1.07e9 uint16 tokens) address correctly.
inline uint64_t shard_token_offset(uint64_t index, TokenWidth width) {
  return kShardHeaderBytes + index * token_bytes(width);
}

struct ShardInfo {
  TokenWidth width = TokenWidth::kU16;
  uint64_t count = 0;  // number of tokens
};

// Validates a header (`n` bytes available, at least kShardHeaderBytes needed)
// against the file's size. Throws std::runtime_error naming `path` on a short
// header, bad magic, bad version, or a size other than 1024 + width*count.
ShardInfo parse_shard_header(const uint8_t* header, size_t n, uint64_t file_size,
                             const std::string& path);

// Throws std::runtime_error naming `path` and the token index of the first id
// >= vocab_size. `first_index` is the shard index of tokens[0] (for the message).
void check_token_ids(const uint8_t* tokens, size_t n, TokenWidth width, uint32_t vocab_size,
                     uint64_t first_index, const std::string& path);

// Streaming, atomic writer: writes PATH.tmp, appends tokens in bounded memory,
// close() patches the header count, fsyncs, renames to PATH. Destructor without
// close() removes the tmp file. Ids must fit the width (u16: < 65536).
class ShardWriter {
 public:
  ShardWriter(const std::string& path, TokenWidth width);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();
  void append(const uint32_t* tokens, size_t n);
  uint64_t count() const { return count_; }
  void close();

 private:
  fileio::AtomicFileWriter out_;
  TokenWidth width_;
  uint64_t count_ = 0;
};

// Convenience: whole shard at once.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width);

// Read + validate a whole shard (header, size == 1024 + width*count, ids <
// vocab_size when vocab_size > 0).
std::vector<uint32_t> read_shard(const std::string& path, uint32_t vocab_size = 0);

// An open, header-validated shard for random access by token index (pread,
// 64-bit offsets). Move-only; closes the file on destruction.
class ShardFile {
 public:
  ShardFile() = default;
  explicit ShardFile(const std::string& path);
  ShardFile(ShardFile&& other) noexcept = default;
  ShardFile& operator=(ShardFile&& other) noexcept = default;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;
  ~ShardFile() = default;

  const std::string& path() const { return file_.path(); }
  TokenWidth width() const { return info_.width; }
  uint64_t count() const { return info_.count; }
  bool is_open() const { return file_.is_open(); }

  // Reads tokens [first, first + n) as raw little-endian bytes of the shard's
  // width into `out` (n * token_bytes bytes). Throws on a range past the end or
  // an I/O error (file truncated since open).
  void read_raw(uint64_t first, size_t n, uint8_t* out) const;
  // Same, widened to uint32.
  void read(uint64_t first, size_t n, uint32_t* out) const;
  // Scans every token once in bounded memory; throws on an id >= vocab_size.
  void check_ids(uint32_t vocab_size) const;

 private:
  fileio::ReadOnlyFile file_;
  ShardInfo info_;
};

}  // namespace gpt2

#endif  // GPT2_DATALOADER_SHARD_H

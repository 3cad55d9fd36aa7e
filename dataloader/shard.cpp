#include "dataloader/shard.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "shard files are little-endian; this code reads them by memcpy");

namespace gpt2 {
using namespace fileio;
namespace {

constexpr size_t kIoChunkTokens = 1 << 20;  // bounded memory for writes and scans

}  // namespace

ShardInfo parse_shard_header(const uint8_t* header, size_t n, uint64_t file_size,
                             const std::string& path) {
  check_header_present(n, file_size, kShardHeaderBytes, path, "shard");
  const int32_t magic = header_word(header, 0), version = header_word(header, 1);
  ShardInfo info;
  if (magic == kShardMagicU16) {
    info.width = TokenWidth::kU16;
    if (version != kShardVersionU16)
      throw file_error(path, "bad version " + std::to_string(version) + " for magic " +
                                 std::to_string(magic) + " (expected " +
                                 std::to_string(kShardVersionU16) + ")");
  } else if (magic == kShardMagicU32) {
    info.width = TokenWidth::kU32;
    if (version != kShardVersionU32)
      throw file_error(path, "bad version " + std::to_string(version) + " for magic " +
                                 std::to_string(magic) + " (expected " +
                                 std::to_string(kShardVersionU32) + ")");
  } else {
    throw file_error(path, "bad magic " + std::to_string(magic) + " (expected " +
                               std::to_string(kShardMagicU16) + " for uint16 tokens or " +
                               std::to_string(kShardMagicU32) + " for uint32 tokens)");
  }
  info.count = header_count(header);
  // Compare in token units first so width*count cannot overflow 64 bits.
  const uint64_t payload = file_size - kShardHeaderBytes;
  const uint64_t width = token_bytes(info.width);
  if (payload % width != 0 || payload / width != info.count) {
    const bool truncated = payload / width < info.count;
    throw file_error(path, std::string(truncated ? "truncated" : "oversized") + " shard: header says " +
                               std::to_string(info.count) + " tokens (" +
                               std::to_string(info.count <= (UINT64_MAX - 1024) / width
                                                  ? 1024 + width * info.count
                                                  : UINT64_MAX) +
                               " bytes) but the file has " + std::to_string(file_size) + " bytes");
  }
  return info;
}

void check_token_ids(const uint8_t* tokens, size_t n, TokenWidth width, uint32_t vocab_size,
                     uint64_t first_index, const std::string& path) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t id;
    if (width == TokenWidth::kU16) {
      uint16_t v;
      std::memcpy(&v, tokens + 2 * i, 2);
      id = v;
    } else {
      std::memcpy(&id, tokens + 4 * i, 4);
    }
    if (id >= vocab_size) {
      const uint64_t index = first_index + i;
      throw file_error(path, "token id " + std::to_string(id) + " >= vocab size " +
                                 std::to_string(vocab_size) + " at token " + std::to_string(index) +
                                 " (byte offset " + std::to_string(shard_token_offset(index, width)) +
                                 ")");
    }
  }
}

// ---------------------------------------------------------------- ShardWriter

ShardWriter::ShardWriter(const std::string& path, TokenWidth width)
    : out_(path, kShardHeaderBytes, kIoChunkTokens * token_bytes(width)), width_(width) {}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(const uint32_t* tokens, size_t n) {
  out_.check_open();
  if (width_ == TokenWidth::kU16)
    for (size_t i = 0; i < n; ++i)
      if (tokens[i] > 0xFFFF)
        throw file_error(out_.path(), "token id " + std::to_string(tokens[i]) + " at token " +
                                          std::to_string(count_ + i) +
                                          " does not fit a uint16 shard (use the uint32 format)");
  while (n > 0) {
    const size_t take = std::min(n, kIoChunkTokens);
    uint8_t* dst = out_.extend(take * token_bytes(width_));
    if (width_ == TokenWidth::kU16) {
      for (size_t i = 0; i < take; ++i) {
        const uint16_t v = static_cast<uint16_t>(tokens[i]);
        std::memcpy(dst + 2 * i, &v, 2);
      }
    } else {
      std::memcpy(dst, tokens, take * 4);
    }
    count_ += take;
    tokens += take;
    n -= take;
  }
}

void ShardWriter::close() {
  int32_t header[256] = {};
  header[0] = width_ == TokenWidth::kU16 ? kShardMagicU16 : kShardMagicU32;
  header[1] = width_ == TokenWidth::kU16 ? kShardVersionU16 : kShardVersionU32;
  set_header_count(header, count_);
  out_.finish(reinterpret_cast<const uint8_t*>(header));
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width) {
  ShardWriter writer(path, width);
  writer.append(tokens.data(), tokens.size());
  writer.close();
}

std::vector<uint32_t> read_shard(const std::string& path, uint32_t vocab_size) {
  ShardFile file(path);
  if (vocab_size > 0) file.check_ids(vocab_size);
  std::vector<uint32_t> tokens(file.count());
  file.read(0, tokens.size(), tokens.data());
  return tokens;
}

// ---------------------------------------------------------------- ShardFile

ShardFile::ShardFile(const std::string& path) : file_(path) {
  uint8_t header[kShardHeaderBytes] = {};
  info_ = parse_shard_header(header, file_.read_prefix(header, kShardHeaderBytes), file_.size(), path);
}

void ShardFile::read_raw(uint64_t first, size_t n, uint8_t* out) const {
  if (!file_.is_open()) throw std::runtime_error("ShardFile: read from a closed shard");
  if (first > info_.count || n > info_.count - first)
    throw file_error(path(), "read of tokens [" + std::to_string(first) + ", " +
                                std::to_string(first + n) + ") past the end (" +
                                std::to_string(info_.count) + " tokens)");
  file_.read_at(shard_token_offset(first, info_.width), n * token_bytes(info_.width), out);
}

void ShardFile::read(uint64_t first, size_t n, uint32_t* out) const {
  if (info_.width == TokenWidth::kU32) {
    read_raw(first, n, reinterpret_cast<uint8_t*>(out));
    return;
  }
  // Read uint16 into the upper half of `out`, then widen front to back: element
  // i reads bytes [n*2 + 2i, +2) and writes [4i, +4), never ahead of unread data.
  uint8_t* bytes = reinterpret_cast<uint8_t*>(out);
  read_raw(first, n, bytes + 2 * n);
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, bytes + 2 * n + 2 * i, 2);
    out[i] = v;
  }
}

void ShardFile::check_ids(uint32_t vocab_size) const {
  std::vector<uint8_t> chunk(kIoChunkTokens * token_bytes(info_.width));
  for (uint64_t first = 0; first < info_.count; first += kIoChunkTokens) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kIoChunkTokens, info_.count - first));
    read_raw(first, n, chunk.data());
    check_token_ids(chunk.data(), n, info_.width, vocab_size, first, path());
  }
}

}  // namespace gpt2

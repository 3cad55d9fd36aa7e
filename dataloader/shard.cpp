#include "dataloader/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <stdexcept>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "shard files are little-endian; this code reads them by memcpy");

namespace gpt2 {
namespace {

std::runtime_error shard_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

int32_t header_word(const uint8_t* header, int i) {
  int32_t v;
  std::memcpy(&v, header + 4 * i, 4);
  return v;
}

// Writes all of [data, data+n) at `offset`, retrying short writes and EINTR.
void pwrite_all(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw shard_error(path, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

// Reads exactly n bytes at `offset`; a short read means the file shrank.
void pread_all(int fd, uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw shard_error(path, "read failed at byte " + std::to_string(offset) + ": " + errno_text());
    }
    if (r == 0)
      throw shard_error(path, "unexpected end of file at byte " + std::to_string(offset) +
                                  " (file truncated while open?)");
    data += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

constexpr size_t kIoChunkTokens = 1 << 20;  // bounded memory for writes and scans

}  // namespace

ShardInfo parse_shard_header(const uint8_t* header, size_t n, uint64_t file_size,
                             const std::string& path) {
  if (n < kShardHeaderBytes || file_size < kShardHeaderBytes)
    throw shard_error(path, "file of " + std::to_string(file_size) +
                                " bytes is shorter than the 1024-byte shard header");
  const int32_t magic = header_word(header, 0), version = header_word(header, 1);
  ShardInfo info;
  if (magic == kShardMagicU16) {
    info.width = TokenWidth::kU16;
    if (version != kShardVersionU16)
      throw shard_error(path, "bad version " + std::to_string(version) + " for magic " +
                                  std::to_string(magic) + " (expected " +
                                  std::to_string(kShardVersionU16) + ")");
  } else if (magic == kShardMagicU32) {
    info.width = TokenWidth::kU32;
    if (version != kShardVersionU32)
      throw shard_error(path, "bad version " + std::to_string(version) + " for magic " +
                                  std::to_string(magic) + " (expected " +
                                  std::to_string(kShardVersionU32) + ")");
  } else {
    throw shard_error(path, "bad magic " + std::to_string(magic) + " (expected " +
                                std::to_string(kShardMagicU16) + " for uint16 tokens or " +
                                std::to_string(kShardMagicU32) + " for uint32 tokens)");
  }
  info.count = static_cast<uint64_t>(static_cast<uint32_t>(header_word(header, 2))) |
               (static_cast<uint64_t>(static_cast<uint32_t>(header_word(header, 3))) << 32);
  // Compare in token units first so width*count cannot overflow 64 bits.
  const uint64_t payload = file_size - kShardHeaderBytes;
  const uint64_t width = token_bytes(info.width);
  if (payload % width != 0 || payload / width != info.count) {
    const bool truncated = payload / width < info.count;
    throw shard_error(path, std::string(truncated ? "truncated" : "oversized") + " shard: header says " +
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
      throw shard_error(path, "token id " + std::to_string(id) + " >= vocab size " +
                                  std::to_string(vocab_size) + " at token " + std::to_string(index) +
                                  " (byte offset " + std::to_string(shard_token_offset(index, width)) +
                                  ")");
    }
  }
}

// ---------------------------------------------------------------- ShardWriter

ShardWriter::ShardWriter(const std::string& path, TokenWidth width)
    : path_(path), tmp_path_(path + ".tmp"), width_(width) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw shard_error(tmp_path_, "cannot create: " + errno_text());
  // Placeholder header (count 0); close() writes the real one.
  buffer_.assign(kShardHeaderBytes, 0);
  buffer_.reserve(kShardHeaderBytes + kIoChunkTokens * token_bytes(width_));
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void ShardWriter::flush_buffer() {
  if (buffer_.empty()) return;
  const uint8_t* data = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    ssize_t w = ::write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw shard_error(tmp_path_, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  buffer_.clear();
}

void ShardWriter::append(const uint32_t* tokens, size_t n) {
  if (fd_ < 0) throw shard_error(path_, "append after close");
  const size_t width = token_bytes(width_);
  while (n > 0) {
    // Fill the buffer up to one chunk, converting in place, then flush.
    const size_t used = buffer_.size();
    const size_t room = kIoChunkTokens - std::min(kIoChunkTokens, used / width);
    const size_t take = std::min(n, room == 0 ? kIoChunkTokens : room);
    buffer_.resize(used + take * width);
    uint8_t* dst = buffer_.data() + used;
    for (size_t i = 0; i < take; ++i) {
      const uint32_t id = tokens[i];
      if (width_ == TokenWidth::kU16) {
        if (id > 0xFFFF) {
          buffer_.resize(used + i * width);  // keep what was valid; the file is abandoned anyway
          throw shard_error(path_, "token id " + std::to_string(id) + " at token " +
                                       std::to_string(count_ + i) +
                                       " does not fit a uint16 shard (use the uint32 format)");
        }
        const uint16_t v = static_cast<uint16_t>(id);
        std::memcpy(dst + 2 * i, &v, 2);
      } else {
        std::memcpy(dst + 4 * i, &id, 4);
      }
    }
    count_ += take;
    tokens += take;
    n -= take;
    if (buffer_.size() >= kIoChunkTokens * width) flush_buffer();
  }
}

void ShardWriter::close() {
  if (fd_ < 0) throw shard_error(path_, "close called twice");
  flush_buffer();
  int32_t header[256] = {};
  header[0] = width_ == TokenWidth::kU16 ? kShardMagicU16 : kShardMagicU32;
  header[1] = width_ == TokenWidth::kU16 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(static_cast<uint32_t>(count_ & 0xFFFFFFFFu));
  header[3] = static_cast<int32_t>(static_cast<uint32_t>(count_ >> 32));
  pwrite_all(fd_, reinterpret_cast<const uint8_t*>(header), sizeof(header), 0, tmp_path_);
  if (::fsync(fd_) != 0) throw shard_error(tmp_path_, "fsync failed: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_path_.c_str());
    throw shard_error(tmp_path_, "close failed: " + errno_text());
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_path_.c_str());
    throw shard_error(path_, "cannot rename " + tmp_path_ + " into place: " + why);
  }
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

ShardFile::ShardFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO matched by a glob must not hang the open (it then fails
  // the regular-file check); it has no effect on regular files.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw shard_error(path, "cannot open: " + errno_text());
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) throw shard_error(path, "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) throw shard_error(path, "not a regular file");
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    uint8_t header[kShardHeaderBytes] = {};
    if (file_size >= kShardHeaderBytes) pread_all(fd_, header, kShardHeaderBytes, 0, path);
    info_ = parse_shard_header(header, file_size >= kShardHeaderBytes ? kShardHeaderBytes : 0,
                               file_size, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

ShardFile::ShardFile(ShardFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), info_(other.info_) {
  other.fd_ = -1;
}

ShardFile& ShardFile::operator=(ShardFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    info_ = other.info_;
    other.fd_ = -1;
  }
  return *this;
}

ShardFile::~ShardFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardFile::read_raw(uint64_t first, size_t n, uint8_t* out) const {
  if (fd_ < 0) throw std::runtime_error("ShardFile: read from a closed shard");
  if (first > info_.count || n > info_.count - first)
    throw shard_error(path_, "read of tokens [" + std::to_string(first) + ", " +
                                 std::to_string(first + n) + ") past the end (" +
                                 std::to_string(info_.count) + " tokens)");
  pread_all(fd_, out, n * token_bytes(info_.width), shard_token_offset(first, info_.width), path_);
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
    check_token_ids(chunk.data(), n, info_.width, vocab_size, first, path_);
  }
}

}  // namespace gpt2

#include "dataloader/loss_mask.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loss-mask headers are little-endian int32");

namespace gpt2 {
namespace {

std::runtime_error mask_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

int32_t word(const uint8_t* header, int i) {
  int32_t v;
  std::memcpy(&v, header + 4 * i, 4);
  return v;
}

void write_all_at(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw mask_error(path, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void read_all_at(int fd, uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw mask_error(path, "read failed at byte " + std::to_string(offset) + ": " + errno_text());
    }
    if (r == 0)
      throw mask_error(path, "unexpected end of file at byte " + std::to_string(offset) +
                                 " (file truncated while open?)");
    data += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

constexpr size_t kChunk = 1 << 20;

}  // namespace

std::string loss_mask_path(const std::string& shard_path) {
  const std::string bin = ".bin";
  if (shard_path.size() > bin.size() &&
      shard_path.compare(shard_path.size() - bin.size(), bin.size(), bin) == 0)
    return shard_path.substr(0, shard_path.size() - bin.size()) + ".mask";
  return shard_path + ".mask";
}

LossMaskInfo parse_loss_mask_header(const uint8_t* header, size_t n, uint64_t file_size,
                                    const std::string& path) {
  if (n < kLossMaskHeaderBytes || file_size < kLossMaskHeaderBytes)
    throw mask_error(path, "file of " + std::to_string(file_size) +
                               " bytes is shorter than the 1024-byte loss-mask header");
  const int32_t magic = word(header, 0), version = word(header, 1);
  if (magic != kLossMaskMagic)
    throw mask_error(path, "bad magic " + std::to_string(magic) + " (expected " +
                               std::to_string(kLossMaskMagic) + " for a loss-mask file)");
  if (version != kLossMaskVersion)
    throw mask_error(path, "bad loss-mask version " + std::to_string(version) + " (expected " +
                               std::to_string(kLossMaskVersion) + ")");
  LossMaskInfo info;
  info.count = static_cast<uint64_t>(static_cast<uint32_t>(word(header, 2))) |
               (static_cast<uint64_t>(static_cast<uint32_t>(word(header, 3))) << 32);
  info.T = word(header, 4);
  info.examples = static_cast<uint32_t>(word(header, 5));
  if (info.T < 0) throw mask_error(path, "bad packed row length T=" + std::to_string(info.T));
  const uint64_t payload = file_size - kLossMaskHeaderBytes;
  if (payload != info.count)
    throw mask_error(path, std::string(payload < info.count ? "truncated" : "oversized") +
                               " loss mask: header says " + std::to_string(info.count) + " tokens (" +
                               (info.count <= UINT64_MAX - kLossMaskHeaderBytes
                                    ? std::to_string(kLossMaskHeaderBytes + info.count)
                                    : std::string("too many")) +
                               " bytes) but the file has " + std::to_string(file_size) + " bytes");
  return info;
}

void check_loss_mask_bytes(const uint8_t* mask, size_t n, uint64_t first_index, const std::string& path) {
  for (size_t i = 0; i < n; ++i)
    if (mask[i] > 1) {
      const uint64_t index = first_index + i;
      throw mask_error(path, "bad loss-mask byte " + std::to_string(mask[i]) + " at token " +
                                 std::to_string(index) + " (byte offset " +
                                 std::to_string(kLossMaskHeaderBytes + index) + "; expected 0 or 1)");
    }
}

// ---------------------------------------------------------------- writer

LossMaskWriter::LossMaskWriter(const std::string& path, int32_t T)
    : path_(path), tmp_path_(path + ".tmp"), T_(T) {
  if (T < 0) throw mask_error(path, "negative packed row length T=" + std::to_string(T));
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw mask_error(tmp_path_, "cannot create: " + errno_text());
  buffer_.assign(kLossMaskHeaderBytes, 0);  // placeholder header; close() writes the real one
  buffer_.reserve(kLossMaskHeaderBytes + kChunk);
}

LossMaskWriter::~LossMaskWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void LossMaskWriter::flush_buffer() {
  const uint8_t* data = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw mask_error(tmp_path_, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  buffer_.clear();
}

void LossMaskWriter::append(const uint8_t* mask, size_t n) {
  if (fd_ < 0) throw mask_error(path_, "append after close");
  check_loss_mask_bytes(mask, n, count_, path_);
  while (n > 0) {
    const size_t take = std::min(n, kChunk - std::min(kChunk, buffer_.size()));
    buffer_.insert(buffer_.end(), mask, mask + take);
    mask += take;
    n -= take;
    count_ += take;
    if (buffer_.size() >= kChunk) flush_buffer();
  }
}

void LossMaskWriter::close() {
  if (fd_ < 0) throw mask_error(path_, "close called twice");
  flush_buffer();
  int32_t header[256] = {};
  header[0] = kLossMaskMagic;
  header[1] = kLossMaskVersion;
  header[2] = static_cast<int32_t>(static_cast<uint32_t>(count_ & 0xFFFFFFFFu));
  header[3] = static_cast<int32_t>(static_cast<uint32_t>(count_ >> 32));
  header[4] = T_;
  header[5] = static_cast<int32_t>(examples_);
  write_all_at(fd_, reinterpret_cast<const uint8_t*>(header), sizeof(header), 0, tmp_path_);
  if (::fsync(fd_) != 0) throw mask_error(tmp_path_, "fsync failed: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_path_.c_str());
    throw mask_error(tmp_path_, "close failed: " + errno_text());
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_path_.c_str());
    throw mask_error(path_, "cannot rename " + tmp_path_ + " into place: " + why);
  }
}

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask, int32_t T,
                     uint32_t examples) {
  LossMaskWriter writer(path, T);
  writer.append(mask.data(), mask.size());
  writer.add_examples(examples);
  writer.close();
}

std::vector<uint8_t> read_loss_mask(const std::string& path, LossMaskInfo* info) {
  LossMaskFile file(path);
  std::vector<uint8_t> mask(file.count());
  file.read(0, mask.size(), mask.data());
  if (info) *info = file.info();
  return mask;
}

// ---------------------------------------------------------------- reader

LossMaskFile::LossMaskFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw mask_error(path, "cannot open loss mask: " + errno_text());
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) throw mask_error(path, "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) throw mask_error(path, "not a regular file");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    uint8_t header[kLossMaskHeaderBytes] = {};
    if (size >= kLossMaskHeaderBytes) read_all_at(fd_, header, kLossMaskHeaderBytes, 0, path);
    info_ = parse_loss_mask_header(header, size >= kLossMaskHeaderBytes ? kLossMaskHeaderBytes : 0, size, path);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

LossMaskFile::LossMaskFile(LossMaskFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), info_(other.info_) {
  other.fd_ = -1;
}

LossMaskFile& LossMaskFile::operator=(LossMaskFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    info_ = other.info_;
    other.fd_ = -1;
  }
  return *this;
}

LossMaskFile::~LossMaskFile() {
  if (fd_ >= 0) ::close(fd_);
}

void LossMaskFile::read(uint64_t first, size_t n, uint8_t* out) const {
  if (fd_ < 0) throw std::runtime_error("LossMaskFile: read from a closed file");
  if (first > info_.count || n > info_.count - first)
    throw mask_error(path_, "read of tokens [" + std::to_string(first) + ", " + std::to_string(first + n) +
                                ") past the end (" + std::to_string(info_.count) + " tokens)");
  read_all_at(fd_, out, n, kLossMaskHeaderBytes + first, path_);
  check_loss_mask_bytes(out, n, first, path_);
}

void LossMaskFile::check_all() const {
  std::vector<uint8_t> chunk(kChunk);
  for (uint64_t first = 0; first < info_.count; first += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, info_.count - first));
    read(first, n, chunk.data());
  }
}

}  // namespace gpt2

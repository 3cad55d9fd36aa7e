#include "dataloader/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "shard and loss-mask headers are little-endian; this code reads them by memcpy");

namespace gpt2::fileio {

std::runtime_error file_error(const std::string& path, const std::string& what) {
  return std::runtime_error(path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

int32_t header_word(const uint8_t* header, int i) {
  int32_t v;
  std::memcpy(&v, header + 4 * i, 4);
  return v;
}

uint64_t header_count(const uint8_t* header) {
  return static_cast<uint64_t>(static_cast<uint32_t>(header_word(header, 2))) |
         (static_cast<uint64_t>(static_cast<uint32_t>(header_word(header, 3))) << 32);
}

void set_header_count(int32_t* header, uint64_t count) {
  header[2] = static_cast<int32_t>(static_cast<uint32_t>(count & 0xFFFFFFFFu));
  header[3] = static_cast<int32_t>(static_cast<uint32_t>(count >> 32));
}

void check_header_present(size_t n, uint64_t file_size, size_t header_bytes, const std::string& path,
                          const char* kind) {
  if (n < header_bytes || file_size < header_bytes)
    throw file_error(path, "file of " + std::to_string(file_size) + " bytes is shorter than the " +
                               std::to_string(header_bytes) + "-byte " + kind + " header");
}

void pwrite_all(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw file_error(path, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void pread_all(int fd, uint8_t* data, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw file_error(path, "read failed at byte " + std::to_string(offset) + ": " + errno_text());
    }
    if (r == 0)
      throw file_error(path, "unexpected end of file at byte " + std::to_string(offset) +
                                 " (file truncated while open?)");
    data += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

// ---------------------------------------------------------------- ReadOnlyFile

ReadOnlyFile::ReadOnlyFile(const std::string& path, const char* open_what) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw file_error(path, std::string(open_what) + ": " + errno_text());
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const std::string why = errno_text();
    reset();
    throw file_error(path, "cannot stat: " + why);
  }
  if (!S_ISREG(st.st_mode)) {
    reset();
    throw file_error(path, "not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    reset();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() { reset(); }

void ReadOnlyFile::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

size_t ReadOnlyFile::read_prefix(uint8_t* out, size_t n) const {
  if (size_ < n) return 0;
  read_at(0, n, out);
  return n;
}

// ---------------------------------------------------------------- AtomicFileWriter

AtomicFileWriter::AtomicFileWriter(const std::string& path, size_t header_bytes, size_t buffer_bytes)
    : path_(path), tmp_path_(path + ".tmp"), header_bytes_(header_bytes), buffer_bytes_(buffer_bytes) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw file_error(tmp_path_, "cannot create: " + errno_text());
  buffer_.assign(header_bytes_, 0);  // placeholder; finish() writes the real header
  buffer_.reserve(header_bytes_ + buffer_bytes_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFileWriter::check_open() const {
  if (fd_ < 0) throw file_error(path_, "append after close");
}

void AtomicFileWriter::flush() {
  const uint8_t* data = buffer_.data();
  size_t n = buffer_.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw file_error(tmp_path_, "write failed: " + errno_text());
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  buffer_.clear();
}

uint8_t* AtomicFileWriter::extend(size_t n) {
  check_open();
  if (buffer_.size() + n > buffer_bytes_) flush();
  const size_t used = buffer_.size();
  buffer_.resize(used + n);
  return buffer_.data() + used;
}

void AtomicFileWriter::append(const uint8_t* data, size_t n) {
  check_open();
  while (n > 0) {
    const size_t take = std::min(n, buffer_bytes_);
    std::memcpy(extend(take), data, take);
    data += take;
    n -= take;
  }
}

void AtomicFileWriter::finish(const uint8_t* header) {
  if (fd_ < 0) throw file_error(path_, "close called twice");
  flush();
  pwrite_all(fd_, header, header_bytes_, 0, tmp_path_);
  if (::fsync(fd_) != 0) throw file_error(tmp_path_, "fsync failed: " + errno_text());
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) {
    ::unlink(tmp_path_.c_str());
    throw file_error(tmp_path_, "close failed: " + errno_text());
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp_path_.c_str());
    throw file_error(path_, "cannot rename " + tmp_path_ + " into place: " + why);
  }
}

}  // namespace gpt2::fileio

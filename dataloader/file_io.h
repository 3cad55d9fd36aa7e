// File plumbing shared by the shard and loss-mask formats: positional reads and
// writes that retry EINTR and short transfers, a read-only regular-file handle,
// and an atomic header+payload writer. Every error is "PATH: what".
#ifndef GPT2_DATALOADER_FILE_IO_H
#define GPT2_DATALOADER_FILE_IO_H

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2::fileio {

std::runtime_error file_error(const std::string& path, const std::string& what);
std::string errno_text();  // strerror(errno)

// Little-endian int32 number `i` of a header.
int32_t header_word(const uint8_t* header, int i);
// Both formats keep a 64-bit count in header words 2 (low) and 3 (high).
uint64_t header_count(const uint8_t* header);
void set_header_count(int32_t* header, uint64_t count);
// Throws "file of N bytes is shorter than the H-byte KIND header" unless both
// `n` (header bytes read) and `file_size` reach `header_bytes`.
void check_header_present(size_t n, uint64_t file_size, size_t header_bytes, const std::string& path,
                          const char* kind);

// Writes all of [data, data+n) at `offset`.
void pwrite_all(int fd, const uint8_t* data, size_t n, uint64_t offset, const std::string& path);
// Reads exactly n bytes at `offset`; a short read means the file shrank.
void pread_all(int fd, uint8_t* data, size_t n, uint64_t offset, const std::string& path);

// An open, read-only regular file. O_NONBLOCK so a FIFO fails the regular-file
// check instead of hanging the open. Move-only; closes on destruction.
class ReadOnlyFile {
 public:
  ReadOnlyFile() = default;
  // `open_what` prefixes the open error ("cannot open: <strerror>").
  explicit ReadOnlyFile(const std::string& path, const char* open_what = "cannot open");
  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  bool is_open() const { return fd_ >= 0; }
  void read_at(uint64_t offset, size_t n, uint8_t* out) const { pread_all(fd_, out, n, offset, path_); }
  // Fills out[0, n) from the file's start and returns n, or returns 0 (out
  // untouched) when the file is shorter than n.
  size_t read_prefix(uint8_t* out, size_t n) const;

 private:
  void reset();
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Streaming, atomic writer: creates PATH.tmp with a zero placeholder header of
// `header_bytes`, buffers payload appends (about `buffer_bytes` at a time);
// finish() writes the real header, fsyncs and renames to PATH. Destroyed
// unfinished it removes the tmp file.
class AtomicFileWriter {
 public:
  AtomicFileWriter(const std::string& path, size_t header_bytes, size_t buffer_bytes);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  const std::string& path() const { return path_; }
  void check_open() const;  // throws "append after close" once finished
  // Appends n payload bytes and returns them for the caller to fill; valid until
  // the next call.
  uint8_t* extend(size_t n);
  void append(const uint8_t* data, size_t n);
  // `header` holds header_bytes bytes.
  void finish(const uint8_t* header);

 private:
  void flush();
  std::string path_, tmp_path_;
  size_t header_bytes_, buffer_bytes_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
};

}  // namespace gpt2::fileio

#endif  // GPT2_DATALOADER_FILE_IO_H

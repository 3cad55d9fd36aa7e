// File I/O that never fails silently: every error names the file and what went
// wrong (std::runtime_error). Atomic writes go to PATH.tmp, are fsync'ed and
// renamed over PATH, so a crash leaves either the old file or the new one.
#ifndef UTIL_CHECKED_IO_H
#define UTIL_CHECKED_IO_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace gpt2 {

// A read-only file with exact reads: a short read is an error ("truncated").
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  void read(void* dst, size_t bytes, const char* what);  // what: "header", "parameters", ...
  uint64_t size() const { return size_; }
  uint64_t position() const { return pos_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  FILE* f_ = nullptr;
  uint64_t size_ = 0, pos_ = 0;
};

// Writes PATH.tmp (a shorter temp name beside it where PATH's name is too long
// to take ".tmp"); commit() flushes, fsyncs and renames it to PATH (and fsyncs
// the directory). Destroyed without commit(): the temp file is removed.
// Only a regular file is replaced that way: "-" is standard output, a path
// naming the open file of stdout or stderr (/dev/stdout, /proc/self/fd/1, the
// file stdout is redirected to) is written through that stream, keeping what
// it already holds, and a path that exists as something else (a device such as
// /dev/full, a FIFO) is written in place, where a failed write is still an
// error. A symlink is followed: its target is replaced, the link stays.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(const std::string& path);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;
  void write(const void* src, size_t bytes);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;  // tmp_path_ empty: written in place
  FILE* f_ = nullptr;
  bool is_stdout_ = false;
};

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);  // exists and is a directory (a symlink to one too)
std::string base_name(const std::string& path);  // what follows the last '/' (all of it without one)
// Checks at start that an output can be written later: PATH itself when it is
// "-" or exists as a non-regular file, else the directory it goes in (for a
// directory output, PATH itself, created now when missing). The error names the
// flag, the path and why. `directory_output`: PATH names a directory to write into.
void check_output_path(const std::string& flag, const std::string& path, bool directory_output);
void make_directories(const std::string& path);  // mkdir -p; error names the path
void fsync_directory(const std::string& dir);
std::string read_text_file(const std::string& path);
// Every byte of PATH, NULs included, read to its end (so also a FIFO or a
// device); "-" is standard input, named "<stdin>" in errors. A directory, a
// file that cannot be opened and a read error are errors naming the path.
// While no byte comes, while_waiting runs about every 250 ms (and after a
// signal): it may throw to end the wait.
std::string read_all_bytes(const std::string& path, const std::function<void()>& while_waiting = {});
// Throws, naming the flag, where the last name of PATH passes its directory's
// NAME_MAX (255 where the directory cannot say): no such file can be made.
void check_name_fits(const std::string& flag, const std::string& path);
void write_text_file_atomic(const std::string& path, const std::string& text);

// 64-bit FNV-1a, used as a content checksum in state files.
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ULL);

}  // namespace gpt2

#endif  // UTIL_CHECKED_IO_H

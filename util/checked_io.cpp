#include "util/checked_io.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

namespace gpt2 {

namespace {
std::string errno_text() { return std::strerror(errno); }

// The longest file name the directory of PATH takes (255 where it cannot say,
// as for a directory not made yet).
size_t name_limit_beside(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  return name_max > 0 ? static_cast<size_t>(name_max) : 255;
}

// PATH.tmp, or where that name would pass the directory's name limit (a
// PATH of 252 to 255 characters' name), a shorter one beside it: the name cut
// short and a hash of the whole, so two long names still get two temp files.
std::string temp_path_for(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = path.substr(dir.size());
  const size_t limit = name_limit_beside(path);
  if (base.size() + 4 <= limit) return path + ".tmp";
  char hash[18];
  std::snprintf(hash, sizeof hash, ".%016zx", std::hash<std::string>{}(base));
  return dir + base.substr(0, limit - 4 - 17) + hash + ".tmp";
}
}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw std::runtime_error(path + ": cannot open for reading: " + errno_text());
  struct stat st;
  if (fstat(fileno(f_), &st) != 0) {
    std::fclose(f_);
    throw std::runtime_error(path + ": cannot stat: " + errno_text());
  }
  if (S_ISDIR(st.st_mode)) {
    std::fclose(f_);
    throw std::runtime_error(path + ": is a directory, expected a file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (f_) std::fclose(f_);
}

void InputFile::read(void* dst, size_t bytes, const char* what) {
  size_t got = std::fread(dst, 1, bytes, f_);
  if (got != bytes) {
    if (std::ferror(f_))
      throw std::runtime_error(path_ + ": read error in " + what + ": " + errno_text());
    throw std::runtime_error(path_ + ": truncated: " + what + " needs " + std::to_string(bytes) +
                             " bytes at offset " + std::to_string(pos_) + ", file has " +
                             std::to_string(size_) + " bytes");
  }
  pos_ += bytes;
}

namespace {
// The path a write replaces: a symlink's target (resolved), else the path itself.
std::string replaced_path(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return path;
  char* real = realpath(path.c_str(), nullptr);
  if (!real) return path;  // a dangling link: the write replaces it with a regular file
  std::string r(real);
  std::free(real);
  return r;
}
bool exists_not_regular(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}
// The standard stream (stdout, stderr) whose open file `path` is (/dev/stdout,
// a link to /proc/self/fd/1, the very file stdout is redirected to), or
// nullptr. Such a path is written through the stream: a rename, or a reopen
// that truncates, would discard what the stream already holds.
FILE* standard_stream_at(const std::string& path) {
  struct stat p;
  if (stat(path.c_str(), &p) != 0) return nullptr;
  const std::pair<int, FILE*> streams[] = {{STDOUT_FILENO, stdout}, {STDERR_FILENO, stderr}};
  for (const auto& [fd, stream] : streams) {
    struct stat s;
    if (fstat(fd, &s) == 0 && s.st_dev == p.st_dev && s.st_ino == p.st_ino) return stream;
  }
  return nullptr;
}
}  // namespace

AtomicOutputFile::AtomicOutputFile(const std::string& path) : path_(path) {
  FILE* stream = path == "-" ? stdout : standard_stream_at(path);
  if (stream) {
    is_stdout_ = true;
    f_ = stream;
    return;
  }
  if (exists_not_regular(path)) {  // a device, FIFO or socket: never replaced
    f_ = std::fopen(path.c_str(), "wb");
    if (!f_) throw std::runtime_error(path + ": cannot open for writing: " + errno_text());
    return;
  }
  path_ = replaced_path(path);
  tmp_path_ = temp_path_for(path_);
  f_ = std::fopen(tmp_path_.c_str(), "wb");
  if (!f_) throw std::runtime_error(tmp_path_ + ": cannot open for writing: " + errno_text());
}

AtomicOutputFile::~AtomicOutputFile() {
  if (f_ && !is_stdout_) {
    std::fclose(f_);
    if (!tmp_path_.empty()) std::remove(tmp_path_.c_str());
  }
}

void AtomicOutputFile::write(const void* src, size_t bytes) {
  if (bytes && std::fwrite(src, 1, bytes, f_) != bytes)
    throw std::runtime_error((tmp_path_.empty() ? path_ : tmp_path_) + ": write failed: " + errno_text());
}

void AtomicOutputFile::commit() {
  if (tmp_path_.empty()) {  // in place: flushed (a device's error shows here), not synced or renamed
    const bool ok = std::fflush(f_) == 0;
    const std::string err = ok ? "" : errno_text();
    if (!is_stdout_ && std::fclose(f_) != 0 && ok) {
      f_ = nullptr;
      throw std::runtime_error(path_ + ": close failed: " + errno_text());
    }
    f_ = nullptr;
    if (!ok) throw std::runtime_error(path_ + ": write failed: " + err);
    return;
  }
  if (std::fflush(f_) != 0 || fsync(fileno(f_)) != 0)
    throw std::runtime_error(tmp_path_ + ": flush/fsync failed: " + errno_text());
  if (std::fclose(f_) != 0) {
    f_ = nullptr;
    std::remove(tmp_path_.c_str());
    throw std::runtime_error(tmp_path_ + ": close failed: " + errno_text());
  }
  f_ = nullptr;
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::remove(tmp_path_.c_str());
    throw std::runtime_error(path_ + ": rename from temp file failed: " + errno_text());
  }
  size_t slash = path_.find_last_of('/');
  fsync_directory(slash == std::string::npos ? "." : path_.substr(0, slash));
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void check_output_path(const std::string& flag, const std::string& path, bool directory_output) {
  const std::string what = flag + " " + path;
  if (path.empty()) return;
  if (!directory_output && (path == "-" || exists_not_regular(path))) {
    if (path != "-" && access(path.c_str(), W_OK) != 0)
      throw std::runtime_error(what + ": not writable: " + errno_text());
    return;
  }
  std::string dir = path;
  if (!directory_output) {
    const std::string target = replaced_path(path);
    const size_t slash = target.find_last_of('/');
    dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (!directory_output) throw std::runtime_error(what + ": directory " + dir + " does not exist");
    try {
      make_directories(dir);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + ": " + e.what());
    }
  } else if (!S_ISDIR(st.st_mode)) {
    throw std::runtime_error(what + ": " + dir + " exists and is not a directory");
  }
  if (access(dir.c_str(), W_OK) != 0) throw std::runtime_error(what + ": directory " + dir + " is not writable: " + errno_text());
  // access() says yes to root everywhere, also where nothing can be created (/proc, a
  // read-only mount): create and remove a probe file, so those fail now, not after the work.
  const std::string probe = dir + "/.gpt2_write_probe." + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) throw std::runtime_error(what + ": cannot create a file in directory " + dir + ": " + errno_text());
  close(fd);
  unlink(probe.c_str());
}

void make_directories(const std::string& path) {
  if (path.empty()) return;
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw std::runtime_error(partial + ": cannot create directory: " + errno_text());
  }
  if (!is_directory(path)) throw std::runtime_error(path + ": exists and is not a directory");
}

void fsync_directory(const std::string& dir) {
  int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems do not allow it
  fsync(fd);
  close(fd);
}

std::string read_text_file(const std::string& path) {
  InputFile in(path);
  std::string s(in.size(), '\0');
  in.read(s.data(), s.size(), "contents");
  return s;
}

std::string read_all_bytes(const std::string& path, const std::function<void()>& while_waiting) {
  const bool is_stdin = path == "-";
  const std::string name = is_stdin ? "<stdin>" : path;
  FILE* f = is_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(name + ": cannot open for reading: " + errno_text());
  struct Closer {
    FILE* f;
    bool owned;
    ~Closer() { if (owned) std::fclose(f); }
  } closer{f, !is_stdin};
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
    throw std::runtime_error(name + ": is a directory, expected a file");
  std::string bytes;
  char chunk[1 << 16];
  for (pollfd p{fileno(f), POLLIN, 0};;) {
    // Waits in slices: the stop handlers' SA_RESTART resumes a blocked read,
    // so a silent pipe would otherwise hold the caller until it closes.
    const int ready = poll(&p, 1, 250);
    if (ready == 0 || (ready < 0 && errno == EINTR)) {
      if (while_waiting) while_waiting();
      continue;
    }
    const ssize_t got = ready < 0 ? -1 : read(p.fd, chunk, sizeof chunk);
    if (got == 0) return bytes;
    if (got < 0 && errno != EINTR) throw std::runtime_error(name + ": read error: " + errno_text());
    if (got > 0) bytes.append(chunk, static_cast<size_t>(got));
  }
}

void check_name_fits(const std::string& flag, const std::string& path) {
  const size_t name = base_name(path).size(), limit = name_limit_beside(path);
  if (name > limit)
    throw std::runtime_error(flag + " " + path + ": a file name of " + std::to_string(name) +
                             " characters, more than its directory allows (NAME_MAX " + std::to_string(limit) + ")");
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  AtomicOutputFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t seed) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; i++) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace gpt2

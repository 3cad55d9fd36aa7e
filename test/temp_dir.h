// The C++ tests' one scratch-directory helper. TempDir is a fresh directory
// removed with its files when it goes out of scope; temp_dir(name) is one kept
// until the test process exits, for tests that hold only its path. With KEEP=1
// in the environment both stay, to look at them after a failure.
#ifndef GPT2_TEST_TEMP_DIR_H
#define GPT2_TEST_TEMP_DIR_H

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gpt2 {

class TempDir {
 public:
  // PARENT/PREFIX.XXXXXX; PARENT defaults to $TMPDIR, else /tmp.
  explicit TempDir(const std::string& prefix = "gpt2_test", std::string parent = "") {
    if (parent.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    }
    std::filesystem::create_directories(parent);
    std::string templ = parent + "/" + prefix + ".XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    path_ = templ;
  }
  ~TempDir() {
    if (std::getenv("KEEP") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// build/test/<one directory per process>/NAME, emptied and created. The
// process's directory is a TempDir that the process's exit removes.
inline std::string temp_dir(const char* name) {
  static const TempDir process_dir("unit", "build/test");
  const std::string d = process_dir.file(name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace gpt2

#endif  // GPT2_TEST_TEMP_DIR_H

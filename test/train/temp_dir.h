// A fresh per-process scratch directory under build/test/train for the trainer's unit tests.
#ifndef TEST_TRAIN_TEMP_DIR_H
#define TEST_TRAIN_TEMP_DIR_H

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "util/checked_io.h"

namespace gpt2 {

// The directories temp_dir made, removed when the test process exits (kept with
// KEEP=1 in the environment, to look at them after a failure).
class TempDirs {
 public:
  static TempDirs& instance() {
    static TempDirs dirs;
    return dirs;
  }
  void add(const std::string& d) { dirs_.push_back(d); }
  ~TempDirs() {
    if (std::getenv("KEEP") != nullptr) return;
    for (const std::string& d : dirs_) std::system(("rm -rf " + d).c_str());
  }

 private:
  std::vector<std::string> dirs_;
};

// build/test/train/NAME.PID, emptied and created.
inline std::string temp_dir(const char* name) {
  std::string d = "build/test/train/" + std::string(name) + "." + std::to_string(getpid());
  std::system(("rm -rf " + d).c_str());
  make_directories(d);
  TempDirs::instance().add(d);
  return d;
}

}  // namespace gpt2

#endif  // TEST_TRAIN_TEMP_DIR_H

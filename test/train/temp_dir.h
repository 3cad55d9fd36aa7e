// A fresh per-process scratch directory under build/test/train for the trainer's unit tests.
#ifndef TEST_TRAIN_TEMP_DIR_H
#define TEST_TRAIN_TEMP_DIR_H

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "util/checked_io.h"

namespace gpt2 {

// build/test/train/NAME.PID, emptied and created.
inline std::string temp_dir(const char* name) {
  std::string d = "build/test/train/" + std::string(name) + "." + std::to_string(getpid());
  std::system(("rm -rf " + d).c_str());
  make_directories(d);
  return d;
}

}  // namespace gpt2

#endif  // TEST_TRAIN_TEMP_DIR_H

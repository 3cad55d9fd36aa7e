// The error of a command line that parses but cannot run as given.
#ifndef UTIL_USAGE_ERROR_H
#define UTIL_USAGE_ERROR_H

#include <stdexcept>

namespace gpt2 {

// A command-line error found after parsing, where the flags meet the world
// size, model, data or launcher (e.g. B*T*world not dividing
// --total-batch-tokens): main exits 2, as for parse_train_options's errors.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace gpt2

#endif  // UTIL_USAGE_ERROR_H

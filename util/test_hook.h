// Test hooks: the one seam through which tests change what production code
// does (leave out a wait the emulator must then catch, fake a fault, a memory
// size). Each is a GPT2_TEST_* environment variable read only here, so
// `grep -rn test_hook` lists every place a test reaches into production code;
// docs/testing.md ("Test hooks") lists the variables. A hook that makes
// results wrong announces itself on stderr, so such a run never passes for a
// normal one.
#ifndef UTIL_TEST_HOOK_H
#define UTIL_TEST_HOOK_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gpt2 {

// The value of test hook `name` (a GPT2_TEST_* variable), or nullptr when
// unset or empty. Another name is a programming error: it throws.
inline const char* test_hook(const char* name) {
  if (std::strncmp(name, "GPT2_TEST_", 10) != 0)
    throw std::logic_error(std::string("test_hook: '") + name + "' is not a GPT2_TEST_* variable");
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Whether hook `name` is set to `value` to leave out `wait`; announced on
// stderr (after `prefix`, e.g. the rank) when it is.
inline bool test_hook_drops_wait(const char* name, const char* value, const std::string& prefix, const char* wait) {
  const char* v = test_hook(name);
  if (v == nullptr || std::strcmp(v, value) != 0) return false;
  std::fprintf(stderr, "%stest hook %s=%s: %s is left out (results may be wrong)\n", prefix.c_str(), name, v, wait);
  return true;
}

}  // namespace gpt2

#endif  // UTIL_TEST_HOOK_H

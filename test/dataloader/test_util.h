// Helpers shared by the dataloader and dataprep tests: expected errors and raw
// file bytes.
#ifndef GPT2_TEST_DATALOADER_TEST_UTIL_H
#define GPT2_TEST_DATALOADER_TEST_UTIL_H

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpt2 {

// Expects `f` to throw std::runtime_error whose message contains every needle.
template <typename F>
void expect_error(F f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an exception mentioning " << needles[0];
  } catch (const std::runtime_error& e) {
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message: " << e.what() << "\nmissing: " << n;
  }
}

inline std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// Little-endian int32 number `i` of a file's bytes.
inline int32_t word(const std::vector<uint8_t>& bytes, int i) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

inline void set_word(std::vector<uint8_t>& bytes, int i, int32_t v) { std::memcpy(bytes.data() + 4 * i, &v, 4); }

}  // namespace gpt2

#endif  // GPT2_TEST_DATALOADER_TEST_UTIL_H

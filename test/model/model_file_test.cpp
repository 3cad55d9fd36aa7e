#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "model/gpt2.h"
#include "model_io/model_file.h"
#include "test/tiny_config.h"
#include "util/bf16.h"
#include "util/checked_io.h"

namespace gpt2 {
namespace {

GPT2Config tiny() { return tiny_gpt2_config(2, 2, 8, 4, 10, 16); }

std::string temp_path(const char* name) {
  std::string dir = "build/test/model";
  make_directories(dir);
  return dir + "/" + name + "." + std::to_string(getpid());
}

std::string error_of(const std::string& path) {
  try {
    read_model_file(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::vector<float> ramp(size_t n) {
  std::vector<float> p(n);
  for (size_t i = 0; i < n; i++) p[i] = 0.001f * static_cast<float>(i) - 0.3f;
  return p;
}

TEST(ModelFile, Fp32RoundTripIsExact) {
  const GPT2Config c = tiny();
  const auto p = ramp(ParamLayout::for_config(c).total);
  const std::string path = temp_path("fp32.bin");
  write_model_file(path, c, p);
  ModelFile mf = read_model_file(path);
  EXPECT_EQ(mf.config, c);
  EXPECT_EQ(mf.version, kModelVersionFp32);
  EXPECT_EQ(mf.params, p);
  EXPECT_FALSE(file_exists(path + ".tmp"));
  std::remove(path.c_str());
}

TEST(ModelFile, Bf16RoundsToNearestEven) {
  const GPT2Config c = tiny();
  const auto p = ramp(ParamLayout::for_config(c).total);
  const std::string path = temp_path("bf16.bin");
  write_model_file(path, c, p, kModelVersionBf16);
  ModelFile mf = read_model_file(path);
  EXPECT_EQ(mf.version, kModelVersionBf16);
  for (size_t i = 0; i < p.size(); i++) {
    EXPECT_EQ(mf.params[i], bf16_bits_to_float(float_to_bf16_bits(p[i])));
    // round to nearest bf16 (8 significant bits): within half an ulp, <= 2^-8 |p|
    EXPECT_LE(std::fabs(mf.params[i] - p[i]), std::fabs(p[i]) / 256.0f + 1e-30f);
  }
  // Ties go to even: 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125.
  EXPECT_EQ(float_to_bf16_bits(1.0f + 1.0f / 256.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3.0f / 256.0f), 0x3f82);
  std::remove(path.c_str());
}

TEST(ModelFile, BadFilesAreClearErrors) {
  const GPT2Config c = tiny();
  const auto p = ramp(ParamLayout::for_config(c).total);
  const std::string path = temp_path("bad.bin");
  write_model_file(path, c, p);
  std::string good = read_text_file(path);

  auto write_raw = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  };
  std::string bad = good;
  int32_t v = 12345;
  std::memcpy(&bad[0], &v, 4);
  write_raw(bad);
  EXPECT_NE(error_of(path).find("bad magic 12345"), std::string::npos) << error_of(path);

  bad = good;
  v = 4;
  std::memcpy(&bad[4], &v, 4);
  write_raw(bad);
  EXPECT_NE(error_of(path).find("unsupported version 4"), std::string::npos);

  write_raw(good.substr(0, good.size() - 4));
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(path).find(path), std::string::npos);

  write_raw(good + "xx");
  EXPECT_NE(error_of(path).find("trailing data"), std::string::npos);

  write_raw(good.substr(0, 100));
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);

  bad = good;
  v = 3;  // channels 8 not divisible by 3 heads
  std::memcpy(&bad[20], &v, 4);
  write_raw(bad);
  EXPECT_NE(error_of(path).find("divisible"), std::string::npos);

  EXPECT_NE(error_of(path + ".missing").find("cannot open"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpt2

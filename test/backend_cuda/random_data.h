// Reproducible N(0, scale^2) test data for the CUDA backend tests that drive the backend directly.
#ifndef TEST_BACKEND_CUDA_RANDOM_DATA_H
#define TEST_BACKEND_CUDA_RANDOM_DATA_H

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace gpt2 {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace gpt2

#endif  // TEST_BACKEND_CUDA_RANDOM_DATA_H

// Token uploads through pinned staging (backend/cuda/token_staging.h) under the
// emulator's deferred stream mode, where queued work runs late and a pinned
// copy reads its source only when it runs: twelve uploads of distinct ids
// issued back to back (three times the ring) land intact; with the slot-reuse
// wait left out (GPT2_TEST_DROP_STAGING_WAIT=1) later ids overwrite earlier
// ones before their copies run, and the check must see it (emulator only; on a
// GPU, build/gpu/backend_cuda_gpu_test runs the first test on real streams).
// Then the offloaded optimizer's transfers (backend/cuda/host_transfers.cuh):
// download_async / upload_async equal the synchronous copies bit for bit in
// fp32 and bf16, land in pinned memory only when the host waits on a mark
// issued after them, and refuse a bf16 transfer without its fp32 chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "emu/control.h"
#include "backend/cuda/cuda_backend.h"

namespace gpt2 {
namespace {

// Uploads `uploads` arrays of n ids (upload u holds u*1000 + i) into slices of
// one tokens buffer with no synchronisation in between; returns how many ids
// arrived wrong.
size_t wrong_ids_after_uploads(int uploads, size_t n) {
  emu::set_stream_mode(emu::StreamMode::kDeferred, 5);
  size_t wrong = 0;
  {
    std::unique_ptr<Backend> be = make_cuda_backend(0);
    Tensor tokens = be->alloc(uploads * n, BufferRole::kTokens);
    std::vector<int32_t> host(n);
    for (int u = 0; u < uploads; u++) {
      for (size_t i = 0; i < n; i++) host[i] = static_cast<int32_t>(u * 1000 + i);
      be->upload_tokens(tokens.slice(u * n, n), host.data());
      for (auto& x : host) x = -7;  // the caller reuses its array at once
    }
    std::vector<float> raw(uploads * n);
    be->download(raw.data(), tokens);  // 4-byte elements come back bit for bit
    for (size_t k = 0; k < raw.size(); k++) {
      int32_t id;
      std::memcpy(&id, &raw[k], sizeof id);
      wrong += id != static_cast<int32_t>((k / n) * 1000 + k % n);
    }
    be->free(tokens);
  }
  emu::set_stream_mode(emu::StreamMode::kSync);
  return wrong;
}

TEST(CudaTokenStaging, AsyncUploadsLandIntactUnderDeferredStreams) {
  EXPECT_EQ(wrong_ids_after_uploads(12, 37), 0u);
}

TEST(CudaTokenStaging, DroppingTheSlotWaitIsCaught) {
  emu::set_stream_mode(emu::StreamMode::kDeferred, 5);
  const bool deferred = emu::stream_mode() == emu::StreamMode::kDeferred;
  emu::set_stream_mode(emu::StreamMode::kSync);
  if (!deferred) GTEST_SKIP() << "needs the emulator's deferred streams (on a GPU the race may or may not show)";
  setenv("GPT2_TEST_DROP_STAGING_WAIT", "1", 1);
  const size_t wrong = wrong_ids_after_uploads(12, 37);
  unsetenv("GPT2_TEST_DROP_STAGING_WAIT");
  EXPECT_GT(wrong, 0u) << "reusing a staging slot before its copy ran went unnoticed";
}

// n values spanning bf16's rounding cases: ties, subnormals, large and negative.
std::vector<float> transfer_values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) {
    const float x = static_cast<float>(i) * 0.37f - 40.0f;
    v[i] = i % 7 == 3 ? x * 1e-39f : i % 5 == 1 ? std::ldexp(1.0f + 1.0f / 256, static_cast<int>(i % 40)) : x;
  }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CudaHostTransfers : public ::testing::TestWithParam<bool> {};

// Up through upload_async, then back by download_async: the same bits as
// upload() and download() (bf16: rounded to nearest even, widened exactly).
TEST_P(CudaHostTransfers, AsyncCopiesEqualTheSynchronousOnes) {
  const bool bf16 = GetParam();
  emu::set_stream_mode(emu::StreamMode::kDeferred, 3);
  {
    CudaBackendOptions o;
    o.bf16 = bf16;
    std::unique_ptr<Backend> be = make_cuda_backend(0, o);
    const size_t n = 1001, chunk = 300;
    const std::vector<float> values = transfer_values(n);
    Tensor a = be->alloc(n, BufferRole::kParams), b = be->alloc(n, BufferRole::kParams);
    Tensor via = be->alloc(chunk, BufferRole::kOptimizer);
    std::vector<float> host(values), down(n, -1.0f), want(n);
    ASSERT_TRUE(be->pin_host(host.data(), n * sizeof(float)));
    ASSERT_TRUE(be->pin_host(down.data(), n * sizeof(float)));
    for (size_t lo = 0; lo < n; lo += chunk) {
      const size_t len = std::min(chunk, n - lo);
      be->upload_async(a.slice(lo, len), host.data() + lo, via.slice(0, len));
    }
    for (size_t lo = 0; lo < n; lo += chunk) {
      const size_t len = std::min(chunk, n - lo);
      be->download_async(down.data() + lo, a.slice(lo, len), via.slice(0, len));
    }
    const uint64_t mark = be->issue_mark();
    if (emu::stream_mode() == emu::StreamMode::kDeferred)
      EXPECT_EQ(down[0], -1.0f) << "a deferred download landed before the host waited";
    be->wait_mark(mark);
    be->upload(b, values.data());
    be->download(want.data(), b);
    EXPECT_TRUE(same_bits(down, want)) << (bf16 ? "bf16" : "fp32") << " async round trip differs from upload/download";
    if (!bf16) EXPECT_TRUE(same_bits(down, values));
    be->unpin_host(host.data());
    be->unpin_host(down.data());
    be->free(a);
    be->free(b);
    be->free(via);
  }
  emu::set_stream_mode(emu::StreamMode::kSync);
}

TEST(CudaHostTransfersBf16, NeedsItsFp32Chunk) {
  CudaBackendOptions o;
  o.bf16 = true;
  std::unique_ptr<Backend> be = make_cuda_backend(0, o);
  Tensor a = be->alloc(64, BufferRole::kParams), small = be->alloc(63, BufferRole::kOptimizer);
  std::vector<float> host(64);
  try {
    be->download_async(host.data(), a, Tensor{});
    ADD_FAILURE() << "download_async without via accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("download_async"), std::string::npos) << e.what();
  }
  try {
    be->upload_async(a, host.data(), small);
    ADD_FAILURE() << "upload_async with a 63-element via for 64 elements accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("via has 63 elements, needs 64"), std::string::npos) << e.what();
  }
  be->free(a);
  be->free(small);
}

INSTANTIATE_TEST_SUITE_P(Storage, CudaHostTransfers, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "bf16" : "fp32"; });

}  // namespace
}  // namespace gpt2

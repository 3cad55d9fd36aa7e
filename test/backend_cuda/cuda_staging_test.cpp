// Token uploads through pinned staging (backend/cuda/token_staging.h) under the
// emulator's deferred stream mode, where queued work runs late and a pinned
// copy reads its source only when it runs: twelve uploads of distinct ids
// issued back to back (three times the ring) land intact; with the slot-reuse
// wait left out (GPT2_TEST_DROP_STAGING_WAIT=1) later ids overwrite earlier
// ones before their copies run, and the check must see it (emulator only; on a
// GPU, build/gpu/backend_cuda_gpu_test runs the first test on real streams).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
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

}  // namespace
}  // namespace gpt2

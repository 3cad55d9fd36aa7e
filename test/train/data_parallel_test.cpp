// DataParallel's routing: buffers (gradients, parameters, and the gradient
// norm's fp64 sum, which stays in the backend's memory) through the buffer
// communicator, for each ZeRO stage.
// A recording communicator stands in for rank 0 of 2 (every rank holding the
// same data: reductions copy, the all-gather is in place); the numbers of a
// real multi-rank run are checked by test/distributed/zero_train_test.sh (CPU)
// and test/distributed/zero_cuda_emu_test.sh (CUDA on the emulator, NCCL).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "distributed/comm.h"
#include "model/gpt2.h"
#include "test/model/train_helpers.h"
#include "test/tiny_config.h"
#include "train/data_parallel.h"

namespace gpt2 {
namespace {

struct Call {
  CommCall kind;
  DataType type;
  size_t count;
};

class RecordingComm final : public Communicator {
 public:
  RecordingComm(std::string name, int rank, int world, bool device)
      : name_(std::move(name)), rank_(rank), world_(world), device_(device) {}
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool is_device_memory() const override { return device_; }
  std::string name() const override { return name_; }
  std::vector<Call> calls;

 protected:
  void do_all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp) override {
    calls.push_back({CommCall::kAllReduce, type, count});
    if (send != recv) std::memcpy(recv, send, count * data_type_bytes(type));
  }
  void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp) override {
    calls.push_back({CommCall::kReduceScatter, type, recv_count});
    const size_t block = recv_count * data_type_bytes(type);
    if (recv != static_cast<const char*>(send) + block * rank_)
      std::memcpy(recv, static_cast<const char*>(send) + block * rank_, block);
  }
  void do_reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& counts, DataType type,
                           ReduceOp) override {
    size_t before = 0, total = 0;
    for (int r = 0; r < world_; r++) {
      if (r < rank_) before += counts[r];
      total += counts[r];
    }
    calls.push_back({CommCall::kReduceScatterV, type, total});
    const size_t b = data_type_bytes(type);
    if (counts[rank_] > 0) std::memcpy(recv, static_cast<const char*>(send) + before * b, counts[rank_] * b);
  }
  void do_all_gather(const void*, void*, size_t send_count, DataType type) override {
    calls.push_back({CommCall::kAllGather, type, send_count});
  }
  void do_broadcast(void*, size_t bytes, int) override { calls.push_back({CommCall::kBroadcast, DataType::kInt32, bytes}); }
  void do_barrier() override { calls.push_back({CommCall::kBarrier, DataType::kInt32, 0}); }
  std::string error_prefix() const override { return "rank " + std::to_string(rank_) + "/" + std::to_string(world_) + ": "; }

 private:
  std::string name_;
  int rank_, world_;
  bool device_;
};

GPT2Config tiny_config() { return tiny_gpt2_config(2, 2, 16, 8, 32, 32); }

// One step of the trainer's protocol for `stage`; returns the gradient norm.
double one_step(Backend& be, DataParallel& dp, GPT2& model) {
  constexpr int B = 2, T = 8;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; i++) {
    inputs[i] = (i * 7 + 3) % 32;
    targets[i] = (i * 11 + 5) % 32;
  }
  dp.begin_step();
  model.train_forward_deferred_loss(inputs.data(), targets.data(), B, T, 1.0f / (B * T));
  dp.backward(model);
  model.collect_train_losses();
  dp.reduce_gradients();
  dp.queue_grad_clip(1.0f);
  const double norm = dp.grad_norm();
  dp.gather_params(model);
  return norm;
}

class DataParallelRouting : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelRouting, BuffersAndTheNormGoOverTheBufferCommunicator) {
  const int stage = GetParam();
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  RecordingComm buffers("buffers", 0, 2, false);
  const GPT2Config cfg = tiny_config();
  const ParamLayout layout = ParamLayout::for_config(cfg);
  DataParallel dp(*be, buffers, layout, stage);
  GPT2 model(*be, cfg, 2, 8, dp.model_options(0));
  model.init_random(7);
  EXPECT_GT(one_step(*be, dp, model), 0.0);

  // The gradient norm stays in the backend's memory: stage 0 squares every
  // gradient locally (no call); stages 1/2 sum the shards' squares with one
  // fp64 all-reduce on the buffer communicator, after the gradient exchange.
  if (stage != 0) {
    auto norm = std::find_if(buffers.calls.begin(), buffers.calls.end(),
                             [](const Call& c) { return c.type == DataType::kFloat64; });
    ASSERT_NE(norm, buffers.calls.end());
    EXPECT_EQ(norm->kind, CommCall::kAllReduce);
    EXPECT_EQ(norm->count, 1u);
    EXPECT_EQ(norm + 2, buffers.calls.end()) << "the norm's all-reduce comes right before the all-gather";
    buffers.calls.erase(norm);
  }
  // Buffers, all fp32 (the CPU backend's element size), on the buffer communicator.
  ASSERT_FALSE(buffers.calls.empty());
  for (const Call& c : buffers.calls) {
    EXPECT_EQ(c.type, DataType::kFloat32);
    EXPECT_NE(c.kind, CommCall::kBarrier);
  }
  const size_t S = dp.plan().shard_size(), padded = dp.param_capacity();
  if (stage == 0) {
    ASSERT_EQ(buffers.calls.size(), 1u);
    EXPECT_EQ(buffers.calls[0].kind, CommCall::kAllReduce);
    EXPECT_EQ(buffers.calls[0].count, padded);
  } else if (stage == 1) {
    ASSERT_EQ(buffers.calls.size(), 2u);
    EXPECT_EQ(buffers.calls[0].kind, CommCall::kReduceScatter);
    EXPECT_EQ(buffers.calls[0].count, S);
    EXPECT_EQ(buffers.calls[1].kind, CommCall::kAllGather);
    EXPECT_EQ(buffers.calls[1].count, S);
  } else {
    // At least one reduce_scatter_v per unit (a unit is exchanged in slices of
    // at most the largest part any rank owns of a unit), then the all-gather.
    ASSERT_GE(buffers.calls.size(), static_cast<size_t>(dp.plan().num_units()) + 1);
    size_t exchanged = 0;
    for (size_t i = 0; i + 1 < buffers.calls.size(); i++) {
      EXPECT_EQ(buffers.calls[i].kind, CommCall::kReduceScatterV);
      exchanged += buffers.calls[i].count;
    }
    EXPECT_EQ(exchanged, layout.total);  // every gradient once
    EXPECT_EQ(buffers.calls.back().kind, CommCall::kAllGather);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, DataParallelRouting, ::testing::Values(0, 1, 2));

// ZeRO-2's staging: every layer unit, the rest unit and the wte chunks (built
// after the backward, chunk by chunk, in the layer buffers) put together in
// the plan's places equal the full gradient buffer bit for bit, over two
// accumulated micro-steps, for the default chunk (the whole 160-row table) and
// for chunks of 7 rows (the last one shorter) on a padded vocabulary. Bitwise because the full buffer's
// wte gradient is made in the same chunks (OpenBLAS's sgemm rounds rows of a
// 32-row product differently from the same rows of a 48-row one).
TEST(DataParallel, StagedGradientsEqualTheFullBufferBitwise) {
  // 160 rows >= 9 C: the full model's backward scratch lives in its logits
  // buffer, the staged model's cannot (it reads dlogits after the backward).
  GPT2Config cfg = tiny_config();
  cfg.vocab_size = 157;
  cfg.padded_vocab_size = 160;
  const ParamLayout layout = ParamLayout::for_config(cfg);
  EXPECT_EQ(layout.wte_chunk_rows(), 160u);  // a layer buffer of C=16 holds 205 rows: capped at Vp
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  constexpr int B = 2, T = 8;
  for (size_t rows : {0, 7}) {
    SCOPED_TRACE("wte chunk rows " + std::to_string(rows));
    const ParamLayout chunked = ParamLayout::for_config(cfg, rows);
    ModelOptions full_opts;
    full_opts.wte_chunk_rows = rows;  // its wte gradient is made in the same chunks
    GPT2 full(*be, cfg, B, T, full_opts);
    full.init_random(11);
    FlatGrads full_grads(*be, full);
    const ZeroPlan plan(zero_tensor_specs(chunked), 1);
    ModelOptions staged_opts = full_opts;
    staged_opts.keep_dlogits = true;
    GPT2 staged(*be, cfg, B, T, staged_opts);
    ZeroStaging staging(*be, plan, chunked, 2);  // the layer buffers alternate (the overlapped stage 2)
    staged.set_parameters(full.get_parameters());
    EXPECT_EQ(staged.layout().num_wte_chunks(), plan.num_chunk_units());
    EXPECT_EQ(plan.num_chunk_units(), rows ? 23 : 1);
    std::vector<float> assembled(layout.total, 0.0f);
    auto take = [&](int unit) {  // adds the unit's packed buffer into its flat places
      Tensor g = staging.unit(unit);
      ASSERT_EQ(g.numel, plan.unit(unit).numel);
      std::vector<float> host(g.numel);
      be->download(host.data(), g);
      size_t k = 0;
      for (const ElemRange& r : plan.unit(unit).ranges)
        for (size_t e = r.begin; e < r.end; e++) assembled[e] += host[k++];
    };
    for (int micro = 0; micro < 2; micro++) {
      std::vector<int32_t> inputs(B * T), targets(B * T);
      for (int i = 0; i < B * T; i++) {
        inputs[i] = (i * 37 + 3 + micro) % 157;
        targets[i] = (i * 11 + 5 * micro) % 157;
      }
      for (GPT2* m : {&full, &staged}) {
        m->train_forward_deferred_loss(inputs.data(), targets.data(), B, T, 0.25f);
        m->collect_train_losses();
      }
      full.backward(full_grads.tensor());
      // DataParallel's synchronous stage 2, piece by piece.
      const ParamTensors rest = staging.begin_unit(-1);
      staged.backward_head(staged.param_views(0), rest);
      for (int l = cfg.num_layers - 1; l >= 0; l--) {
        staged.backward_layer(l, staged.param_views(l), staging.begin_unit(l));
        take(l);
      }
      staged.backward_embeddings(rest);
      take(plan.rest_unit());
      for (int k = 0; k < plan.num_chunk_units(); k++) {
        staged.wte_grad_chunk(k, staging.unit(plan.first_chunk_unit() + k));
        take(plan.first_chunk_unit() + k);
      }
      const std::vector<float> want = full_grads.download(layout.total);
      // The first micro-step: the same numbers added in the same order. The
      // second: the full buffer accumulates in place, the staged units are
      // added here afterwards, so the sum agrees to the rounding of additions:
      // the same terms with g1 entering first (bias column sums and layernorm
      // partials over N = 16 rows; sgemm with beta = 1, where some kernels load C
      // as the accumulator) or last: <= N + 1 roundings of partial sums of size
      // |g1| + sum |terms| (<= ~4, |g| <= 1.84 here), a random walk of ~sqrt(17)
      // 2^-24 4 = 1e-6 at most. Not a worst case: the Haswell, SkylakeX and Zen
      // kernels use <= 0.12 of the allowance.
      for (size_t e = 0; e < want.size(); e++) {
        if (micro == 0) ASSERT_EQ(assembled[e], want[e]) << "gradient element " << e;
        else ASSERT_NEAR(assembled[e], want[e], 1e-6f * (1.0f + std::fabs(want[e]))) << "gradient element " << e;
      }
    }
  }
}

TEST(DataParallel, CommunicatedTypeFollowsTheElementSize) {
  EXPECT_EQ(comm_data_type(4), DataType::kFloat32);
  EXPECT_EQ(comm_data_type(2), DataType::kBFloat16);
  EXPECT_THROW(comm_data_type(8), std::runtime_error);
  EXPECT_THROW(comm_data_type(1), std::runtime_error);
}

TEST(DataParallel, RefusesMismatchedCommunicators) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  const ParamLayout layout = ParamLayout::for_config(tiny_config());
  // The CPU backend's host memory cannot go through a device communicator...
  RecordingComm device_buffers("nccl", 0, 2, true);
  EXPECT_THROW((DataParallel{*be, device_buffers, layout, 0}), std::runtime_error);
  // ...not even at one rank when ZeRO-2 exchanges its units.
  RecordingComm device_one("nccl", 0, 1, true);
  EXPECT_THROW((DataParallel{*be, device_one, layout, 2}), std::runtime_error);
  EXPECT_NO_THROW((DataParallel{*be, device_one, layout, 1}));
}

}  // namespace
}  // namespace gpt2

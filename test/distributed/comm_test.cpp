// Collectives of the MPI communicator on host memory.
//   CommTest.*      the collectives at any world size above 1: run under
//                   mpirun -np 2 and -np 3 by test/distributed/comm_mpirun_test.sh
//                   (3: uneven ZeRO shards). Inputs are small integers and
//                   quarters so every sum is exact in float, whatever order
//                   MPI adds in; expectations are closed forms in rank and world.
//   CommWorldOne.*  the degenerate world of one process, which `make test`
//                   runs standalone: every collective is the identity (a copy
//                   out of place, nothing in place), with no bytes sent.
// main() picks the suite from the world size unless --gtest_filter (or
// GTEST_FILTER) names the tests, so neither suite is counted at the other's
// world size.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/zero_plan.h"

namespace gpt2 {
namespace {

// Set by main before the tests run and cleared after: MPI is initialised once
// per process, so no fixture can own it, and gtest fixtures get no arguments.
const DistRuntime* g_runtime = nullptr;

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = make_mpi_communicator(*g_runtime);
    rank = comm->rank();
    world = comm->world();
  }
  std::unique_ptr<Communicator> comm;
  int rank = 0, world = 1;
};

// Value rank r contributes at index i, and the exact sum over ranks.
float contrib(int r, size_t i) { return static_cast<float>(i % 97) * 0.25f + static_cast<float>(r); }
double sum_over_ranks(size_t i, int world) {
  return static_cast<double>(i % 97) * 0.25 * world + world * (world - 1) / 2.0;
}
// The float average as the communicator computes it: exact float sum / world.
float float_avg(size_t i, int world) {
  return static_cast<float>(sum_over_ranks(i, world)) / static_cast<float>(world);
}

TEST_F(CommTest, LayoutMatchesCommunicator) {
  const DistContext& ctx = g_runtime->context();
  EXPECT_EQ(ctx.rank, rank);
  EXPECT_EQ(ctx.world, world);
  EXPECT_GE(ctx.local_rank, 0);
  EXPECT_LT(ctx.local_rank, ctx.local_world);
  EXPECT_LT(ctx.node, ctx.num_nodes);
  // Every rank on one machine here: one node holding everyone.
  int nodes = ctx.num_nodes, local_sum = ctx.local_world;
  comm->all_reduce(&local_sum, &local_sum, 1, DataType::kInt32, ReduceOp::kMax);
  comm->all_reduce(&nodes, &nodes, 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(nodes, 1);
  EXPECT_EQ(local_sum, world);
  EXPECT_EQ(ctx.local_rank, rank);
  EXPECT_FALSE(comm->is_device_memory());
  EXPECT_EQ(comm->name(), "mpi");
}

TEST_F(CommTest, AllReduceFloatSumAvgInAndOutOfPlace) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1001}}) {
    std::vector<float> send(n), recv(n, -1.0f), inplace(n);
    for (size_t i = 0; i < n; ++i) send[i] = inplace[i] = contrib(rank, i);
    comm->all_reduce(send.data(), recv.data(), n, DataType::kFloat32, ReduceOp::kSum);
    all_reduce(*comm, inplace.data(), n, ReduceOp::kAvg);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(recv[i], static_cast<float>(sum_over_ranks(i, world))) << "i=" << i;
      ASSERT_EQ(inplace[i], float_avg(i, world)) << "i=" << i;
      ASSERT_EQ(send[i], contrib(rank, i));  // input untouched out of place
    }
  }
}

TEST_F(CommTest, AllReduceDoubleAndMax) {
  std::vector<double> d(5);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 1e-3 * (rank + 1) * (i + 1);
  all_reduce(*comm, d.data(), d.size(), ReduceOp::kSum);
  for (size_t i = 0; i < d.size(); ++i)
    EXPECT_NEAR(d[i], 1e-3 * (i + 1) * world * (world + 1) / 2.0, 1e-15);
  EXPECT_EQ(all_reduce_value(*comm, 3.0 * rank, ReduceOp::kMax), 3.0 * (world - 1));
  int32_t flag = rank == world - 1 ? 7 : 0;
  comm->all_reduce(&flag, &flag, 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(flag, 7);
  int32_t x = 1;
  EXPECT_THROW(comm->all_reduce(&x, &x, 1, DataType::kInt32, ReduceOp::kAvg), std::runtime_error);
}

TEST_F(CommTest, ReduceScatterEqualBlocks) {
  for (size_t block : {size_t{1}, size_t{5}, size_t{333}}) {
    const size_t n = block * static_cast<size_t>(world);
    std::vector<float> send(n), recv(block, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = contrib(rank, i);
    comm->reduce_scatter(send.data(), recv.data(), block, DataType::kFloat32, ReduceOp::kSum);
    for (size_t k = 0; k < block; ++k)
      ASSERT_EQ(recv[k], static_cast<float>(sum_over_ranks(rank * block + k, world)));
    // In place, NCCL's convention: my block ends up at my offset of the buffer.
    std::vector<float> buf(send);
    float* mine = buf.data() + rank * block;
    comm->reduce_scatter(buf.data(), mine, block, DataType::kFloat32, ReduceOp::kAvg);
    for (size_t k = 0; k < block; ++k)
      ASSERT_EQ(mine[k], float_avg(rank * block + k, world));
  }
}

TEST_F(CommTest, ReduceScatterUnevenBlocks) {
  // Blocks of 0, 3, 1, 4, ... elements: some ranks receive nothing.
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = (r * 3 + (world > 1 ? 0 : 2)) % 5;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin =
      std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  const size_t mine = counts[static_cast<size_t>(rank)];
  std::vector<double> send(total);
  for (size_t i = 0; i < total; ++i) send[i] = contrib(rank, i);
  std::vector<double> recv(mine, -1.0);
  comm->reduce_scatter_v(send.data(), mine ? recv.data() : nullptr, counts, DataType::kFloat64,
                         ReduceOp::kAvg);
  for (size_t k = 0; k < mine; ++k)
    EXPECT_EQ(recv[k], sum_over_ranks(begin + k, world) / world);
  // One count per rank, no more, no less.
  std::vector<size_t> wrong(static_cast<size_t>(world) + 1, 0);
  EXPECT_THROW(comm->reduce_scatter_v(send.data(), recv.data(), wrong, DataType::kFloat64,
                                      ReduceOp::kSum),
               std::runtime_error);
}

TEST_F(CommTest, AllGatherInAndOutOfPlace) {
  const size_t block = 11;
  std::vector<float> mine(block), all(block * world, -1.0f);
  for (size_t k = 0; k < block; ++k) mine[k] = static_cast<float>(100 * rank + k);
  comm->all_gather(mine.data(), all.data(), block, DataType::kFloat32);
  for (int r = 0; r < world; ++r)
    for (size_t k = 0; k < block; ++k)
      ASSERT_EQ(all[r * block + k], static_cast<float>(100 * r + k));
  std::vector<float> buf(block * world, -1.0f);
  std::memcpy(buf.data() + rank * block, mine.data(), block * sizeof(float));
  comm->all_gather(buf.data() + rank * block, buf.data(), block, DataType::kFloat32);
  EXPECT_EQ(buf, all);
}

TEST_F(CommTest, OverlappingBuffersAreRejected) {
  std::vector<float> buf(4 * world + 1);
  if (world > 1) {
    // Receive block overlapping the send buffer somewhere other than my own block.
    float* wrong = buf.data() + ((rank + 1) % world) * 4;
    EXPECT_THROW(comm->reduce_scatter(buf.data(), wrong, 4, DataType::kFloat32, ReduceOp::kSum),
                 std::runtime_error);
  }
  // A shifted all-gather input inside the output is not the in-place form.
  EXPECT_THROW(comm->all_gather(buf.data() + rank * 4 + 1, buf.data(), 4, DataType::kFloat32),
               std::runtime_error);
}

TEST_F(CommTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < world; ++root) {
    char msg[32] = {};
    if (rank == root) std::snprintf(msg, sizeof msg, "hello from %d", root);
    comm->broadcast(msg, sizeof msg, root);
    EXPECT_EQ(std::string(msg), "hello from " + std::to_string(root));
  }
  char c = 0;
  EXPECT_THROW(comm->broadcast(&c, 1, world), std::runtime_error);
}

TEST_F(CommTest, SmallMessageLimitSplitsCallsWithSameResults) {
  // 3 elements per MPI call: every chunked path (all-reduce, reduce-scatter to
  // owners, all-gather by broadcasts, broadcast) must give the plain results.
  auto chunked = make_mpi_communicator(*g_runtime, 3);
  const size_t block = 10, n = block * world;
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = contrib(rank, i);
  chunked->all_reduce(send.data(), recv.data(), n, DataType::kFloat32, ReduceOp::kAvg);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(recv[i], float_avg(i, world));
  std::vector<float> buf(send);
  chunked->reduce_scatter(buf.data(), buf.data() + rank * block, block, DataType::kFloat32,
                          ReduceOp::kSum);
  for (size_t k = 0; k < block; ++k)
    ASSERT_EQ(buf[rank * block + k], static_cast<float>(sum_over_ranks(rank * block + k, world)));
  std::vector<size_t> counts(world, 4);
  counts[0] = 5;
  std::vector<float> piece(counts[rank]);
  chunked->reduce_scatter_v(send.data(), piece.data(), counts, DataType::kFloat32, ReduceOp::kSum);
  const size_t begin = rank == 0 ? 0 : 5 + 4 * (rank - 1);
  for (size_t k = 0; k < piece.size(); ++k)
    ASSERT_EQ(piece[k], static_cast<float>(sum_over_ranks(begin + k, world)));
  chunked->all_gather(buf.data() + rank * block, buf.data(), block, DataType::kFloat32);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], static_cast<float>(sum_over_ranks(i, world)));
  std::vector<char> bytes(17, 0);
  if (rank == 0) for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i);
  chunked->broadcast(bytes.data(), bytes.size(), 0);
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], static_cast<char>('a' + i));
}

TEST_F(CommTest, TrafficCountersFollowTheRingModel) {
  const uint64_t w = static_cast<uint64_t>(world);
  std::vector<float> v(12 * world);
  comm->reset_stats();
  comm->all_reduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->all_reduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter(v.data(), v.data() + rank * 12, 12, DataType::kFloat32, ReduceOp::kSum);
  comm->all_gather(v.data() + rank * 12, v.data(), 12, DataType::kFloat32);
  comm->barrier();
  const uint64_t bytes = 48 * w;  // the whole buffer
  const CommTraffic& ar = comm->traffic(CommCall::kAllReduce);
  EXPECT_EQ(ar.calls, 2u);
  EXPECT_EQ(ar.payload_bytes, 2 * bytes);
  EXPECT_EQ(ar.sent_bytes, 2 * 2 * bytes * (w - 1) / w);
  EXPECT_EQ(comm->traffic(CommCall::kReduceScatter).sent_bytes, bytes * (w - 1) / w);
  EXPECT_EQ(comm->traffic(CommCall::kAllGather).sent_bytes, bytes * (w - 1) / w);
  EXPECT_EQ(comm->traffic(CommCall::kAllGather).payload_bytes, bytes);
  EXPECT_EQ(comm->traffic(CommCall::kBarrier).calls, 1u);
  EXPECT_EQ(comm->traffic(CommCall::kBroadcast).calls, 0u);
  comm->reset_stats();
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).calls, 0u);
}

TEST_F(CommTest, StopCheckIsCollective) {
  clear_stop_signal();
  EXPECT_FALSE(should_stop(*comm));
  // Only the last rank saw the signal; every rank must decide to stop.
  if (rank == world - 1) request_stop(SIGUSR1);
  EXPECT_TRUE(should_stop(*comm));
  clear_stop_signal();
  EXPECT_FALSE(should_stop(*comm));
}

// The ZeRO data flow on a random table: per-unit reduce_scatter_v of packed
// pieces (ZeRO-2) and one reduce_scatter of the padded buffer (ZeRO-1) both
// give each rank exactly its shard of the all-reduced gradient, and the
// all-gather of the shards rebuilds the whole vector.
TEST_F(CommTest, ZeroPlanExchangesMatchAllReduce) {
  const std::vector<ParamTensorSpec> table = {
      {"wte", 37, 0}, {"ln", 3 * 4, 3}, {"w", 3 * 9, 3}, {"b", 3 * 2, 3}, {"lnf", 5, 0}};
  const ZeroPlan plan(table, world);
  const size_t P = plan.num_params(), S = plan.shard_size();
  std::vector<float> grad(plan.padded_size(), 0.0f);  // padding stays zero
  for (size_t i = 0; i < P; ++i) grad[i] = contrib(rank, i);
  std::vector<float> reference(grad);
  all_reduce(*comm, reference.data(), reference.size(), ReduceOp::kAvg);

  // ZeRO-2: units in backward order, each packed by owner and exchanged once.
  std::vector<float> shard(S, 0.0f);
  for (int u = plan.num_units() - 1; u >= 0; --u) {
    const UnitExchange& ex = plan.unit(u);
    std::vector<float> packed(ex.numel), received(ex.counts[rank]);
    for (const ExchangePiece& p : ex.pieces)
      std::memcpy(&packed[p.pack_offset], &grad[p.global.begin], p.global.size() * sizeof(float));
    comm->reduce_scatter_v(packed.data(), received.empty() ? nullptr : received.data(), ex.counts,
                           DataType::kFloat32, ReduceOp::kAvg);
    size_t at = 0;
    for (size_t p = ex.first_piece_of_rank[rank]; p < ex.first_piece_of_rank[rank + 1]; ++p) {
      const ExchangePiece& piece = ex.pieces[p];
      for (size_t k = 0; k < piece.global.size(); ++k) shard[piece.shard_offset + k] += received[at++];
    }
    EXPECT_EQ(at, received.size());
  }
  const ElemRange mine = plan.shard(rank);
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(shard[k], reference[mine.begin + k]) << "k=" << k;

  // ZeRO-1: one reduce-scatter over the padded buffer, in place.
  std::vector<float> buf(grad);
  comm->reduce_scatter(buf.data(), buf.data() + mine.begin, S, DataType::kFloat32, ReduceOp::kAvg);
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(buf[mine.begin + k], shard[k]);
  comm->all_gather(buf.data() + mine.begin, buf.data(), S, DataType::kFloat32);
  EXPECT_EQ(buf, reference);
}

// ---- world 1 ----------------------------------------------------------------

class CommWorldOne : public CommTest {
 protected:
  void SetUp() override {
    CommTest::SetUp();
    if (world != 1) GTEST_SKIP() << "a world-1 case; this process has world " << world;
  }
};

// Awkward bit patterns: -0, a subnormal, the largest float, a NaN with a
// payload. A copy keeps every bit; any arithmetic pass (a sum, a division by
// the world size) would be allowed to change some of them.
std::vector<float> odd_floats(size_t n) {
  const uint32_t nan_bits = 0x7FC01234u;
  float nan_payload;
  std::memcpy(&nan_payload, &nan_bits, sizeof nan_payload);
  const float pattern[] = {-0.0f, 1e-40f, 3.4028235e38f, nan_payload, 0.1f, -7.25f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern[i % 6];
  return v;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(CommWorldOne, LayoutIsOneProcess) {
  const DistContext& ctx = g_runtime->context();
  EXPECT_EQ(comm->world(), 1);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(ctx.world, 1);
  EXPECT_EQ(ctx.local_rank, 0);
  EXPECT_EQ(ctx.local_world, 1);
  EXPECT_EQ(ctx.node, 0);
  EXPECT_EQ(ctx.num_nodes, 1);
}

TEST_F(CommWorldOne, ReductionsCopyBitForBit) {
  const std::vector<float> send = odd_floats(13);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    std::vector<float> recv(send.size(), 5.0f), inplace(send);
    comm->all_reduce(send.data(), recv.data(), send.size(), DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(recv, send));
    all_reduce(*comm, inplace.data(), inplace.size(), op);
    EXPECT_TRUE(same_bits(inplace, send));
    std::vector<float> block(send.size(), 5.0f);
    comm->reduce_scatter(send.data(), block.data(), send.size(), DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(block, send));
    std::vector<float> piece(send.size(), 5.0f);
    comm->reduce_scatter_v(send.data(), piece.data(), {send.size()}, DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(piece, send));
  }
  std::vector<float> inplace(send);
  comm->reduce_scatter(inplace.data(), inplace.data(), inplace.size(), DataType::kFloat32,
                       ReduceOp::kAvg);
  EXPECT_TRUE(same_bits(inplace, send));
  double third = 1.0 / 3.0;
  all_reduce(*comm, &third, 1, ReduceOp::kAvg);
  EXPECT_EQ(third, 1.0 / 3.0);
  int32_t flag = -3;
  comm->all_reduce(&flag, &flag, 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(flag, -3);
  // An empty block of reduce_scatter_v needs no receive buffer.
  comm->reduce_scatter_v(send.data(), nullptr, {0}, DataType::kFloat32, ReduceOp::kSum);
}

TEST_F(CommWorldOne, GatherAndBroadcastLeaveTheData) {
  const std::vector<float> mine = odd_floats(9);
  std::vector<float> all(mine.size(), 5.0f), inplace(mine);
  comm->all_gather(mine.data(), all.data(), mine.size(), DataType::kFloat32);
  EXPECT_TRUE(same_bits(all, mine));
  comm->all_gather(inplace.data(), inplace.data(), inplace.size(), DataType::kFloat32);
  EXPECT_TRUE(same_bits(inplace, mine));
  char msg[16] = "only rank";
  comm->broadcast(msg, sizeof msg, 0);
  EXPECT_EQ(std::string(msg), "only rank");
  EXPECT_THROW(comm->broadcast(msg, sizeof msg, 1), std::runtime_error);  // no rank 1
  comm->barrier();
}

TEST_F(CommWorldOne, TrafficCountsPayloadButSendsNothing) {
  std::vector<float> v(24), piece(24);
  comm->reset_stats();
  comm->all_reduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter_v(v.data(), piece.data(), {v.size()}, DataType::kFloat32, ReduceOp::kSum);
  comm->all_gather(v.data(), v.data(), v.size(), DataType::kFloat32);
  comm->broadcast(v.data(), 8, 0);
  for (CommCall call : {CommCall::kAllReduce, CommCall::kReduceScatter, CommCall::kReduceScatterV,
                        CommCall::kAllGather, CommCall::kBroadcast}) {
    const CommTraffic& t = comm->traffic(call);
    EXPECT_EQ(t.calls, 1u) << comm_call_name(call);
    EXPECT_EQ(t.sent_bytes, 0u) << comm_call_name(call);
  }
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).payload_bytes, 96u);
  EXPECT_EQ(comm->traffic(CommCall::kBroadcast).payload_bytes, 8u);
}

}  // namespace
}  // namespace gpt2

// Rank 0 prints the usual report; other ranks print only failures, prefixed.
class FailureOnlyPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailureOnlyPrinter(std::string prefix) : prefix_(std::move(prefix)) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "%s%s:%d: failure\n%s\n", prefix_.c_str(), r.file_name(),
                   r.line_number(), r.summary());
  }

 private:
  std::string prefix_;
};

int main(int argc, char** argv) {
  try {
    gpt2::DistRuntime runtime(&argc, &argv);
    gpt2::g_runtime = &runtime;
    ::testing::InitGoogleTest(&argc, argv);
    const gpt2::DistContext& ctx = runtime.context();
    // No filter given: the suite for this world size (see the top of the file).
    if (std::string(GTEST_FLAG_GET(filter)) == "*")
      GTEST_FLAG_SET(filter, ctx.world == 1 ? "CommWorldOne.*" : "CommTest.*");
    if (ctx.rank != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new FailureOnlyPrinter(ctx.prefix()));
    }
    const int rc = RUN_ALL_TESTS();
    gpt2::g_runtime = nullptr;
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

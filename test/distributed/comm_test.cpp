// The communicator suite, built twice:
//   build/test/distributed/comm_test       the MPI communicator on host memory;
//   build/test/distributed/comm_nccl_test  (with GPT2_COMM_TEST_NCCL) the NCCL
//       communicator on device buffers, executed by the emulated NCCL with one
//       emulated device per rank, plus test/distributed/comm_nccl_test.cpp.
// Suites:
//   CommTest.*      the collectives at any world size above 1: run under
//                   mpirun -np 2 and -np 3 by test/distributed/comm_mpirun_test.sh
//                   (3: uneven ZeRO shards). Inputs are small integers and
//                   quarters so every sum is exact in float, whatever order
//                   the transport adds in; expectations are closed forms in rank
//                   and world.
//   CommWorldOne.*  the degenerate world of one process, which `make test`
//                   runs standalone: every collective is the identity (a copy
//                   out of place, nothing in place), with no bytes sent.
// main() picks the suites from the world size unless --gtest_filter (or
// GTEST_FILTER) names the tests, so neither is counted at the other's world size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"
#include "distributed/preempt.h"
#include "distributed/zero_plan.h"

#ifdef GPT2_COMM_TEST_NCCL
#include "emu/control.h"
#include "test/distributed/comm_nccl_test.h"
#endif

namespace gpt2 {
namespace {

// Set by main before the tests run and cleared after: MPI is initialised once
// per process, so no fixture can own it, and gtest fixtures get no arguments.
const DistRuntime* g_runtime = nullptr;

// ---- the communicator under test and its memory ------------------------------
// Tests fill and check Buffer<T>::host and hand the collectives ptr(); put()
// and get() move the data to and from the communicator's memory.
#ifdef GPT2_COMM_TEST_NCCL
constexpr bool kNccl = true;
template <class T>
using Buffer = DeviceBuffer<T>;
std::unique_ptr<Communicator> make_test_communicator() { return make_nccl_test_communicator(); }
#else
constexpr bool kNccl = false;
// Host memory: ptr() is the host data itself, nothing to move.
template <class T>
class Buffer {
 public:
  explicit Buffer(std::vector<T> values) : host(std::move(values)) {}
  explicit Buffer(size_t n, T fill = T()) : host(n, fill) {}
  T* ptr() { return host.data(); }
  void put() {}
  std::vector<T>& get() { return host; }
  std::vector<T> host;
};
std::unique_ptr<Communicator> make_test_communicator() { return make_mpi_communicator(*g_runtime); }
#endif

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = make_test_communicator();
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

// kAvg of inputs >= 0 whose exact sum is `sum`. MPI divides the (exact) sum
// once: T(sum) / world exactly. NCCL's ncclAvg multiplies every input by
// T(1/world) and then adds rank after rank: exact too where 1/world is (a power
// of two), otherwise off by the multiply's and the world-1 additions' rounding,
// each at most the unit roundoff u of the partial sum: (world + 1) u sum / world,
// doubled here for second-order terms (a few ulps).
bool avg_is_exact(int world) { return !kNccl || (world & (world - 1)) == 0; }

template <class T>
::testing::AssertionResult is_average(T got, double sum, int world) {
  const T exact = static_cast<T>(static_cast<T>(sum) / static_cast<T>(world));
  const double u = std::numeric_limits<T>::epsilon() / 2;
  const double tol = avg_is_exact(world) ? 0.0 : 2.0 * (world + 1) * u * sum / world;
  const double err = std::fabs(static_cast<double>(got) - (avg_is_exact(world) ? exact : sum / world));
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "average " << got << " of sum " << sum << " over " << world
                                       << " ranks: off by " << err << ", allowed " << tol;
}

// For comparing two reductions bit for bit: kAvg where every call gives the same
// bits whatever order it adds in, kSum (exact on these inputs) where not.
ReduceOp order_free_avg(int world) { return avg_is_exact(world) ? ReduceOp::kAvg : ReduceOp::kSum; }

TEST_F(CommTest, LayoutMatchesCommunicator) {
  const DistContext& ctx = g_runtime->context();
  EXPECT_EQ(ctx.rank, rank);
  EXPECT_EQ(ctx.world, world);
  EXPECT_GE(ctx.local_rank, 0);
  EXPECT_LT(ctx.local_rank, ctx.local_world);
  EXPECT_LT(ctx.node, ctx.num_nodes);
  // Every rank on one machine here: one node holding everyone.
  Buffer<int32_t> layout(2);
  layout.host = {ctx.num_nodes, ctx.local_world};
  layout.put();
  comm->all_reduce(layout.ptr(), layout.ptr(), 2, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(layout.get(), (std::vector<int32_t>{1, world}));
  EXPECT_EQ(ctx.local_rank, rank);
  EXPECT_EQ(comm->is_device_memory(), kNccl);
  EXPECT_EQ(comm->name(), kNccl ? "nccl" : "mpi");
}

TEST_F(CommTest, AllReduceFloatSumAvgInAndOutOfPlace) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{1001}}) {
    Buffer<float> send(n), recv(n, -1.0f), inplace(n);
    for (size_t i = 0; i < n; ++i) send.host[i] = inplace.host[i] = contrib(rank, i);
    send.put(), inplace.put();
    comm->all_reduce(send.ptr(), recv.ptr(), n, DataType::kFloat32, ReduceOp::kSum);
    all_reduce(*comm, inplace.ptr(), n, ReduceOp::kAvg);
    recv.get(), inplace.get(), send.get();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(recv.host[i], static_cast<float>(sum_over_ranks(i, world))) << "i=" << i;
      ASSERT_TRUE(is_average(inplace.host[i], sum_over_ranks(i, world), world)) << "i=" << i;
      ASSERT_EQ(send.host[i], contrib(rank, i));  // input untouched out of place
    }
  }
}

TEST_F(CommTest, AllReduceDoubleAndMax) {
  Buffer<double> d(5);
  for (size_t i = 0; i < d.host.size(); ++i) d.host[i] = 1e-3 * (rank + 1) * (i + 1);
  d.put();
  all_reduce(*comm, d.ptr(), d.host.size(), ReduceOp::kSum);
  d.get();
  // Each input is 2 fp64 roundings off 1e-3 (r+1)(i+1), the world terms add in any
  // order (world - 1 roundings), the reference rounds 3 times: (world + 4) u of the sum.
  for (size_t i = 0; i < d.host.size(); ++i) {
    const double want = 1e-3 * (i + 1) * world * (world + 1) / 2.0;
    EXPECT_NEAR(d.host[i], want, (world + 4) * 0x1p-53 * want);
  }
  Buffer<double> top(1, 3.0 * rank);
  comm->all_reduce(top.ptr(), top.ptr(), 1, DataType::kFloat64, ReduceOp::kMax);
  EXPECT_EQ(top.get()[0], 3.0 * (world - 1));
  Buffer<int32_t> flag(1, rank == world - 1 ? 7 : 0);
  comm->all_reduce(flag.ptr(), flag.ptr(), 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(flag.get()[0], 7);
  EXPECT_THROW(comm->all_reduce(flag.ptr(), flag.ptr(), 1, DataType::kInt32, ReduceOp::kAvg),
               std::runtime_error);
}

TEST_F(CommTest, ReduceScatterEqualBlocks) {
  for (size_t block : {size_t{1}, size_t{5}, size_t{333}}) {
    const size_t n = block * static_cast<size_t>(world);
    Buffer<float> send(n), recv(block, -1.0f);
    for (size_t i = 0; i < n; ++i) send.host[i] = contrib(rank, i);
    send.put();
    comm->reduce_scatter(send.ptr(), recv.ptr(), block, DataType::kFloat32, ReduceOp::kSum);
    recv.get();
    for (size_t k = 0; k < block; ++k)
      ASSERT_EQ(recv.host[k], static_cast<float>(sum_over_ranks(rank * block + k, world)));
    // In place, NCCL's convention: my block ends up at my offset of the buffer.
    float* mine = send.ptr() + rank * block;
    comm->reduce_scatter(send.ptr(), mine, block, DataType::kFloat32, ReduceOp::kAvg);
    send.get();
    for (size_t k = 0; k < block; ++k)
      ASSERT_TRUE(is_average(send.host[rank * block + k], sum_over_ranks(rank * block + k, world), world));
  }
}

TEST_F(CommTest, ReduceScatterUnevenBlocks) {
  // Blocks of 0, 3, 1, 4, ... elements: some ranks receive nothing, and pass null.
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = (r * 3) % 5;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  const size_t mine = counts[static_cast<size_t>(rank)];
  Buffer<double> send(total), recv(mine, -1.0);
  for (size_t i = 0; i < total; ++i) send.host[i] = contrib(rank, i);
  send.put();
  comm->reduce_scatter_v(send.ptr(), mine ? recv.ptr() : nullptr, counts, DataType::kFloat64,
                         ReduceOp::kAvg);
  recv.get();
  for (size_t k = 0; k < mine; ++k)
    EXPECT_TRUE(is_average(recv.host[k], sum_over_ranks(begin + k, world), world)) << "k=" << k;
  // One count per rank, no more, no less.
  std::vector<size_t> wrong(static_cast<size_t>(world) + 1, 0);
  EXPECT_THROW(comm->reduce_scatter_v(send.ptr(), recv.ptr(), wrong, DataType::kFloat64,
                                      ReduceOp::kSum),
               std::runtime_error);
}

// The inverse of the uneven reduce-scatter: each rank's block (0, 3, 1, 4, ...
// elements, some empty) reaches every rank in place, bit for bit.
TEST_F(CommTest, AllGatherVUnevenBlocksInPlace) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = (r * 3) % 5;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  Buffer<double> buf(total, -1.0), want(total);
  size_t at = 0;
  for (int r = 0; r < world; ++r)
    for (size_t k = 0; k < counts[static_cast<size_t>(r)]; ++k, ++at) want.host[at] = contrib(r, at);
  for (size_t k = 0; k < counts[static_cast<size_t>(rank)]; ++k) buf.host[begin + k] = want.host[begin + k];
  buf.put();
  comm->all_gather_v(buf.ptr(), counts, DataType::kFloat64);
  EXPECT_EQ(buf.get(), want.host);
  std::vector<size_t> wrong(static_cast<size_t>(world) + 1, 0);
  EXPECT_THROW(comm->all_gather_v(buf.ptr(), wrong, DataType::kFloat64), std::runtime_error);
}

// Issued asynchronously (ZeRO-3's gather ahead): two gathers under one ticket
// land once it is waited for; waiting again is harmless. MPI and NCCL leave
// them in flight at world > 1 (a ticket), complete them at once at world 1.
TEST_F(CommTest, AllGatherVAsynchronousUnderOneTicket) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = static_cast<size_t>(r % 3 + 1);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  Buffer<float> a(total, -1.0f), b(total, -2.0f);
  std::vector<float> want_a(total), want_b(total);
  for (size_t i = 0; i < total; ++i) {
    want_a[i] = static_cast<float>(i);
    want_b[i] = static_cast<float>(1000 + i);
  }
  for (size_t k = begin; k < begin + counts[static_cast<size_t>(rank)]; ++k) {
    a.host[k] = want_a[k];
    b.host[k] = want_b[k];
  }
  a.put();
  b.put();
  comm->begin_async();
  comm->all_gather_v(a.ptr(), counts, DataType::kFloat32);
  comm->all_gather_v(b.ptr(), counts, DataType::kFloat32);
  const CommTicket ticket = comm->end_async();
  EXPECT_EQ(ticket != 0, comm->overlaps() && world > 1);
  comm->wait(ticket);
  comm->wait(ticket);
  EXPECT_EQ(a.get(), want_a);
  EXPECT_EQ(b.get(), want_b);
}

TEST_F(CommTest, AllGatherInAndOutOfPlace) {
  const size_t block = 11;
  Buffer<float> mine(block), all(block * world, -1.0f);
  for (size_t k = 0; k < block; ++k) mine.host[k] = static_cast<float>(100 * rank + k);
  mine.put();
  comm->all_gather(mine.ptr(), all.ptr(), block, DataType::kFloat32);
  all.get();
  for (int r = 0; r < world; ++r)
    for (size_t k = 0; k < block; ++k)
      ASSERT_EQ(all.host[r * block + k], static_cast<float>(100 * r + k));
  Buffer<float> buf(block * world, -1.0f);
  std::memcpy(buf.host.data() + rank * block, mine.host.data(), block * sizeof(float));
  buf.put();
  comm->all_gather(buf.ptr() + rank * block, buf.ptr(), block, DataType::kFloat32);
  EXPECT_EQ(buf.get(), all.host);
}

TEST_F(CommTest, OverlappingBuffersAreRejected) {
  Buffer<float> buf(4 * world + 1);
  float* p = buf.ptr();
  if (world > 1) {
    // Receive block overlapping the send buffer somewhere other than my own block.
    float* wrong = p + ((rank + 1) % world) * 4;
    EXPECT_THROW(comm->reduce_scatter(p, wrong, 4, DataType::kFloat32, ReduceOp::kSum),
                 std::runtime_error);
  }
  // A shifted all-gather input inside the output is not the in-place form.
  EXPECT_THROW(comm->all_gather(p + rank * 4 + 1, p, 4, DataType::kFloat32), std::runtime_error);
  // Nor is a half-overlapping all-reduce, or a receive block inside the send of
  // reduce_scatter_v (which has no in-place form).
  EXPECT_THROW(comm->all_reduce(p, p + 1, 4, DataType::kFloat32, ReduceOp::kSum),
               std::runtime_error);
  EXPECT_THROW(comm->reduce_scatter_v(p, p + 1, std::vector<size_t>(world, 1), DataType::kFloat32,
                                      ReduceOp::kSum),
               std::runtime_error);
  // None of them was counted or sent: every rank is still in step.
  EXPECT_EQ(comm->traffic(CommCall::kReduceScatter).calls, 0u);
  EXPECT_EQ(comm->traffic(CommCall::kAllGather).calls, 0u);
  comm->barrier();
}

TEST_F(CommTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < world; ++root) {
    Buffer<char> msg(32, '\0');
    if (rank == root) std::snprintf(msg.host.data(), msg.host.size(), "hello from %d", root);
    msg.put();
    comm->broadcast(msg.ptr(), msg.host.size(), root);
    EXPECT_EQ(std::string(msg.get().data()), "hello from " + std::to_string(root));
  }
  Buffer<char> c(1);
  EXPECT_THROW(comm->broadcast(c.ptr(), 1, world), std::runtime_error);
}

TEST_F(CommTest, TrafficCountersFollowTheRingModel) {
  const uint64_t w = static_cast<uint64_t>(world);
  Buffer<float> v(12 * world);
  comm->reset_stats();
  comm->all_reduce(v.ptr(), v.ptr(), v.host.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->all_reduce(v.ptr(), v.ptr(), v.host.size(), DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter(v.ptr(), v.ptr() + rank * 12, 12, DataType::kFloat32, ReduceOp::kSum);
  comm->all_gather(v.ptr() + rank * 12, v.ptr(), 12, DataType::kFloat32);
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

// The ZeRO data flow on a random table: per-unit reduce_scatter_v of packed
// pieces (ZeRO-2) and one reduce_scatter of the padded buffer (ZeRO-1) both
// give each rank exactly its shard of the all-reduced gradient, and the
// all-gather of the shards rebuilds the whole vector.
TEST_F(CommTest, ZeroPlanExchangesMatchAllReduce) {
  const std::vector<ParamTensorSpec> table = {
      {"wte", 37, 0}, {"ln", 3 * 4, 3}, {"w", 3 * 9, 3}, {"b", 3 * 2, 3}, {"lnf", 5, 0}};
  const ZeroPlan plan(table, world);
  const size_t P = plan.num_params(), S = plan.shard_size();
  const ReduceOp op = order_free_avg(world);
  std::vector<float> grad(plan.padded_size(), 0.0f);  // padding stays zero
  for (size_t i = 0; i < P; ++i) grad[i] = contrib(rank, i);
  Buffer<float> reference(grad);
  all_reduce(*comm, reference.ptr(), grad.size(), op);
  reference.get();

  // ZeRO-2: units in backward order, each packed by owner and exchanged once.
  std::vector<float> shard(S, 0.0f);
  for (int u = plan.num_units() - 1; u >= 0; --u) {
    const UnitExchange& ex = plan.unit(u);
    Buffer<float> packed(ex.numel), received(ex.counts[rank]);
    for (const ExchangePiece& p : ex.pieces)
      std::memcpy(&packed.host[p.pack_offset], &grad[p.global.begin], p.global.size() * sizeof(float));
    packed.put();
    comm->reduce_scatter_v(packed.ptr(), received.host.empty() ? nullptr : received.ptr(), ex.counts,
                           DataType::kFloat32, op);
    received.get();
    size_t at = 0;
    for (size_t p = ex.first_piece_of_rank[rank]; p < ex.first_piece_of_rank[rank + 1]; ++p) {
      const ExchangePiece& piece = ex.pieces[p];
      for (size_t k = 0; k < piece.global.size(); ++k) shard[piece.shard_offset + k] += received.host[at++];
    }
    EXPECT_EQ(at, received.host.size());
  }
  const ElemRange mine = plan.shard(rank);
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(shard[k], reference.host[mine.begin + k]) << "k=" << k;

  // ZeRO-1: one reduce-scatter over the padded buffer, in place.
  Buffer<float> buf(grad);
  comm->reduce_scatter(buf.ptr(), buf.ptr() + mine.begin, S, DataType::kFloat32, op);
  buf.get();
  for (size_t k = 0; k < S; ++k) ASSERT_EQ(buf.host[mine.begin + k], shard[k]);
  comm->all_gather(buf.ptr() + mine.begin, buf.ptr(), S, DataType::kFloat32);
  EXPECT_EQ(buf.get(), reference.host);
}

#ifndef GPT2_COMM_TEST_NCCL
// ---- MPI only ------------------------------------------------------------------

TEST_F(CommTest, SmallMessageLimitSplitsCallsWithSameResults) {
  // 3 elements per MPI call: every chunked path (all-reduce, reduce-scatter to
  // owners, all-gathers by broadcasts, broadcast) must give the plain results.
  auto chunked = make_mpi_communicator(*g_runtime, 3);
  const size_t block = 10, n = block * world;
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = contrib(rank, i);
  chunked->all_reduce(send.data(), recv.data(), n, DataType::kFloat32, ReduceOp::kAvg);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(is_average(recv[i], sum_over_ranks(i, world), world));
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
  std::vector<float> gathered(n, -1.0f);  // blocks of 5, 4, 4, ...: every block broadcast in pieces
  for (size_t k = 0; k < counts[rank]; ++k) gathered[begin + k] = send[begin + k];
  chunked->all_gather_v(gathered.data(), counts, DataType::kFloat32);
  const size_t total = 5 + 4 * (world - 1);
  for (size_t i = 0; i < total; ++i) {
    const int owner = i < 5 ? 0 : 1 + static_cast<int>((i - 5) / 4);
    ASSERT_EQ(gathered[i], static_cast<float>(contrib(owner, i))) << "i=" << i;
  }
  std::vector<char> bytes(17, 0);
  if (rank == 0) for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + i);
  chunked->broadcast(bytes.data(), bytes.size(), 0);
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], static_cast<char>('a' + i));
}

// The stop flag is a host scalar: it goes through MPI in every configuration.
TEST_F(CommTest, StopCheckIsCollective) {
  clear_stop_signal();
  EXPECT_FALSE(should_stop(*comm));
  // Only the last rank saw the signal; every rank must decide to stop.
  if (rank == world - 1) request_stop(SIGUSR1);
  EXPECT_TRUE(should_stop(*comm));
  EXPECT_EQ(local_stop_signal(), SIGUSR1);  // every rank names the signal another rank saw
  clear_stop_signal();
  EXPECT_FALSE(should_stop(*comm));
}

// bf16 exists only on the GPU: the host communicator refuses it on every entry
// that takes a type, before counting, naming the rank and the way out.
TEST_F(CommTest, BFloat16IsRefusedOnHost) {
  std::vector<uint16_t> v(2 * world);
  const std::string want = g_runtime->context().prefix();
  auto expect_refused = [&](const char* call, auto&& f) {
    try {
      f();
      ADD_FAILURE() << call << " accepted bf16";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(want + call + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find("bf16 buffers are device buffers: use the NCCL communicator"),
                std::string::npos) << msg;
    }
  };
  expect_refused("all_reduce", [&] {
    comm->all_reduce(v.data(), v.data(), 2, DataType::kBFloat16, ReduceOp::kSum);
  });
  expect_refused("reduce_scatter", [&] {
    comm->reduce_scatter(v.data(), v.data() + 2 * rank, 2, DataType::kBFloat16, ReduceOp::kAvg);
  });
  expect_refused("reduce_scatter_v", [&] {
    comm->reduce_scatter_v(v.data(), nullptr, std::vector<size_t>(world, 0), DataType::kBFloat16,
                           ReduceOp::kMax);
  });
  expect_refused("all_gather", [&] {
    comm->all_gather(v.data() + 2 * rank, v.data(), 2, DataType::kBFloat16);
  });
  for (const CommTraffic& t : comm->stats()) EXPECT_EQ(t.calls, 0u);
  EXPECT_EQ(data_type_bytes(DataType::kBFloat16), 2u);
}
#endif  // !GPT2_COMM_TEST_NCCL

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
  const std::vector<float> values = odd_floats(13);
  const size_t n = values.size();
  Buffer<float> send(values);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    Buffer<float> recv(n, 5.0f), inplace(values);
    comm->all_reduce(send.ptr(), recv.ptr(), n, DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(recv.get(), values));
    all_reduce(*comm, inplace.ptr(), n, op);
    EXPECT_TRUE(same_bits(inplace.get(), values));
    Buffer<float> block(n, 5.0f);
    comm->reduce_scatter(send.ptr(), block.ptr(), n, DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(block.get(), values));
    Buffer<float> piece(n, 5.0f);
    comm->reduce_scatter_v(send.ptr(), piece.ptr(), {n}, DataType::kFloat32, op);
    EXPECT_TRUE(same_bits(piece.get(), values));
  }
  Buffer<float> inplace(values);
  comm->reduce_scatter(inplace.ptr(), inplace.ptr(), n, DataType::kFloat32, ReduceOp::kAvg);
  EXPECT_TRUE(same_bits(inplace.get(), values));
  Buffer<double> third(1, 1.0 / 3.0);
  all_reduce(*comm, third.ptr(), 1, ReduceOp::kAvg);
  EXPECT_EQ(third.get()[0], 1.0 / 3.0);
  Buffer<int32_t> flag(1, -3);
  comm->all_reduce(flag.ptr(), flag.ptr(), 1, DataType::kInt32, ReduceOp::kMax);
  EXPECT_EQ(flag.get()[0], -3);
  // An empty block of reduce_scatter_v needs no receive buffer.
  comm->reduce_scatter_v(send.ptr(), nullptr, {0}, DataType::kFloat32, ReduceOp::kSum);
}

TEST_F(CommWorldOne, GatherAndBroadcastLeaveTheData) {
  const std::vector<float> values = odd_floats(9);
  Buffer<float> mine(values), all(values.size(), 5.0f), inplace(values);
  comm->all_gather(mine.ptr(), all.ptr(), values.size(), DataType::kFloat32);
  EXPECT_TRUE(same_bits(all.get(), values));
  comm->all_gather(inplace.ptr(), inplace.ptr(), values.size(), DataType::kFloat32);
  EXPECT_TRUE(same_bits(inplace.get(), values));
  Buffer<char> msg(16, '\0');
  std::snprintf(msg.host.data(), msg.host.size(), "only rank");
  msg.put();
  comm->all_gather_v(inplace.ptr(), {values.size()}, DataType::kFloat32);
  EXPECT_TRUE(same_bits(inplace.get(), values));
  comm->broadcast(msg.ptr(), msg.host.size(), 0);
  EXPECT_EQ(std::string(msg.get().data()), "only rank");
  EXPECT_THROW(comm->broadcast(msg.ptr(), msg.host.size(), 1), std::runtime_error);  // no rank 1
  comm->barrier();
}

TEST_F(CommWorldOne, TrafficCountsPayloadButSendsNothing) {
  Buffer<float> v(24), piece(24);
  comm->reset_stats();
  comm->all_reduce(v.ptr(), v.ptr(), 24, DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter(v.ptr(), v.ptr(), 24, DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_scatter_v(v.ptr(), piece.ptr(), {24}, DataType::kFloat32, ReduceOp::kSum);
  comm->all_gather(v.ptr(), v.ptr(), 24, DataType::kFloat32);
  comm->broadcast(v.ptr(), 8, 0);
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

#ifdef GPT2_COMM_TEST_NCCL
const DistRuntime& test_runtime() { return *g_runtime; }
#endif

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
#ifdef GPT2_COMM_TEST_NCCL
    // One emulated node: a device per local process, as on a GPU node with one
    // rank per GPU; the communicator selects the local rank's.
    gpt2::emu::set_device_count(ctx.local_world);
    const char* suites = ctx.world == 1 ? "CommWorldOne.*" : "CommTest.*:CommNccl.*";
#else
    const char* suites = ctx.world == 1 ? "CommWorldOne.*" : "CommTest.*";
#endif
    // No filter given: the suites for this world size (see the top of the file).
    if (std::string(GTEST_FLAG_GET(filter)) == "*") GTEST_FLAG_SET(filter, suites);
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

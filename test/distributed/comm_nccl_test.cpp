// The NCCL communicator's own cases, in build/test/distributed/comm_nccl_test
// beside the communicator suite (comm_test.cpp built with GPT2_COMM_TEST_NCCL).
// The emulated NCCL executes them: one process per emulated GPU under mpirun.
//   CommNccl.*       bf16 collectives, traffic counters equal to the MPI
//                    communicator's, NCCL errors surfaced rank-prefixed with
//                    NCCL's text; run at -np 2 and -np 3 with CommTest.*.
//   CommNcclFault.*  a collective failing while it runs, planted by the
//                    emulator's GPT2_EMU_NCCL_FAIL_AT=2 (process-wide, so run
//                    alone: test/distributed/comm_mpirun_test.sh does).
// bf16 inputs are small integers (or their halves): exactly representable, and
// every partial sum too, so sums and maxima are exact whatever order NCCL's
// ring adds in; averages are exact where 1/world is, bounded elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/comm_nccl.h"
#include "test/distributed/comm_nccl_test.h"

namespace gpt2 {

std::unique_ptr<Communicator> make_nccl_test_communicator() {
  auto bootstrap = make_mpi_communicator(test_runtime());
  return make_nccl_communicator(*bootstrap, test_runtime().context().local_rank, nullptr);
}

namespace {

// bf16 on the host: fp32's upper half, rounded to nearest even (no NaNs here).
uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
// `v` in bf16, every value exactly representable.
std::vector<uint16_t> bf16_exact(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    out[i] = to_bf16(v[i]);
    if (from_bf16(out[i]) != v[i]) throw std::logic_error("not exact in bf16: " + std::to_string(v[i]));
  }
  return out;
}

// Rank r's value at i: an integer of at most 4 bits plus r, and the exact sum.
float small_int(int r, size_t i) { return static_cast<float>(i % 13) + static_cast<float>(r); }
float small_int_sum(size_t i, int world) {
  return static_cast<float>((i % 13) * world + world * (world - 1) / 2);
}

// ncclAvg in bf16 of inputs >= 0 with exact sum `sum`: each input times
// bf16(1/world), then world-1 additions, each rounding by at most u = 2^-8 of
// the partial sum (docs/emulator.md); exact where 1/world is a power of two.
::testing::AssertionResult is_bf16_average(float got, float sum, int world) {
  const bool exact = (world & (world - 1)) == 0;
  const double tol = exact ? 0.0 : 2.0 * (world + 1) * std::ldexp(1.0, -8) * sum / world;
  const double err = std::fabs(static_cast<double>(got) - static_cast<double>(sum) / world);
  if (err <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "bf16 average " << got << " of sum " << sum << " over "
                                       << world << " ranks: off by " << err << ", allowed " << tol;
}

// The message of the runtime_error f throws ("(no error)" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class CommNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = make_nccl_test_communicator();
    rank = comm->rank();
    world = comm->world();
    prefix = test_runtime().context().prefix();
  }
  std::unique_ptr<Communicator> comm;
  int rank = 0, world = 1;
  std::string prefix;  // "rank R/W (host): "
};

TEST_F(CommNccl, RunsOnThisRanksDevice) {
  const DistContext& ctx = test_runtime().context();
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_TRUE(comm->is_device_memory());
  EXPECT_EQ(rank, ctx.rank);
  EXPECT_EQ(world, ctx.world);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, ctx.local_rank);
}

TEST_F(CommNccl, BFloat16AllReduceSumMaxAvg) {
  const size_t n = 301;  // several ring chunks, not a multiple of the world
  std::vector<float> x(n), signed_x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = small_int(rank, i);
    signed_x[i] = i % 2 ? x[i] : -x[i];
  }
  DeviceBuffer<uint16_t> send(bf16_exact(x)), sum(n), top(bf16_exact(signed_x)), avg(bf16_exact(x));
  comm->all_reduce(send.ptr(), sum.ptr(), n, DataType::kBFloat16, ReduceOp::kSum);
  comm->all_reduce(top.ptr(), top.ptr(), n, DataType::kBFloat16, ReduceOp::kMax);
  comm->all_reduce(avg.ptr(), avg.ptr(), n, DataType::kBFloat16, ReduceOp::kAvg);
  sum.get(), top.get(), avg.get();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(from_bf16(sum.host[i]), small_int_sum(i, world)) << "i=" << i;
    // Odd i: positive, the last rank's is largest; even i: negative, rank 0's.
    ASSERT_EQ(from_bf16(top.host[i]), i % 2 ? small_int(world - 1, i) : -small_int(0, i)) << "i=" << i;
    ASSERT_TRUE(is_bf16_average(from_bf16(avg.host[i]), small_int_sum(i, world), world)) << "i=" << i;
  }
  EXPECT_EQ(send.get(), bf16_exact(x));  // out of place: input untouched
}

// The ZeRO-1 pattern in bf16: reduce-scatter in place (my block at my offset),
// then all-gather in place from there: every rank ends with the whole sum.
TEST_F(CommNccl, BFloat16ReduceScatterAndAllGatherInPlace) {
  const size_t block = 37, n = block * static_cast<size_t>(world);
  std::vector<float> x(n), want(n);
  for (size_t i = 0; i < n; ++i) x[i] = small_int(rank, i), want[i] = small_int_sum(i, world);
  DeviceBuffer<uint16_t> buf(bf16_exact(x)), mine(block);
  comm->reduce_scatter(buf.ptr(), mine.ptr(), block, DataType::kBFloat16, ReduceOp::kMax);
  for (size_t k = 0; k < block; ++k)
    ASSERT_EQ(from_bf16(mine.get()[k]), small_int(world - 1, rank * block + k)) << "k=" << k;
  comm->reduce_scatter(buf.ptr(), buf.ptr() + rank * block, block, DataType::kBFloat16,
                       ReduceOp::kSum);
  buf.get();
  for (size_t k = 0; k < block; ++k)
    ASSERT_EQ(from_bf16(buf.host[rank * block + k]), want[rank * block + k]) << "k=" << k;
  comm->all_gather(buf.ptr() + rank * block, buf.ptr(), block, DataType::kBFloat16);
  EXPECT_EQ(buf.get(), bf16_exact(want));
}

// Uneven blocks with empty ones: ranks 1, 3, ... receive nothing and pass null,
// rank 2's block starts after an empty one. One ncclReduce per non-empty block.
TEST_F(CommNccl, BFloat16ReduceScatterVWithEmptyBlocksAndNullRecv) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = r % 2 ? 0 : 2 + r;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  const size_t mine = counts[static_cast<size_t>(rank)];
  std::vector<float> x(total);
  for (size_t i = 0; i < total; ++i) x[i] = small_int(rank, i);
  DeviceBuffer<uint16_t> send(bf16_exact(x)), sum(mine), avg(mine);
  comm->reduce_scatter_v(send.ptr(), mine ? sum.ptr() : nullptr, counts, DataType::kBFloat16,
                         ReduceOp::kSum);
  comm->reduce_scatter_v(send.ptr(), mine ? avg.ptr() : nullptr, counts, DataType::kBFloat16,
                         ReduceOp::kAvg);
  sum.get(), avg.get();
  for (size_t k = 0; k < mine; ++k) {
    EXPECT_EQ(from_bf16(sum.host[k]), small_int_sum(begin + k, world)) << "k=" << k;
    EXPECT_TRUE(is_bf16_average(from_bf16(avg.host[k]), small_int_sum(begin + k, world), world));
  }
  EXPECT_EQ(send.get(), bf16_exact(x));
}

// The gather of uneven blocks (ZeRO-3's unit gather) in bf16: one in-place
// ncclBroadcast per non-empty block, every rank ending with every block.
TEST_F(CommNccl, BFloat16AllGatherVWithEmptyBlocks) {
  std::vector<size_t> counts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) counts[static_cast<size_t>(r)] = r % 2 ? 0 : 2 + r;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
  std::vector<float> want(total), mine(total, -1.0f);
  size_t at = 0;
  for (int r = 0; r < world; ++r)
    for (size_t k = 0; k < counts[static_cast<size_t>(r)]; ++k, ++at) want[at] = small_int(r, at);
  for (size_t k = 0; k < counts[static_cast<size_t>(rank)]; ++k) mine[begin + k] = want[begin + k];
  DeviceBuffer<uint16_t> buf(bf16_exact(mine));
  comm->all_gather_v(buf.ptr(), counts, DataType::kBFloat16);
  EXPECT_EQ(buf.get(), bf16_exact(want));
}

// Counting is the interface's, so the same calls count the same on both
// communicators; bf16 counts by bytes (n bf16 = n/2 fp32).
TEST_F(CommNccl, TrafficCountersEqualTheMpiCommunicators) {
  auto mpi = make_mpi_communicator(test_runtime());
  const size_t block = 6, n = block * static_cast<size_t>(world);
  std::vector<size_t> counts(static_cast<size_t>(world), 2);
  counts[0] = 0;
  std::vector<float> h(n, 1.0f), h_recv(n);
  DeviceBuffer<float> d(n, 1.0f), d_recv(n);
  DeviceBuffer<uint16_t> d_bf16(2 * n, to_bf16(1.0f));
  auto same_calls = [&](Communicator& c, float* buf, float* recv) {
    c.reset_stats();
    c.all_reduce(buf, buf, n, DataType::kFloat32, ReduceOp::kAvg);
    c.reduce_scatter(buf, buf + rank * block, block, DataType::kFloat32, ReduceOp::kSum);
    c.reduce_scatter_v(buf, counts[rank] ? recv : nullptr, counts, DataType::kFloat32, ReduceOp::kSum);
    c.all_gather(buf + rank * block, buf, block, DataType::kFloat32);
    c.all_gather_v(buf, counts, DataType::kFloat32);
    c.broadcast(buf, 7, world - 1);
    c.barrier();
  };
  same_calls(*mpi, h.data(), h_recv.data());
  same_calls(*comm, d.ptr(), d_recv.ptr());
  for (size_t c = 0; c < static_cast<size_t>(CommCall::kCount); ++c) {
    const CommTraffic &m = mpi->stats()[c], &g = comm->stats()[c];
    EXPECT_EQ(g.calls, m.calls) << comm_call_name(static_cast<CommCall>(c));
    EXPECT_EQ(g.payload_bytes, m.payload_bytes) << comm_call_name(static_cast<CommCall>(c));
    EXPECT_EQ(g.sent_bytes, m.sent_bytes) << comm_call_name(static_cast<CommCall>(c));
  }
  EXPECT_EQ(comm->traffic(CommCall::kBarrier).calls, 1u);  // its all-reduce is not counted as one
  mpi->reset_stats(), comm->reset_stats();
  mpi->all_reduce(h.data(), h.data(), n, DataType::kFloat32, ReduceOp::kSum);
  comm->all_reduce(d_bf16.ptr(), d_bf16.ptr(), 2 * n, DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).payload_bytes, 4 * n);
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).sent_bytes, mpi->traffic(CommCall::kAllReduce).sent_bytes);
}

TEST_F(CommNccl, BootstrapMustBeHostMemory) {
  const std::string msg = error_of([&] { make_nccl_communicator(*comm, 0, nullptr); });
  EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "bootstrap communicator must work on host memory")) << msg;
}

// Every rank asks for device 0: NCCL refuses two ranks on one GPU at
// ncclCommInitRank, and every rank reports it with NCCL's text.
TEST_F(CommNccl, SharedDeviceIsRefusedAtInit) {
  auto bootstrap = make_mpi_communicator(test_runtime());
  const std::string msg = error_of([&] { make_nccl_communicator(*bootstrap, 0, nullptr); });
  ASSERT_EQ(cudaSetDevice(test_runtime().context().local_rank), cudaSuccess);
  EXPECT_EQ(msg.rfind(prefix + "distributed/comm_nccl.cpp: ncclCommInitRank(nranks " +
                          std::to_string(world) + ", rank " + std::to_string(rank) +
                          ", CUDA device 0) failed: invalid usage",
                      0),
            0u)
      << msg;
  EXPECT_TRUE(contains(msg, "Duplicate GPU detected")) << msg;  // ncclGetLastError's text
}

// One rank cannot set up its device: it names its error, the others learn of
// it at the same step instead of waiting for it in ncclCommInitRank.
TEST_F(CommNccl, SetUpFailingOnOneRankFailsOnEveryRank) {
  auto bootstrap = make_mpi_communicator(test_runtime());
  const int device = rank == world - 1 ? 99 : test_runtime().context().local_rank;
  const std::string msg = error_of([&] { make_nccl_communicator(*bootstrap, device, nullptr); });
  ASSERT_EQ(cudaSetDevice(test_runtime().context().local_rank), cudaSuccess);
  if (rank == world - 1)
    EXPECT_EQ(msg.rfind(prefix + "distributed/comm_nccl.cpp: cudaSetDevice(99) failed: ", 0), 0u) << msg;
  else
    EXPECT_EQ(msg, prefix + "preparing the CUDA device failed on another rank (see its error)");
}

// A call NCCL refuses when it is made (here: a stream that no longer exists),
// with ncclGetErrorString's and ncclGetLastError's texts.
TEST_F(CommNccl, RefusedCallNamesNcclsError) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto bootstrap = make_mpi_communicator(test_runtime());
  auto on_stream = make_nccl_communicator(*bootstrap, test_runtime().context().local_rank, stream);
  DeviceBuffer<float> v(4, 1.0f);
  on_stream->all_reduce(v.ptr(), v.ptr(), 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(v.get(), std::vector<float>(4, static_cast<float>(world)));
  on_stream->barrier();
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  const std::string msg = error_of(
      [&] { on_stream->all_reduce(v.ptr(), v.ptr(), 4, DataType::kFloat32, ReduceOp::kSum); });
  EXPECT_EQ(msg.rfind(prefix + "distributed/comm_nccl.cpp: ncclAllReduce(4 fp32) failed: ", 0), 0u) << msg;
  EXPECT_TRUE(contains(msg, "unhandled cuda error")) << msg;
  EXPECT_TRUE(contains(msg, "stream is not a valid CUDA stream")) << msg;
}

// Ranks calling different collectives: the emulated NCCL fails the collective
// while it runs (a GPU would hang), every rank sees it at the call, and the
// communicator refuses every later call, naming the first failure.
TEST_F(CommNccl, CollectiveFailingWhileRunningIsReported) {
  DeviceBuffer<float> v(5, 1.0f);
  const size_t n = rank == 0 ? 4 : 5;
  const std::string msg =
      error_of([&] { comm->all_reduce(v.ptr(), v.ptr(), n, DataType::kFloat32, ReduceOp::kSum); });
  EXPECT_EQ(msg.rfind(prefix + "distributed/comm_nccl.cpp: a collective failed while running "
                               "(reported after ncclAllReduce(" + std::to_string(n) + " fp32)): invalid usage",
                      0),
            0u)
      << msg;
  EXPECT_TRUE(contains(msg, "ranks called different collectives")) << msg;
  const std::string later = error_of([&] { comm->barrier(); });
  EXPECT_EQ(later.rfind(prefix + "distributed/comm_nccl.cpp: ncclAllReduce(1 int32) of barrier failed: invalid usage", 0), 0u)
      << later;
  EXPECT_TRUE(contains(later, "asynchronous error of the communicator: invalid usage")) << later;
  comm.reset();  // aborted, not destroyed: must return on every rank
}

// Run with GPT2_EMU_NCCL_FAIL_AT=2 only: the second collective of every NCCL
// communicator fails with ncclRemoteError while it runs (a lost peer).
TEST(CommNcclFault, PlantedRemoteErrorIsReportedOnEveryRank) {
  const char* at = std::getenv("GPT2_EMU_NCCL_FAIL_AT");
  ASSERT_TRUE(at != nullptr && std::string(at) == "2") << "run with GPT2_EMU_NCCL_FAIL_AT=2";
  auto comm = make_nccl_test_communicator();
  const std::string prefix = test_runtime().context().prefix();
  DeviceBuffer<float> v(3, 2.0f);
  comm->all_reduce(v.ptr(), v.ptr(), 3, DataType::kFloat32, ReduceOp::kSum);  // the first: fine
  EXPECT_EQ(v.get(), std::vector<float>(3, 2.0f * comm->world()));
  DeviceBuffer<float> all(static_cast<size_t>(comm->world()));
  const std::string msg = error_of(
      [&] { comm->all_gather(all.ptr() + comm->rank(), all.ptr(), 1, DataType::kFloat32); });
  EXPECT_EQ(msg.rfind(prefix + "distributed/comm_nccl.cpp: a collective failed while running "
                               "(reported after ncclAllGather(1 fp32)): remote process exited or there "
                               "was a network error: AllGather: injected by GPT2_EMU_NCCL_FAIL_AT=2",
                      0),
            0u)
      << msg;
  const std::string later = error_of([&] { comm->broadcast(v.ptr(), 4, 0); });
  EXPECT_TRUE(contains(later, "ncclBroadcast(4 bytes, root 0) failed: remote process exited")) << later;
  EXPECT_TRUE(contains(later, "asynchronous error of the communicator: remote process exited")) << later;
}

}  // namespace
}  // namespace gpt2

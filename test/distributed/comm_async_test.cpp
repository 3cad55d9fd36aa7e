// The NCCL communicator's overlap entries (CommNcclAsync.*, in
// build/test/distributed/comm_nccl_test; run at -np 2 and 3 by
// test/distributed/comm_mpirun_test.sh): reduce_pieces (in-place pieces onto
// one root or every rank, one group), the asynchronous form (begin_async /
// end_async / wait), and reduce_scatter_v with equal blocks (one
// ncclReduceScatter). Values are small integers: every sum is exact.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <vector>

#include "distributed/comm.h"
#include "test/distributed/comm_nccl_test.h"

namespace gpt2 {
namespace {

class CommNcclAsync : public ::testing::Test {
 protected:
  void SetUp() override {
    comm = make_nccl_test_communicator();
    rank = comm->rank();
    world = comm->world();
  }
  std::unique_ptr<Communicator> comm;
  int rank = 0, world = 1;
};

float value(int r, size_t i) { return static_cast<float>(i % 7) + static_cast<float>(r); }
float sum_over_ranks(size_t i, int world) {
  return static_cast<float>((i % 7) * world + world * (world - 1) / 2);
}

TEST_F(CommNcclAsync, ReducePiecesOntoRootsAndEveryRank) {
  const size_t n = 40;
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
  DeviceBuffer<float> buf(mine);
  const int last = world - 1;
  // Given out of order: the pieces need not be sorted.
  const std::vector<ReducePiece> pieces = {{20, 3, 0}, {0, 5, -1}, {7, 5, last}, {30, 0, 0}};
  comm->reduce_pieces(buf.ptr(), pieces, DataType::kFloat32, ReduceOp::kSum);
  const std::vector<float>& got = buf.get();
  for (size_t i = 0; i < n; ++i) {
    const bool everyone = i < 5, on_last = i >= 7 && i < 12, on_zero = i >= 20 && i < 23;
    if (everyone || (on_last && rank == last) || (on_zero && rank == 0)) {
      EXPECT_EQ(got[i], sum_over_ranks(i, world)) << "element " << i;
    } else if (!on_last && !on_zero) {
      EXPECT_EQ(got[i], value(rank, i)) << "element " << i << " is in no piece and must not change";
    }  // a rooted piece on another rank: unspecified
  }
  // Root -1 pieces count as an all-reduce, rooted ones as a reduce-scatter.
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).payload_bytes, 5u * 4u);
  EXPECT_EQ(comm->traffic(CommCall::kReduceScatter).payload_bytes, 8u * 4u);
}

TEST_F(CommNcclAsync, ReducePiecesRefusesOverlapAndBadRoots) {
  DeviceBuffer<float> buf(16, 1.0f);
  EXPECT_THROW(comm->reduce_pieces(buf.ptr(), {{0, 8, -1}, {4, 8, -1}}, DataType::kFloat32, ReduceOp::kSum),
               std::runtime_error);
  EXPECT_THROW(comm->reduce_pieces(buf.ptr(), {{0, 8, world}}, DataType::kFloat32, ReduceOp::kSum),
               std::runtime_error);
  EXPECT_EQ(comm->traffic(CommCall::kAllReduce).calls, 0u);  // refused calls are not counted
}

TEST_F(CommNcclAsync, TicketCoversEveryCollectiveSinceBeginAsync) {
  const size_t n = 24;
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i);
  DeviceBuffer<float> a(mine), b(mine);
  comm->begin_async();
  comm->all_reduce(a.ptr(), a.ptr(), n, DataType::kFloat32, ReduceOp::kSum);
  comm->reduce_pieces(b.ptr(), {{0, n, -1}}, DataType::kFloat32, ReduceOp::kSum);
  const CommTicket t = comm->end_async();
  // World 1 runs nothing on the comm stream: nothing to wait for.
  if (world == 1) EXPECT_EQ(t, 0u);
  else EXPECT_NE(t, 0u);
  comm->wait(t);
  comm->wait(t);  // again: harmless
  const std::vector<float>& ga = a.get();
  const std::vector<float>& gb = b.get();
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(ga[i], sum_over_ranks(i, world)) << "element " << i;
    EXPECT_EQ(gb[i], sum_over_ranks(i, world)) << "element " << i;
  }
}

TEST_F(CommNcclAsync, AsyncIsNotNestableAndNeedsABegin) {
  EXPECT_THROW(comm->end_async(), std::runtime_error);
  comm->begin_async();
  EXPECT_THROW(comm->begin_async(), std::runtime_error);
  EXPECT_EQ(comm->end_async(), 0u);  // nothing issued
  comm->wait(0);
}

TEST_F(CommNcclAsync, ReduceScatterVWithEqualBlocks) {
  const size_t block = 5;
  std::vector<float> mine(block * static_cast<size_t>(world));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(rank, i);
  DeviceBuffer<float> send(mine), recv(block, -1.0f);
  comm->reduce_scatter_v(send.ptr(), recv.ptr(), std::vector<size_t>(static_cast<size_t>(world), block),
                         DataType::kFloat32, ReduceOp::kSum);
  const std::vector<float>& got = recv.get();
  for (size_t j = 0; j < block; ++j)
    EXPECT_EQ(got[j], sum_over_ranks(static_cast<size_t>(rank) * block + j, world)) << "element " << j;
  EXPECT_EQ(comm->traffic(CommCall::kReduceScatterV).calls, 1u);
}

}  // namespace
}  // namespace gpt2

// NCCL emulation over MPI: run as `mpirun -np 2 build/test/emu/nccl_test`
// (test/emu/nccl_mpi_test.sh); each process emulates one GPU.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace gpt2 {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
    ncclUniqueId id;
    if (rank_ == 0) {
      ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    }
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclCommInitRank(&comm_, nranks_, id, rank_), ncclSuccess);
  }
  static void TearDownTestSuite() { ncclCommDestroy(comm_); }

  template <class T>
  static T* to_device(const std::vector<T>& h) {
    T* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, h.size() * sizeof(T)), cudaSuccess);
    cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
  }
  template <class T>
  static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

  static int rank_, nranks_;
  static ncclComm_t comm_;
};
int NcclTest::rank_ = 0;
int NcclTest::nranks_ = 1;
ncclComm_t NcclTest::comm_ = nullptr;

TEST_F(NcclTest, CommunicatorReportsRankAndSize) {
  int count = 0, rank = -1;
  ASSERT_EQ(ncclCommCount(comm_, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm_, &rank), ncclSuccess);
  EXPECT_EQ(count, nranks_);
  EXPECT_EQ(rank, rank_);
  EXPECT_GE(nranks_, 2) << "run under mpirun -np 2";
}

TEST_F(NcclTest, AllReduceSumAndAvgFloat) {
  const int n = 1000;
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[i] = rank_ * 1000.0f + i;
  float* send = to_device(h);
  float* recv = nullptr;
  ASSERT_EQ(cudaMalloc(&recv, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  std::vector<float> got = to_host(recv, n);
  for (int i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < nranks_; ++r) want += r * 1000.0f + i;
    ASSERT_EQ(got[i], want) << i;
  }
  // in place, average
  ASSERT_EQ(ncclAllReduce(send, send, n, ncclFloat, ncclAvg, comm_, 0), ncclSuccess);
  got = to_host(send, n);
  for (int i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < nranks_; ++r) want += r * 1000.0f + i;
    ASSERT_FLOAT_EQ(got[i], want / nranks_) << i;
  }
  cudaFree(send);
  cudaFree(recv);
}

TEST_F(NcclTest, AllReduceBf16AndIntMax) {
  const int n = 64;
  std::vector<__nv_bfloat16> h(n);
  for (int i = 0; i < n; ++i) h[i] = __float2bfloat16(0.25f * i + rank_);
  __nv_bfloat16* d = to_device(h);
  ASSERT_EQ(ncclAllReduce(d, d, n, ncclBfloat16, ncclSum, comm_, 0), ncclSuccess);
  std::vector<__nv_bfloat16> got = to_host(d, n);
  for (int i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < nranks_; ++r) want += __bfloat162float(__float2bfloat16(0.25f * i + r));
    ASSERT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16(want))) << i;
  }
  std::vector<int> iv = {rank_, -rank_, 7};
  int* di = to_device(iv);
  ASSERT_EQ(ncclAllReduce(di, di, 3, ncclInt32, ncclMax, comm_, 0), ncclSuccess);
  std::vector<int> gi = to_host(di, 3);
  EXPECT_EQ(gi[0], nranks_ - 1);
  EXPECT_EQ(gi[1], 0);
  EXPECT_EQ(gi[2], 7);
  cudaFree(d);
  cudaFree(di);
}

TEST_F(NcclTest, ReduceScatterAllGatherBroadcastInAGroup) {
  const int chunk = 50;
  std::vector<float> h(chunk * nranks_);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i) + 0.5f * rank_;
  float* send = to_device(h);
  float* part = nullptr;
  float* gathered = nullptr;
  ASSERT_EQ(cudaMalloc(&part, chunk * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&gathered, chunk * nranks_ * sizeof(float)), cudaSuccess);
  std::vector<float> bcast(10, static_cast<float>(rank_ + 1));
  float* db = to_device(bcast);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(send, part, chunk, ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  ASSERT_EQ(ncclBroadcast(db, db, 10, ncclFloat, 1, comm_, 0), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  ASSERT_EQ(ncclAllGather(part, gathered, chunk, ncclFloat, comm_, 0), ncclSuccess);
  std::vector<float> got_part = to_host(part, chunk), got_all = to_host(gathered, chunk * nranks_);
  for (int i = 0; i < chunk; ++i) {
    float want = 0;
    for (int r = 0; r < nranks_; ++r) want += static_cast<float>(rank_ * chunk + i) + 0.5f * r;
    ASSERT_EQ(got_part[i], want) << i;
  }
  for (int r = 0; r < nranks_; ++r)
    for (int i = 0; i < chunk; ++i) {
      float want = 0;
      for (int q = 0; q < nranks_; ++q) want += static_cast<float>(r * chunk + i) + 0.5f * q;
      ASSERT_EQ(got_all[r * chunk + i], want) << r << "," << i;
    }
  for (float x : to_host(db, 10)) ASSERT_EQ(x, 2.0f);  // root 1 had 2.0
  EXPECT_EQ(ncclAllReduce(send, send, 4, ncclFloat, ncclSum, nullptr, 0), ncclInvalidArgument);
  cudaFree(send);
  cudaFree(part);
  cudaFree(gathered);
  cudaFree(db);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

// NCCL emulation over MPI: run as `mpirun -np 2` and `-np 3 build/test/emu/nccl_test`
// (test/emu/nccl_mpi_test.sh); each process emulates one GPU of one node, on its
// own emulated device (local rank). Each strict rule has a planted violation that
// must be refused next to its correct twin that must be accepted; results are
// checked against closed forms or an independent model of NCCL's ring.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "emu/control.h"

namespace gpt2 {
namespace {

int g_local_rank = 0;  // set by main: this process's emulated device

class NcclTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
    ASSERT_EQ(new_comm(&comm_), ncclSuccess) << ncclGetLastError(nullptr);
  }
  static void TearDownTestSuite() { ncclCommDestroy(comm_); }

  // A fresh communicator over every process (collective: all ranks call it).
  static ncclResult_t new_comm(ncclComm_t* comm) {
    ncclUniqueId id;
    if (rank_ == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    return ncclCommInitRank(comm, nranks_, id, rank_);
  }

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
  static std::string last_error() { return ncclGetLastError(nullptr); }
  // The refusal message, once per job (rank 1: its in-place offset is not 0), as a user sees it.
  static void show(const char* what) {
    if (rank_ == 1) std::printf("[ %s ] %s\n", what, last_error().c_str());
  }

  static int rank_, nranks_;
  static ncclComm_t comm_;
};
int NcclTest::rank_ = 0;
int NcclTest::nranks_ = 1;
ncclComm_t NcclTest::comm_ = nullptr;

float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Independent model of NCCL's ring for bf16: the chunk that ends at rank `owner`
// starts at owner+1, and every later rank adds its value to the bf16 partial sum
// (fp32 add, rounded to bf16 at each hop). `avg` pre-multiplies by bf16(1/n).
float ring_bf16(const std::vector<float>& per_rank, int owner, bool avg) {
  const int n = static_cast<int>(per_rank.size());
  const float scale = bf16_round(1.0f / n);
  auto in = [&](int r) { return avg ? bf16_round(per_rank[r] * scale) : per_rank[r]; };
  float acc = in((owner + 1) % n);
  for (int k = 2; k <= n; ++k) acc = bf16_round(acc + in((owner + k) % n));
  return acc;
}

TEST_F(NcclTest, CommunicatorReportsRankSizeAndDevice) {
  int count = 0, rank = -1, device = -1;
  ASSERT_EQ(ncclCommCount(comm_, &count), ncclSuccess);
  ASSERT_EQ(ncclCommUserRank(comm_, &rank), ncclSuccess);
  ASSERT_EQ(ncclCommCuDevice(comm_, &device), ncclSuccess);
  EXPECT_EQ(count, nranks_);
  EXPECT_EQ(rank, rank_);
  EXPECT_EQ(device, g_local_rank);
  EXPECT_GE(nranks_, 2) << "run under mpirun -np 2";
}

// The emulated node has one device per local process (main sets the count);
// cudaSetDevice is per host thread, as in CUDA.
TEST_F(NcclTest, EmulatedDevicesArePerProcessAndPerThread) {
  int count = 0, device = -1, other_thread_device = -1;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_GE(count, 2);
  EXPECT_EQ(cudaSetDevice(count), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, g_local_rank);
  std::thread([&] { cudaGetDevice(&other_thread_device); }).join();
  EXPECT_EQ(other_thread_device, 0);
  cudaDeviceProp prop;
  EXPECT_EQ(cudaGetDeviceProperties(&prop, count - 1), cudaSuccess);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, count), cudaErrorInvalidDevice);
  cudaGetLastError();
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
  for (int i = 0; i < n; ++i) {  // quarters below 64: exact in bf16 in any order
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

TEST_F(NcclTest, ReduceToRoot) {
  std::vector<int> h = {rank_ + 1, 10 * rank_, -3};
  int* send = to_device(h);
  int* recv = to_device(std::vector<int>(3, 99));
  const int root = nranks_ - 1;
  ASSERT_EQ(ncclReduce(send, recv, 3, ncclInt32, ncclSum, root, comm_, 0), ncclSuccess);
  std::vector<int> got = to_host(recv, 3);
  if (rank_ == root) {
    EXPECT_EQ(got[0], nranks_ * (nranks_ + 1) / 2);
    EXPECT_EQ(got[1], 10 * nranks_ * (nranks_ - 1) / 2);
    EXPECT_EQ(got[2], -3 * nranks_);
  } else {
    EXPECT_EQ(got, std::vector<int>(3, 99));  // only the root receives
  }
  EXPECT_EQ(ncclReduce(send, recv, 3, ncclInt32, ncclSum, nranks_, comm_, 0), ncclInvalidArgument);
  cudaFree(send);
  cudaFree(recv);
}

// ---- rule: in-place calls need NCCL's exact offsets ------------------------------------------
// Element i of rank r's reduce-scatter input is i + 100 r.
TEST_F(NcclTest, InPlaceReduceScatterNeedsExactOffset) {
  const int chunk = 8;
  std::vector<float> h(chunk * nranks_ + 1);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i) + 100.0f * rank_;
  float* buf = to_device(h);
  // twin: recvbuff = sendbuff + rank*recvcount is NCCL's in-place form
  ASSERT_EQ(ncclReduceScatter(buf, buf + rank_ * chunk, chunk, ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  std::vector<float> got = to_host(buf + rank_ * chunk, chunk);
  for (int i = 0; i < chunk; ++i) {
    float want = 0;
    for (int r = 0; r < nranks_; ++r) want += static_cast<float>(rank_ * chunk + i) + 100.0f * r;
    ASSERT_EQ(got[i], want) << i;
  }
  // planted: one element off
  float* buf2 = to_device(h);
  EXPECT_EQ(ncclReduceScatter(buf2, buf2 + rank_ * chunk + 1, chunk, ncclFloat, ncclSum, comm_, 0),
            ncclInvalidArgument);
  EXPECT_NE(last_error().find("recvbuff == sendbuff + rank*recvcount"), std::string::npos) << last_error();
  show("refused");
  EXPECT_EQ(to_host(buf2, h.size()), h);  // nothing ran
  cudaFree(buf);
  cudaFree(buf2);
}

TEST_F(NcclTest, HostBuffersRefused) {
  std::vector<float> h(6, 1.0f + rank_);
  float* d = to_device(h);
  // twin: device buffers
  ASSERT_EQ(ncclAllReduce(d, d, h.size(), ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  // planted: a host buffer (on a GPU, an illegal-address fault inside NCCL's kernel)
  EXPECT_EQ(ncclAllReduce(h.data(), h.data(), h.size(), ncclFloat, ncclSum, comm_, 0), ncclInvalidArgument);
  EXPECT_NE(last_error().find("sendbuff is not device memory"), std::string::npos) << last_error();
  EXPECT_EQ(ncclAllReduce(d, h.data(), h.size(), ncclFloat, ncclSum, comm_, 0), ncclInvalidArgument);
  EXPECT_NE(last_error().find("recvbuff is not device memory"), std::string::npos) << last_error();
  show("refused");
  EXPECT_EQ(h, std::vector<float>(6, 1.0f + rank_));  // nothing ran
  cudaFree(d);
}

TEST_F(NcclTest, InPlaceAllGatherNeedsExactOffset) {
  const int count = 6;
  std::vector<float> h(count * nranks_ + 1, -1.0f);
  for (int i = 0; i < count; ++i) h[rank_ * count + i] = static_cast<float>(10 * rank_ + i);
  float* buf = to_device(h);
  // twin: sendbuff = recvbuff + rank*sendcount
  ASSERT_EQ(ncclAllGather(buf + rank_ * count, buf, count, ncclFloat, comm_, 0), ncclSuccess);
  std::vector<float> got = to_host(buf, count * nranks_);
  for (int r = 0; r < nranks_; ++r)
    for (int i = 0; i < count; ++i) ASSERT_EQ(got[r * count + i], static_cast<float>(10 * r + i)) << r << "," << i;
  // planted: the input one element past its in-place block
  float* buf2 = to_device(h);
  EXPECT_EQ(ncclAllGather(buf2 + rank_ * count + 1, buf2, count, ncclFloat, comm_, 0), ncclInvalidArgument);
  EXPECT_NE(last_error().find("sendbuff == recvbuff + rank*sendcount"), std::string::npos) << last_error();
  show("refused");
  EXPECT_EQ(to_host(buf2, h.size()), h);
  cudaFree(buf);
  cudaFree(buf2);
}

TEST_F(NcclTest, PartlyOverlappingAllReduceAndBroadcastRefused) {
  std::vector<float> h(9, static_cast<float>(rank_ + 1));
  float* buf = to_device(h);
  EXPECT_EQ(ncclAllReduce(buf, buf + 1, 8, ncclFloat, ncclSum, comm_, 0), ncclInvalidArgument);
  EXPECT_NE(last_error().find("recvbuff == sendbuff"), std::string::npos) << last_error();
  show("refused");
  // the root reads sendbuff, so only the root's overlap matters; all ranks refuse alike here
  EXPECT_EQ(ncclBroadcast(buf, buf + 1, 8, ncclFloat, rank_, comm_, 0), ncclInvalidArgument);
  ASSERT_EQ(ncclAllReduce(buf, buf, 8, ncclFloat, ncclSum, comm_, 0), ncclSuccess);  // twin: exactly in place
  EXPECT_EQ(to_host(buf, 1)[0], static_cast<float>(nranks_ * (nranks_ + 1) / 2));
  cudaFree(buf);
}

// ---- rule: one device per rank ---------------------------------------------------------------------
TEST_F(NcclTest, DuplicateDeviceRefusedDistinctDevicesAccepted) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // planted: every rank of this node on device 0
  ncclComm_t dup = nullptr;
  EXPECT_EQ(new_comm(&dup), ncclInvalidUsage);
  EXPECT_NE(last_error().find("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"), std::string::npos)
      << last_error();
  show("refused");
  // twin: the same device ids on different hosts (NCCL_HOSTID names the host)
  const std::string host = "emu-node-" + std::to_string(rank_);
  setenv("NCCL_HOSTID", host.c_str(), 1);
  ncclComm_t other_hosts = nullptr;
  EXPECT_EQ(new_comm(&other_hosts), ncclSuccess) << last_error();
  unsetenv("NCCL_HOSTID");
  ncclCommDestroy(other_hosts);
  // twin: one device per rank
  ASSERT_EQ(cudaSetDevice(g_local_rank), cudaSuccess);
  ncclComm_t ok = nullptr;
  ASSERT_EQ(new_comm(&ok), ncclSuccess) << last_error();
  int device = -1;
  ASSERT_EQ(ncclCommCuDevice(ok, &device), ncclSuccess);
  EXPECT_EQ(device, g_local_rank);
  ncclCommDestroy(ok);
}

// ---- rule: failures of a running collective are asynchronous --------------------------------------
TEST_F(NcclTest, AsyncErrorReportedByGetAsyncError) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(new_comm(&comm), ncclSuccess);
  float* buf = to_device(std::vector<float>(4, 1.0f));
  ncclResult_t async = ncclInternalError;
  // twin: a collective that completes leaves no error behind
  ASSERT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, 0), ncclSuccess);
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(to_host(buf, 1)[0], static_cast<float>(nranks_));
  // planted: the next collective loses its peer while it runs
  emu::nccl_inject_async_error(comm, ncclRemoteError, "peer lost (planted by the test)");
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, 0), ncclSuccess);  // the launch succeeded
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_NE(last_error().find("peer lost"), std::string::npos) << last_error();
  show("async");
  EXPECT_TRUE(std::isnan(to_host(buf, 1)[0]));  // the result is undefined: poisoned
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, 0), ncclRemoteError);  // later calls fail
  EXPECT_EQ(ncclCommFinalize(comm), ncclRemoteError);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  cudaFree(buf);
}

TEST_F(NcclTest, MismatchedCollectivesFailAsynchronouslyOnEveryRank) {
  ncclComm_t comm = nullptr;
  ASSERT_EQ(new_comm(&comm), ncclSuccess);
  float* buf = to_device(std::vector<float>(8, 1.0f));
  ncclResult_t async = ncclInternalError;
  ASSERT_EQ(ncclAllReduce(buf, buf, 8, ncclFloat, ncclSum, comm, 0), ncclSuccess);  // twin: same count
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  // planted: rank 0 reduces 7 elements, the others 8 (a GPU hangs or corrupts memory)
  EXPECT_EQ(ncclAllReduce(buf, buf, rank_ == 0 ? 7 : 8, ncclFloat, ncclSum, comm, 0), ncclSuccess);
  ASSERT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclInvalidUsage);
  EXPECT_NE(last_error().find("ranks called different collectives: rank 0 AllReduce(count 7, float32, sum), "
                              "rank 1 AllReduce(count 8, float32, sum)"),
            std::string::npos)
      << last_error();
  show("async");
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  cudaFree(buf);
}

// ---- rule: a group runs at ncclGroupEnd --------------------------------------------------------
TEST_F(NcclTest, GroupDefersCallsToGroupEnd) {
  float* send = to_device(std::vector<float>(4, static_cast<float>(rank_ + 1)));
  float* recv = to_device(std::vector<float>(4, -1.0f));
  const float sum = static_cast<float>(nranks_ * (nranks_ + 1) / 2);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nested: only the outermost end launches
  ASSERT_EQ(ncclAllReduce(send, recv, 4, ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  EXPECT_EQ(to_host(recv, 1)[0], -1.0f);  // planted read before the group ends: not run yet
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(to_host(recv, 1)[0], -1.0f);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(to_host(recv, 4), std::vector<float>(4, sum));  // twin: read after the end
  // a refused call drops the whole group; a stray end is invalid usage
  float* recv2 = to_device(std::vector<float>(4, -1.0f));
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send, recv2, 4, ncclFloat, ncclSum, comm_, 0), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(send, recv2, 4, ncclFloat, static_cast<ncclRedOp_t>(99), comm_, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(to_host(recv2, 1)[0], -1.0f);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(last_error().find("not in a group call"), std::string::npos) << last_error();
  cudaFree(send);
  cudaFree(recv);
  cudaFree(recv2);
}

// NCCL runs a group's calls on different communicators concurrently, so ranks may
// queue them in different orders; a sequential emulation must not deadlock on it.
TEST_F(NcclTest, GroupAcceptsCommunicatorsQueuedInAnyOrder) {
  ncclComm_t a = nullptr, b = nullptr;
  ASSERT_EQ(new_comm(&a), ncclSuccess);
  ASSERT_EQ(new_comm(&b), ncclSuccess);
  int* x = to_device(std::vector<int>{rank_});
  int* y = to_device(std::vector<int>{10 * rank_});
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  if (rank_ % 2 == 0) {
    ASSERT_EQ(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, a, 0), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(y, y, 1, ncclInt32, ncclSum, b, 0), ncclSuccess);
  } else {
    ASSERT_EQ(ncclAllReduce(y, y, 1, ncclInt32, ncclSum, b, 0), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(x, x, 1, ncclInt32, ncclSum, a, 0), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(to_host(x, 1)[0], nranks_ * (nranks_ - 1) / 2);
  EXPECT_EQ(to_host(y, 1)[0], 10 * nranks_ * (nranks_ - 1) / 2);
  ncclCommDestroy(a);
  ncclCommDestroy(b);
  cudaFree(x);
  cudaFree(y);
}

// ---- rule: streams ----------------------------------------------------------------------------------
TEST_F(NcclTest, CollectiveRunsInStreamOrder) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  float* send = nullptr;
  float* recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, 16 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, 16 * sizeof(float)), cudaSuccess);
  std::vector<float> in(16, static_cast<float>(rank_)), out(16, -1.0f);
  // copy in, reduce, copy out, all on one stream: each sees its predecessor's result
  ASSERT_EQ(cudaMemcpyAsync(send, in.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(send, recv, 16, ncclFloat, ncclMax, comm_, stream), ncclSuccess);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), recv, 16 * sizeof(float), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(out, std::vector<float>(16, static_cast<float>(nranks_ - 1)));
  // planted: a destroyed stream
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(ncclAllReduce(send, recv, 16, ncclFloat, ncclMax, comm_, stream), ncclUnhandledCudaError);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  cudaFree(send);
  cudaFree(recv);
}

// ---- rule: bf16 sums are rounded at every hop of the ring --------------------------------------
// 256 on rank 0 and 1 elsewhere, one element per ring chunk: the chunk ending at
// rank 0 adds the ones first (exact) and 256 last; every other chunk adds a 1 to
// 256 at some hop, and bf16 has no 257 (ties to even: 256).
TEST_F(NcclTest, Bf16RingRoundsPerHop) {
  const int n = nranks_;
  std::vector<float> per_rank(n, 1.0f);
  per_rank[0] = 256.0f;
  __nv_bfloat16* d = to_device(std::vector<__nv_bfloat16>(n, __float2bfloat16(per_rank[rank_])));
  ASSERT_EQ(ncclAllReduce(d, d, n, ncclBfloat16, ncclSum, comm_, 0), ncclSuccess);
  std::vector<__nv_bfloat16> got = to_host(d, n);
  for (int c = 0; c < n; ++c) EXPECT_EQ(__bfloat162float(got[c]), ring_bf16(per_rank, c, false)) << c;
  const float exact_once = bf16_round(256.0f + (n - 1));
  if (n == 3) {  // the planted case: rounding once would give 258 everywhere
    EXPECT_EQ(exact_once, 258.0f);
    EXPECT_EQ(__bfloat162float(got[0]), 258.0f);
    EXPECT_EQ(__bfloat162float(got[1]), 256.0f);
    EXPECT_EQ(__bfloat162float(got[2]), 256.0f);
  }
  if (rank_ == 0) {
    std::printf("[ ring ] %d ranks, bf16 sum of 256 + %d ones per chunk:", n, n - 1);
    for (int c = 0; c < n; ++c) std::printf(" %g", __bfloat162float(got[c]));
    std::printf(" (rounded once: %g)\n", exact_once);
  }
  cudaFree(d);
}

// Random bf16 inputs, all-reduce (sum, avg) and reduce-scatter, bit for bit
// against the ring model: every rank regenerates every rank's input.
TEST_F(NcclTest, Bf16RingMatchesModelBitForBit) {
  const int n = nranks_, count = 999;
  auto input = [&](int r) {
    std::mt19937 gen(1234 + r);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    std::vector<float> v(count * n);
    for (float& x : v) x = bf16_round(u(gen));
    return v;
  };
  std::vector<std::vector<float>> all(n);
  for (int r = 0; r < n; ++r) all[r] = input(r);
  auto column = [&](size_t i) {
    std::vector<float> c(n);
    for (int r = 0; r < n; ++r) c[r] = all[r][i];
    return c;
  };
  std::vector<__nv_bfloat16> mine(all[rank_].size());
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = __float2bfloat16(all[rank_][i]);
  const size_t total = mine.size(), chunk = (total + n - 1) / n;
  int differs_from_once = 0;
  for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
    __nv_bfloat16* d = to_device(mine);
    ASSERT_EQ(ncclAllReduce(d, d, total, ncclBfloat16, op, comm_, 0), ncclSuccess);
    std::vector<__nv_bfloat16> got = to_host(d, total);
    for (size_t i = 0; i < total; ++i) {
      const float want = ring_bf16(column(i), static_cast<int>(i / chunk), op == ncclAvg);
      ASSERT_EQ(__bfloat162float(got[i]), want) << "op " << op << " element " << i;
      float once = 0;
      for (float x : column(i)) once += x;
      differs_from_once += op == ncclSum && bf16_round(once) != want;
    }
    cudaFree(d);
  }
  __nv_bfloat16* send = to_device(mine);
  __nv_bfloat16* recv = to_device(std::vector<__nv_bfloat16>(count));
  ASSERT_EQ(ncclReduceScatter(send, recv, count, ncclBfloat16, ncclSum, comm_, 0), ncclSuccess);
  std::vector<__nv_bfloat16> got = to_host(recv, count);
  for (int i = 0; i < count; ++i)  // this rank's block ends its ring at this rank
    ASSERT_EQ(__bfloat162float(got[i]), ring_bf16(column(rank_ * count + i), rank_, false)) << i;
  if (n >= 3) {
    EXPECT_GT(differs_from_once, 0);  // the test can tell per-hop from once
  }
  if (rank_ == 0)
    std::printf("[ ring ] %d ranks: %d of %zu bf16 sums differ from rounding the exact sum once\n", n,
                differs_from_once, total);
  cudaFree(send);
  cudaFree(recv);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  // One emulated node: a device per local process, as on a GPU node with one rank per GPU.
  MPI_Comm local;
  int local_size = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &gpt2::g_local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  gpt2::emu::set_device_count(local_size);
  cudaSetDevice(gpt2::g_local_rank);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

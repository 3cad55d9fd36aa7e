// Throughput of the CUDA emulator (make bench-emu): emulated CUDA threads per
// second for a kernel without synchronisation, block-wide barriers per second and
// warp shuffles per second, with one worker thread and with all of them.
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <cooperative_groups.h>

#include "backend/cuda/launch.cuh"
#include "emu/control.h"

namespace {

__global__ void axpy_kernel(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void barrier_kernel(float* out, int rounds) {
  __shared__ float buf[256];
  int t = threadIdx.x;
  float v = static_cast<float>(t);
  for (int r = 0; r < rounds; ++r) {
    buf[t] = v;
    __syncthreads();
    v += buf[(t + 1) % blockDim.x];
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + t] = v;
}

__global__ void shuffle_kernel(float* out, int rounds) {
  float v = static_cast<float>(threadIdx.x);
  for (int r = 0; r < rounds; ++r)
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(int workers) {
  gpt2::emu::set_worker_threads(workers);
  const int n = 1 << 21;
  float *x = nullptr, *y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(x, 0, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(y, 0, n * sizeof(float)));
  LAUNCH_KERNEL(axpy_kernel, n / 256, 256, 0, 0, y, x, 2.0f, n);  // warm-up: stacks, pool

  auto t0 = std::chrono::steady_clock::now();
  LAUNCH_KERNEL(axpy_kernel, n / 256, 256, 0, 0, y, x, 2.0f, n);
  double dt = seconds_since(t0);
  std::printf("workers=%d  plain kernel:   %7.1f M emulated threads/s  (%d threads in %.3f s)\n", workers,
              n / dt / 1e6, n, dt);

  const int blocks = 256, rounds = 50;
  gpt2::emu::ExecStats s0 = gpt2::emu::exec_stats();
  t0 = std::chrono::steady_clock::now();
  LAUNCH_KERNEL(barrier_kernel, blocks, 256, 0, 0, y, rounds);
  dt = seconds_since(t0);
  gpt2::emu::ExecStats s1 = gpt2::emu::exec_stats();
  double barriers = static_cast<double>(s1.barriers - s0.barriers);
  std::printf("workers=%d  __syncthreads:  %7.2f M block barriers/s, %7.1f M thread arrivals/s (256-thread blocks)\n",
              workers, barriers / dt / 1e6, barriers * 256 / dt / 1e6);

  t0 = std::chrono::steady_clock::now();
  LAUNCH_KERNEL(shuffle_kernel, blocks, 256, 0, 0, y, rounds);
  dt = seconds_since(t0);
  gpt2::emu::ExecStats s2 = gpt2::emu::exec_stats();
  double warp_ops = static_cast<double>(s2.warp_syncs - s1.warp_syncs);
  std::printf("workers=%d  __shfl_xor_sync: %6.2f M warp shuffles/s, %7.1f M lane shuffles/s\n", workers,
              warp_ops / dt / 1e6, warp_ops * 32 / dt / 1e6);
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
}

}  // namespace

int main() {
  try {
    unsigned hw = std::thread::hardware_concurrency();
    run(1);
    if (hw > 1) run(static_cast<int>(hw));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

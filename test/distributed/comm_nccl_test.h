// Shared by the two files of build/test/distributed/comm_nccl_test: comm_test.cpp
// compiled with GPT2_COMM_TEST_NCCL (the communicator suite on device buffers) and
// comm_nccl_test.cpp (the NCCL communicator's own cases). The binary links the
// emulated cudart and NCCL: `mpirun -np N` runs N emulated GPUs, one per process.
#ifndef TEST_DISTRIBUTED_COMM_NCCL_TEST_H
#define TEST_DISTRIBUTED_COMM_NCCL_TEST_H

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.h"
#include "distributed/context.h"

namespace gpt2 {

// The process's DistRuntime, owned by comm_test.cpp's main.
const DistRuntime& test_runtime();

// NCCL on this rank's device (the local rank; main gives the emulated node one
// device per local process), bootstrapped by a fresh MPI communicator, on the
// legacy default stream.
std::unique_ptr<Communicator> make_nccl_test_communicator();

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// A test buffer in device memory: tests fill and check `host`; the collectives
// get ptr() (a cudaMalloc'd array of the same size); put() copies host to device,
// get() device to host. Device memory starts as the emulator's 0xFF poison.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::vector<T> values) : host(std::move(values)) {
    cuda_ok(cudaMalloc(&dev_, bytes()), "cudaMalloc");
    put();
  }
  explicit DeviceBuffer(size_t n, T fill = T()) : DeviceBuffer(std::vector<T>(n, fill)) {}
  ~DeviceBuffer() { cudaFree(dev_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* ptr() { return static_cast<T*>(dev_); }
  void put() { cuda_ok(cudaMemcpy(dev_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D"); }
  std::vector<T>& get() {
    cuda_ok(cudaMemcpy(host.data(), dev_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

  std::vector<T> host;

 private:
  size_t bytes() const { return host.size() * sizeof(T); }
  void* dev_ = nullptr;
};

}  // namespace gpt2

#endif  // TEST_DISTRIBUTED_COMM_NCCL_TEST_H

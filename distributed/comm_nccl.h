// The NCCL communicator: Communicator over device memory (the CUDA backend's
// buffers), one GPU per rank, bootstrapped by MPI: rank 0 calls ncclGetUniqueId,
// the 128-byte id travels to every rank through `bootstrap` (the MPI
// communicator: host memory), then every rank calls ncclCommInitRank on its
// device. Every collective is enqueued on the communicator's own stream, after
// an event wait for the work queued so far on `cuda_stream` (the backend's
// compute stream), and `cuda_stream` then waits for the collective's event; it
// returns without waiting: "complete" in comm.h's sense means ordered before
// later work on `cuda_stream`. barrier() synchronises the comm stream (and so
// the compute work issued before it). Between begin_async() and end_async()
// the second wait is left out; wait(ticket) adds it where the caller needs it
// (device-side, comm.h), so compute issued in between overlaps the collectives.
//
// The same object file links against the real NCCL (-lnccl, train_gpt2cu) or
// the emulator's NCCL over MPI (build/libemu_nccl.a, train_gpt2cu_emu): only
// the C API of <nccl.h> and <cuda_runtime_api.h> is used.
//
// Host scalars (loss, gradient norm, stop flags, barriers between file writes)
// do not go through this communicator: the trainer keeps the MPI one for them.
#ifndef DISTRIBUTED_COMM_NCCL_H
#define DISTRIBUTED_COMM_NCCL_H

#include <memory>

#include "distributed/comm.h"

namespace gpt2 {

// `bootstrap` must be a host-memory communicator over the same ranks (MPI); it
// must outlive the returned communicator only during this call. `cuda_device`
// is this rank's device (already chosen by the caller, e.g. train/device_link.h),
// `cuda_stream` a cudaStream_t on it (nullptr: the legacy default stream).
// Throws std::runtime_error, rank-prefixed, naming the NCCL error.
//
// Collective: every rank of `bootstrap` calls it. It makes `cuda_device` the
// calling thread's current device (cudaSetDevice), and uses the bootstrap for
// the unique id (broadcast) and to agree that every rank's set-up succeeded
// (all_reduce), so a failure on one rank is an error on all, not a hang.
// The communicator checks every NCCL result and, after every call, NCCL's
// asynchronous error state: a collective that failed while running is reported
// by the first call that sees it (at the latest barrier(), which waits for the
// stream). After an error it can only be destroyed (then with ncclCommAbort).
// Linking needs cudart as well as NCCL (cudaSetDevice, cudaMalloc, ...).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int cuda_device,
                                                     void* cuda_stream);

}  // namespace gpt2

#endif  // DISTRIBUTED_COMM_NCCL_H

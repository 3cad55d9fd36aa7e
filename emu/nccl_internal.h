// The emulated NCCL's communicator and its transport (emu/nccl.cpp,
// emu/nccl_socket.cpp): MPI between processes that mpirun or srun --mpi=pmix
// started, else the socket transport of emu/nccl_socket.h.
#ifndef EMU_NCCL_INTERNAL_H
#define EMU_NCCL_INTERNAL_H

#include <mpi.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "emu/nccl_socket.h"

struct ncclComm {
  MPI_Comm mpi;                // MPI_COMM_NULL with the socket transport
  int rank;
  int nranks;
  int device;                  // cudaGetDevice of the thread that created it
  uint64_t id_hash;            // the same on every rank: orders a group's operations
  ncclResult_t async_error;    // first failure of a running collective
  std::string async_reason;
  ncclResult_t injected;       // test hook: the next collective fails with this
  std::string injected_reason;
  uint64_t executed;           // collectives run so far (GPT2_EMU_NCCL_FAIL_AT)
  int queued = 0;              // deferred mode: collectives queued and not yet run
  bool aborted = false;        // ncclCommAbort with collectives still queued: they do nothing
  std::thread::id owner = std::this_thread::get_id();  // the creating thread (see ncclCommAbort)
  std::unique_ptr<gpt2::emu::SocketGroup> sockets;     // the socket transport, when not MPI
  std::string transport_error;                         // the socket transport's last failure
};

namespace gpt2 {
namespace emu {

// Exchanges of byte blocks over the communicator's transport; MPI_SUCCESS or an
// error code for transport_error_text.
int transport_all_gather(ncclComm& c, const void* mine, size_t bytes, void* all);
// `packed` holds nranks blocks of `block` bytes, block d for rank d; `all` gets
// block `c.rank` of every rank, in rank order.
int transport_all_to_all(ncclComm& c, const void* packed, size_t block, void* all);
// `all` (nranks * bytes) is written on `root` only.
int transport_gather(ncclComm& c, const void* mine, size_t bytes, void* all, int root);
int transport_broadcast(ncclComm& c, void* buf, size_t bytes, int root);
std::string transport_error_text(const ncclComm& c, int rc);

// Fault switches (emu/nccl_faults.cpp). The failure injected for the collective
// about to finish (nccl_inject_async_error, GPT2_EMU_NCCL_FAIL_AT), or ncclSuccess.
ncclResult_t take_injected(ncclComm* c, std::string* why);
// GPT2_EMU_NCCL_FREEZE_RANK / _AT: never returns when this is the collective to freeze in.
void maybe_freeze(const ncclComm& c);
// GPT2_EMU_NCCL_FREEZE_INIT_RANK=R: rank R's ncclCommInitRank never returns.
void maybe_freeze_init(int rank);
// GPT2_EMU_NCCL_ABORT_BLOCKS=1: ncclCommAbort never returns.
void maybe_block_abort(const ncclComm& c);

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_NCCL_INTERNAL_H

// The emulated NCCL's own transport between local processes that MPI did not
// start (torchrun, srun --mpi=none, a shell loop): a star of Unix stream
// sockets through the communicator's rank 0, in the abstract namespace (no
// file to clean up), named by the unique id. Only what emu/nccl.cpp needs: an
// all-gather of equal blocks, on which it builds every collective. Blocking,
// as the MPI transport is: a frozen peer blocks its partners (the watchdog's
// case); a dead one ends their calls with an error.
#ifndef EMU_NCCL_SOCKET_H
#define EMU_NCCL_SOCKET_H

#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace gpt2 {
namespace emu {

class SocketGroup {
 public:
  ~SocketGroup();
  SocketGroup(const SocketGroup&) = delete;
  SocketGroup& operator=(const SocketGroup&) = delete;

  // All ranks of `id` meet: rank 0 listens, the others connect (retrying for up
  // to `timeout_s`). nullptr and *error on failure (a rank claimed twice,
  // nranks that disagree, nobody came).
  static std::unique_ptr<SocketGroup> connect(const ncclUniqueId& id, int rank, int nranks, double timeout_s,
                                              std::string* error);
  // Every rank's `bytes` bytes, in rank order, into `all` (nranks * bytes).
  // false and *error when a peer is gone.
  bool all_gather(const void* mine, size_t bytes, void* all, std::string* error);

 private:
  SocketGroup(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  int rank_, nranks_;
  std::vector<int> fds_;  // rank 0: one per rank (index 0 unused); others: fds_[0] is rank 0
};

// A unique id for the socket transport (its first bytes say so), and the test.
void make_socket_unique_id(ncclUniqueId* id);
bool is_socket_unique_id(const ncclUniqueId& id);

}  // namespace emu
}  // namespace gpt2

#endif  // EMU_NCCL_SOCKET_H

// The collectives data-parallel training needs, behind one small interface.
//
// Implementations:
//   * MPI, host memory (make_mpi_communicator, distributed/comm_mpi.cpp) - the CPU
//     backend, and the bootstrap channel of every other implementation.
//   * NCCL, device memory (make_nccl_communicator, distributed/comm_nccl.h): rank 0
//     calls ncclGetUniqueId, the 128-byte id travels to every rank with this
//     interface's broadcast() on the MPI communicator, then every rank calls
//     ncclCommInitRank(world, id, rank) on its device. Each entry below maps to
//     NCCL calls on the communicator's stream (noted per entry); "complete when
//     the call returns" then means "ordered before any later work on that
//     stream", which is what the trainer relies on as long as it launches its
//     kernels on the same stream.
//
// Conventions for every entry:
//   * `count` is in elements of `type`, buffers are in the memory kind the
//     implementation declares (is_device_memory);
//   * every rank calls the same entries in the same order with the same counts
//     (a collective), except where an argument is documented as per-rank;
//   * kAvg is the sum divided by world(); kMax only for the stop check and
//     integer flags; integer types do not support kAvg. NCCL's average
//     (ncclAvg) multiplies every input by 1/world() rounded to the type and
//     then sums, so where 1/world() is not exact (world not a power of two) it
//     may differ from sum-then-divide in the last bits, and two calls that add
//     in different orders (all-reduce vs reduce-scatter) need not agree bit
//     for bit;
//   * kBFloat16 (bf16: fp32's upper 16 bits) is a device type: reductions run
//     in bf16 arithmetic on the GPU. The MPI communicator refuses it;
//   * send and receive buffers do not overlap, except in the in-place forms
//     documented per entry (anything else throws: a GPU would compute garbage);
//   * at world() == 1 every entry is a copy at most, with no transport call;
//   * errors throw std::runtime_error prefixed with "rank R/W (host): ".
#ifndef DISTRIBUTED_COMM_H
#define DISTRIBUTED_COMM_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/context.h"
#include "distributed/watchdog.h"

namespace gpt2 {

enum class DataType : uint8_t { kFloat32, kFloat64, kInt32, kBFloat16 };
enum class ReduceOp : uint8_t { kSum, kAvg, kMax };
size_t data_type_bytes(DataType type);

// The kinds of calls, for the traffic counters.
enum class CommCall : uint8_t {
  kAllReduce,
  kReduceScatter,
  kReduceScatterV,
  kAllGather,
  kAllGatherV,
  kBroadcast,
  kBarrier,
  kCount
};
const char* comm_call_name(CommCall call);

// Traffic per kind of call, counted by the interface (not by the transport),
// so every implementation reports the same numbers for the same calls.
//   payload_bytes: bytes of the caller's input buffer (the logical message);
//   sent_bytes:    bytes this rank sends with the bandwidth-optimal ring
//                  algorithms NCCL uses - all-reduce 2(W-1)/W x payload,
//                  reduce-scatter and all-gather (W-1)/W x full buffer,
//                  broadcast: the payload from every rank but the last in the
//                  chain ((W-1)/W on average). 0 when W == 1.
// This makes "bytes communicated per step" comparable across ZeRO stages and
// world sizes independently of what MPI does internally.
struct CommTraffic {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  uint64_t sent_bytes = 0;
};
using CommStats = std::array<CommTraffic, static_cast<size_t>(CommCall::kCount)>;

// Names the collectives issued between Communicator::begin_async() and
// end_async(); 0 stands for nothing to wait for.
using CommTicket = uint64_t;

// One piece of Communicator::reduce_pieces: `count` elements at element
// `offset` of the buffer, reduced onto rank `root` (-1: onto every rank).
struct ReducePiece {
  size_t offset = 0;
  size_t count = 0;
  int root = -1;
};

class Communicator {
 public:
  virtual ~Communicator() { detach_watchdog(); }

  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual bool is_device_memory() const = 0;  // false: host pointers
  virtual std::string name() const = 0;       // "mpi", "nccl"

  // recv[i] = op over ranks of send[i], on every rank. send == recv is in place.
  // NCCL: ncclAllReduce.
  void all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op);

  // Equal blocks: send holds world() * recv_count elements; block r reduced over
  // ranks lands in rank r's recv. In place when recv == send + rank * recv_count
  // (bytes), NCCL's convention: the rest of send is then clobbered.
  // NCCL: ncclReduceScatter.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                      ReduceOp op);

  // Uneven blocks (the ZeRO-2 per-layer hand-off, see distributed/zero_plan.h):
  // send holds sum(counts) elements, block r (counts[r] elements, blocks
  // consecutive in rank order, zero allowed) is reduced over ranks and lands in
  // rank r's recv (counts[rank()] elements; recv may be null when that is 0).
  // NCCL: one ncclReduce(root = r) per non-empty block inside
  // ncclGroupStart/ncclGroupEnd.
  void reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& counts,
                        DataType type, ReduceOp op);

  // Equal blocks: recv (world() * send_count elements) = concatenation of every
  // rank's send in rank order. In place when send == recv + rank * send_count.
  // NCCL: ncclAllGather.
  void all_gather(const void* send, void* recv, size_t send_count, DataType type);

  // Uneven blocks, in place (the inverse of reduce_scatter_v: ZeRO-3's
  // gather of one unit's parameters from their owners): buf holds sum(counts)
  // elements, block r (counts[r] elements at the sum of the counts before it,
  // zero allowed) is rank r's on entry, and on return every rank's buf holds
  // every block. NCCL: one ncclBroadcast(root = r) per non-empty block inside
  // ncclGroupStart/ncclGroupEnd.
  void all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type);

  // buf (bytes) of rank `root` is copied to every rank's buf. NCCL: ncclBroadcast.
  void broadcast(void* buf, size_t bytes, int root);

  // In place, several pieces of one buffer issued together (NCCL: one group of
  // ncclAllReduce / ncclReduce): piece p's elements are reduced over ranks;
  // with root r >= 0 the result lands on rank r only and the piece is
  // unspecified on the other ranks afterwards (ZeRO-1's owner pieces), with
  // root -1 on every rank. Pieces must not overlap. Traffic: root -1 pieces
  // count as one all-reduce of their total, rooted ones as one reduce-scatter.
  void reduce_pieces(void* buf, const std::vector<ReducePiece>& pieces, DataType type, ReduceOp op);

  // Asynchronous issue, for overlapping communication with compute. Between
  // begin_async() and end_async() the collectives leave out the compute
  // stream's wait for them (comm_nccl.cpp's "after" event): compute work issued
  // next may run while they do. end_async() returns a ticket for all of them;
  // wait(ticket) makes the compute stream wait for them on the device (no host
  // synchronisation). Until then the caller must neither read their outputs
  // nor overwrite their inputs. Waiting for a ticket again, or for an old one,
  // is harmless. MPI issues all_gather_v as MPI_Iallgatherv there (ZeRO-3's
  // gather ahead); wait() is then a host wait (MPI_Waitall), under the
  // collective timeout. Calls completed inside them (MPI's others, NCCL at
  // world 1) give ticket 0, and wait(0) does nothing. Not nestable.
  void begin_async();
  CommTicket end_async();
  void wait(CommTicket ticket);
  // Whether begin_async() can leave collectives in flight (else every ticket is 0).
  virtual bool overlaps() const { return false; }

  // Returns once every rank has entered. NCCL has no barrier: its implementation
  // does a 1-element all-reduce and synchronizes its stream (so for NCCL it also
  // waits for the work queued before it on that stream).
  void barrier();

  // Returns once the device work queued so far on the compute stream has run,
  // collectives it waits for included: a host wait that the collective timeout
  // covers (NCCL polls the stream against it; with the real NCCL a collective
  // returns once enqueued, so an unpolled wait behind a hung peer would block
  // forever). No collective. Host-memory communicators return at once.
  void wait_device();

  const CommStats& stats() const { return stats_; }
  const CommTraffic& traffic(CommCall call) const {
    return stats_[static_cast<size_t>(call)];
  }
  void reset_stats() { stats_ = CommStats{}; }

  // The collective timeout (distributed/watchdog.h): every transport call is
  // marked in flight on the watchdog, which ends the job when one outlasts its
  // timeout. nullptr detaches. The watchdog must outlive the communicator. An
  // NCCL communicator bootstrapped through this one inherits it.
  void set_watchdog(CommWatchdog* watchdog);
  CommWatchdog* watchdog() const { return watchdog_; }

 protected:
  // Run on the watchdog's thread when a call times out, before the job ends
  // (the NCCL communicator: ncclCommAbort). Empty: nothing to release.
  virtual std::function<void()> watchdog_abort_hook() { return {}; }
  // This communicator's in-flight mark (nullptr without a watchdog), for calls
  // an implementation makes outside the entries below (NCCL's init).
  CommWatchdog::Slot* watchdog_slot() const { return slot_; }
  // Releases the slot; an implementation whose abort hook uses its own members
  // calls it first thing in its destructor.
  void detach_watchdog();

  // The transport, called after argument checks and accounting. Every
  // implementation must support the in-place forms documented above.
  virtual void do_all_reduce(const void* send, void* recv, size_t count, DataType type,
                             ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                                 ReduceOp op) = 0;
  virtual void do_reduce_scatter_v(const void* send, void* recv,
                                   const std::vector<size_t>& counts, DataType type,
                                   ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, size_t send_count, DataType type) = 0;
  // Default: one do_broadcast per non-empty block, in rank order.
  virtual void do_all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type);
  virtual void do_broadcast(void* buf, size_t bytes, int root) = 0;
  virtual void do_barrier() = 0;
  // Default: one in-place all-reduce per piece (valid for rooted pieces too:
  // the other ranks' contents are unspecified).
  virtual void do_reduce_pieces(void* buf, const std::vector<ReducePiece>& pieces, DataType type,
                                ReduceOp op);
  // Default: calls complete inside (ticket 0).
  virtual void do_begin_async() {}
  virtual CommTicket do_end_async() { return 0; }
  virtual void do_wait(CommTicket) {}
  virtual void do_wait_device() {}

  // "rank R/W (host): " for error messages.
  virtual std::string error_prefix() const = 0;

  // Why this implementation cannot communicate `type` (nullptr: it can). The
  // entries check it before counting or calling the transport.
  virtual const char* type_refusal(DataType type) const { return nullptr; }
  bool in_async() const { return async_; }  // between begin_async and end_async

 private:
  void count(CommCall call, uint64_t payload, uint64_t sent);
  void check_type(const char* call, DataType type) const;
  void check_reduction(const char* call, DataType type, ReduceOp op) const;
  void check_disjoint(const char* call, const void* send, size_t send_bytes, const void* recv,
                      size_t recv_bytes) const;
  CommStats stats_{};
  bool async_ = false;  // between begin_async and end_async
  CommWatchdog* watchdog_ = nullptr;
  CommWatchdog::Slot* slot_ = nullptr;
};

// Convenience overloads for the host types the trainer uses.
inline void all_reduce(Communicator& comm, float* data, size_t count, ReduceOp op) {
  comm.all_reduce(data, data, count, DataType::kFloat32, op);
}
inline void all_reduce(Communicator& comm, double* data, size_t count, ReduceOp op) {
  comm.all_reduce(data, data, count, DataType::kFloat64, op);
}
inline double all_reduce_value(Communicator& comm, double value, ReduceOp op) {
  comm.all_reduce(&value, &value, 1, DataType::kFloat64, op);
  return value;
}

// MPI over host memory, on a private duplicate of MPI_COMM_WORLD (so the
// trainer's traffic never matches messages of another library). Requires the
// process's DistRuntime to be alive for the communicator's whole lifetime.
// Messages above `max_message_elems` elements (0: MPI's int count limit) are
// sent in several MPI calls; tests set it small to exercise that path.
std::unique_ptr<Communicator> make_mpi_communicator(const DistRuntime& runtime,
                                                    size_t max_message_elems = 0);

// The trainer's host communicator for `runtime`'s launch: MPI's, or without MPI
// (torchrun, srun --mpi=none) the NCCL-staged one (make_nccl_host_communicator,
// distributed/context.h), its NCCL calls timed by `watchdog` from the start.
std::unique_ptr<Communicator> make_host_communicator(const DistRuntime& runtime, CommWatchdog* watchdog);

}  // namespace gpt2

#endif  // DISTRIBUTED_COMM_H

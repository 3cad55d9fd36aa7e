// Communicator over MPI for host memory. Argument checks (types, counts, buffer
// overlap) are the interface's (distributed/comm.cpp); this file only moves data.
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

#include "distributed/comm.h"

namespace gpt2 {
namespace {

// MPI counts are ints; larger messages go in pieces of at most this many elements.
constexpr size_t kDefaultMaxChunk = size_t{1} << 30;

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt32: return MPI_INT;
    case DataType::kBFloat16: break;  // refused by type_refusal: MPI has no bf16
  }
  return MPI_DATATYPE_NULL;
}

// kAvg is reduced as a sum and divided afterwards (MPI has no average).
MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }

template <typename T>
void divide(void* data, size_t count, int world) {
  T* p = static_cast<T*>(data);
  const T w = static_cast<T>(world);
  for (size_t i = 0; i < count; ++i) p[i] /= w;
}

void finish_average(void* data, size_t count, DataType type, ReduceOp op, int world) {
  if (op != ReduceOp::kAvg || world == 1) return;
  if (type == DataType::kFloat32) divide<float>(data, count, world);
  if (type == DataType::kFloat64) divide<double>(data, count, world);
}

char* bytes_at(void* base, size_t elems, size_t elem_bytes) {
  return static_cast<char*>(base) + elems * elem_bytes;
}
const char* bytes_at(const void* base, size_t elems, size_t elem_bytes) {
  return static_cast<const char*>(base) + elems * elem_bytes;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(const DistContext& ctx, size_t max_chunk)
      : prefix_(ctx.prefix()), max_chunk_(max_chunk) {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &world_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool is_device_memory() const override { return false; }
  std::string name() const override { return "mpi"; }

 protected:
  std::string error_prefix() const override { return prefix_; }

  // MPI has no bf16 type, and summing bf16 on the host would need a user-defined
  // MPI_Op; bf16 buffers only exist on the GPU, where the NCCL communicator is.
  const char* type_refusal(DataType type) const override {
    return type == DataType::kBFloat16
               ? "bf16 buffers are device buffers: use the NCCL communicator"
               : nullptr;
  }

  void do_all_reduce(const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op) override {
    const size_t eb = data_type_bytes(type);
    if (world_ == 1) {  // a copy at most: no MPI call, no pass over the data in place
      if (send != recv) std::memmove(recv, send, count * eb);
      return;
    }
    for (size_t off = 0; off < count; off += max_chunk_) {
      const int n = static_cast<int>(std::min(max_chunk_, count - off));
      char* r = bytes_at(recv, off, eb);
      const void* s = send == recv ? MPI_IN_PLACE : bytes_at(send, off, eb);
      check(MPI_Allreduce(s, r, n, mpi_type(type), mpi_op(op), comm_), "MPI_Allreduce");
    }
    finish_average(recv, count, type, op, world_);
  }

  void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                         ReduceOp op) override {
    const size_t eb = data_type_bytes(type);
    const bool in_place = recv == bytes_at(send, recv_count * static_cast<size_t>(rank_), eb);
    if (world_ == 1) {
      if (!in_place) std::memcpy(recv, send, recv_count * eb);
      return;
    }
    if (recv_count > max_chunk_) {
      // Too big for one MPI call: reduce each block to its owner in pieces.
      std::vector<size_t> counts(static_cast<size_t>(world_), recv_count);
      reduce_blocks_to_owners(send, recv, counts, type, op);
      return;
    }
    const int n = static_cast<int>(recv_count);
    if (in_place) {
      // MPI's in-place form leaves rank r's block at the start of the buffer;
      // NCCL's convention (kept by this interface) wants it at offset r.
      void* buf = const_cast<void*>(send);  // recv aliases send: caller's memory is writable
      check(MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, n, mpi_type(type), mpi_op(op), comm_),
            "MPI_Reduce_scatter_block");
      if (rank_ != 0) std::memmove(recv, buf, recv_count * eb);
    } else {
      check(MPI_Reduce_scatter_block(send, recv, n, mpi_type(type), mpi_op(op), comm_),
            "MPI_Reduce_scatter_block");
    }
    finish_average(recv, recv_count, type, op, world_);
  }

  void do_reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& counts,
                           DataType type, ReduceOp op) override {
    const size_t eb = data_type_bytes(type);
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t mine = counts[static_cast<size_t>(rank_)];
    if (world_ == 1) {
      std::memcpy(recv, send, mine * eb);
      return;
    }
    if (total > max_chunk_) {
      reduce_blocks_to_owners(send, recv, counts, type, op);
      return;
    }
    std::vector<int> int_counts(counts.begin(), counts.end());
    // MPI wants a valid address even for an empty receive block.
    double dummy = 0;
    check(MPI_Reduce_scatter(send, mine > 0 ? recv : &dummy, int_counts.data(), mpi_type(type),
                             mpi_op(op), comm_),
          "MPI_Reduce_scatter");
    finish_average(recv, mine, type, op, world_);
  }

  void do_all_gather(const void* send, void* recv, size_t send_count, DataType type) override {
    const size_t eb = data_type_bytes(type);
    const bool in_place = send == bytes_at(recv, send_count * static_cast<size_t>(rank_), eb);
    if (world_ == 1) {
      if (!in_place) std::memcpy(recv, send, send_count * eb);
      return;
    }
    if (send_count > max_chunk_) {
      // Too big for one MPI call: every rank broadcasts its block in pieces.
      if (!in_place) std::memcpy(bytes_at(recv, send_count * rank_, eb), send, send_count * eb);
      for (int r = 0; r < world_; ++r) {
        for (size_t off = 0; off < send_count; off += max_chunk_) {
          const int n = static_cast<int>(std::min(max_chunk_, send_count - off));
          check(MPI_Bcast(bytes_at(recv, send_count * static_cast<size_t>(r) + off, eb), n,
                          mpi_type(type), r, comm_),
                "MPI_Bcast");
        }
      }
      return;
    }
    const int n = static_cast<int>(send_count);
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n,
                        mpi_type(type), comm_),
          "MPI_Allgather");
  }

  // Between begin_async and end_async: MPI_Iallgatherv (the counts and
  // displacements must live until it completes, so they are kept with it).
  void do_all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type) override {
    if (world_ == 1) return;
    size_t total = 0;
    for (size_t c : counts) total += c;
    if (total > max_chunk_) return Communicator::do_all_gather_v(buf, counts, type);  // per block, chunked
    Gather g;
    g.counts.assign(counts.begin(), counts.end());
    g.displs.assign(counts.size(), 0);
    for (size_t r = 1; r < counts.size(); ++r) g.displs[r] = g.displs[r - 1] + g.counts[r - 1];
    if (!in_async()) {
      check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, g.counts.data(), g.displs.data(), mpi_type(type),
                           comm_),
            "MPI_Allgatherv");
      return;
    }
    issued_.push_back(std::make_unique<Gather>(std::move(g)));
    Gather& held = *issued_.back();
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, held.counts.data(), held.displs.data(),
                          mpi_type(type), comm_, &held.request),
          "MPI_Iallgatherv");
  }

  bool overlaps() const override { return world_ > 1; }
  CommTicket do_end_async() override {
    if (issued_.empty()) return 0;
    in_flight_[++last_ticket_] = std::move(issued_);
    issued_.clear();
    return last_ticket_;
  }
  void do_wait(CommTicket ticket) override {
    auto it = in_flight_.find(ticket);
    if (it == in_flight_.end()) return;  // waited for already
    for (auto& g : it->second) check(MPI_Wait(&g->request, MPI_STATUS_IGNORE), "MPI_Wait of MPI_Iallgatherv");
    in_flight_.erase(it);
  }

  void do_broadcast(void* buf, size_t bytes, int root) override {
    if (world_ == 1) return;
    for (size_t off = 0; off < bytes; off += max_chunk_) {
      const int n = static_cast<int>(std::min(max_chunk_, bytes - off));
      check(MPI_Bcast(static_cast<char*>(buf) + off, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    }
  }

  void do_barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  void check(int rc, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(prefix_ + "distributed/comm_mpi.cpp: " + what + " failed: " +
                             std::string(text, static_cast<size_t>(len)));
  }

  // Block r of send (counts[r] elements, consecutive) reduced into rank r's
  // recv, with one MPI_Reduce per piece. Used when counts exceed MPI's int.
  void reduce_blocks_to_owners(const void* send, void* recv, const std::vector<size_t>& counts,
                               DataType type, ReduceOp op) {
    const size_t eb = data_type_bytes(type);
    const bool in_place_rs =
        recv == bytes_at(send, counts[0] * static_cast<size_t>(rank_), eb);
    size_t block_begin = 0;
    for (int r = 0; r < world_; ++r) {
      const size_t c = counts[static_cast<size_t>(r)];
      for (size_t off = 0; off < c; off += max_chunk_) {
        const int n = static_cast<int>(std::min(max_chunk_, c - off));
        const char* s = bytes_at(send, block_begin + off, eb);
        if (r == rank_) {
          char* d = bytes_at(recv, off, eb);
          check(MPI_Reduce(in_place_rs ? MPI_IN_PLACE : s, d, n, mpi_type(type), mpi_op(op), r,
                           comm_),
                "MPI_Reduce");
        } else {
          check(MPI_Reduce(s, nullptr, n, mpi_type(type), mpi_op(op), r, comm_), "MPI_Reduce");
        }
      }
      block_begin += c;
    }
    finish_average(recv, counts[static_cast<size_t>(rank_)], type, op, world_);
  }

  // A non-blocking gather and what MPI reads until it completes.
  struct Gather {
    std::vector<int> counts, displs;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  std::string prefix_;
  const size_t max_chunk_;  // elements (bytes for broadcast) per MPI call
  std::vector<std::unique_ptr<Gather>> issued_;  // since begin_async
  std::map<CommTicket, std::vector<std::unique_ptr<Gather>>> in_flight_;
  CommTicket last_ticket_ = 0;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const DistRuntime& runtime,
                                                    size_t max_message_elems) {
  const size_t chunk = max_message_elems == 0 ? kDefaultMaxChunk
                                              : std::min(max_message_elems, kDefaultMaxChunk);
  return std::make_unique<MpiCommunicator>(runtime.context(), chunk);
}

std::unique_ptr<Communicator> make_host_communicator(const DistRuntime& runtime, CommWatchdog* watchdog) {
  if (!runtime.uses_mpi()) {
    std::unique_ptr<Communicator> comm = make_nccl_host_communicator(runtime.nccl_id(), runtime.context(), watchdog);
    runtime.set_up_done();
    return comm;
  }
  auto comm = make_mpi_communicator(runtime);
  comm->set_watchdog(watchdog);
  return comm;
}

}  // namespace gpt2

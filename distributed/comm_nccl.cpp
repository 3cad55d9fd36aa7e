// The NCCL communicator (distributed/comm_nccl.h): the Communicator interface
// over device memory, one GPU per rank. Only the C APIs of <nccl.h> and
// <cuda_runtime_api.h> are used, so this one object links against the real NCCL
// and cudart or against the emulator's (build/libemu_nccl.a, build/libemu.a).
//
// Every collective is enqueued on the communicator's own stream (comm_stream_,
// created here on the rank's device) and returns without waiting. Two event
// waits keep it ordered with the backend's compute stream exactly as if it ran
// there (docs/distributed.md, "Compute stream, communication stream, events"):
//   before: event `ready_` recorded on the compute stream, waited for by the
//           comm stream: the collective reads what earlier compute work wrote;
//   after:  event `done_` recorded on the comm stream, waited for by the compute
//           stream: later compute work sees (and does not overwrite) its buffers.
// Neither blocks the host; compute queued after the collective that does not
// depend on it could overlap once the caller stops issuing it behind the wait.
// Asynchronous issue (Communicator::begin_async/end_async/wait): inside it the
// "after" wait is left out; end_async records a ticket event on the comm
// stream, which wait() makes the compute stream wait for (device-side only).
// Test hook: env GPT2_TEST_DROP_COMM_WAIT=before|after leaves that wait out
// (test/distributed/comm_stream_test.sh proves the emulator then fails).
// After each call the communicator's asynchronous error state is
// polled: a collective that fails while it runs (a lost peer, ranks calling
// different collectives) then surfaces at the next call instead of silently
// leaving garbage in the receive buffer.
#include "distributed/comm_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "util/test_hook.h"

namespace gpt2 {
namespace {

// ncclAvg and ncclBfloat16 appeared in NCCL 2.10.
constexpr int kMinNcclVersion = 21000;

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

const char* type_name(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "fp32";
    case DataType::kFloat64: return "fp64";
    case DataType::kInt32: return "int32";
    case DataType::kBFloat16: return "bf16";
  }
  return "?";
}

// kAvg is NCCL's own average (a pre-multiplied sum, see comm.h), not a sum
// followed by a division: that would need a kernel launch of our own per call.
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

// "ncclAllReduce(1001 bf16)": the call, for error messages.
std::string call_text(const char* call, size_t count, DataType type) {
  return std::string(call) + "(" + std::to_string(count) + " " + type_name(type) + ")";
}

const char* at(const void* base, size_t bytes) { return static_cast<const char*>(base) + bytes; }

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// What the bootstrap broadcast carries from rank 0: the id and whether
// ncclGetUniqueId succeeded, so a failure there stops every rank, not just 0.
struct IdMessage {
  ncclUniqueId id;
  int32_t result;  // ncclResult_t of rank 0's ncclGetUniqueId
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world, cudaStream_t stream) : rank_(rank), world_(world), stream_(stream) {
    DistContext ctx;
    ctx.rank = rank_;
    ctx.world = world_;
    ctx.host = host_name();
    prefix_ = ctx.prefix();
    drop_before_ = test_hook_drops_wait("GPT2_TEST_DROP_COMM_WAIT", "before", prefix_, "the before-collective event wait");
    drop_after_ = test_hook_drops_wait("GPT2_TEST_DROP_COMM_WAIT", "after", prefix_, "the after-collective event wait");
  }

  // A communicator that saw an error is aborted, not destroyed: ncclCommDestroy
  // first finishes the communicator's pending work, which a failed peer never
  // joins, so it could wait forever.
  ~NcclCommunicator() override {
    detach_watchdog();
    if (comm_ != nullptr && !aborted_) {
      // Real ncclCommAbort can block when a peer is gone: the process ends
      // kAbortGraceSeconds later rather than hang (this runs while unwinding).
      std::unique_ptr<ExitDeadline> deadline;
      if (failed_) deadline = std::make_unique<ExitDeadline>(kAbortGraceSeconds, abort_deadline_message());
      const ncclResult_t r = failed_ ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
      if (r != ncclSuccess)
        std::fprintf(stderr, "%swarning: %s\n", prefix_.c_str(),
                     error_text(failed_ ? "ncclCommAbort" : "ncclCommDestroy", r).c_str());
    }
    if (barrier_word_ != nullptr) cudaFree(barrier_word_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    for (cudaEvent_t e : tickets_)
      if (e != nullptr) cudaEventDestroy(e);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  }

  // Collective over the bootstrap's ranks. Each step ends with every rank
  // learning whether all succeeded (agree), so that no rank goes on into an NCCL
  // call which a failed peer never joins.
  void init(Communicator& bootstrap, int cuda_device) {
    if (bootstrap.is_device_memory())
      throw std::runtime_error(prefix_ + "make_nccl_communicator: the bootstrap communicator must "
                                         "work on host memory (MPI), not be '" + bootstrap.name() + "'");
    agree(bootstrap, prepare_device(cuda_device), "preparing the CUDA device");
    const IdMessage msg = unique_id_from_rank0(bootstrap);
    std::string error;
    ncclResult_t r;
    {
      // a peer that never joins: the timeout ends it, and so does a stop signal
      InFlight in_flight(watchdog_slot(), "ncclCommInitRank", /*ends_on_stop=*/true);
      r = ncclCommInitRank(&comm_, world_, msg.id, rank_);
    }
    if (r != ncclSuccess) {
      comm_ = nullptr;
      error = error_text("ncclCommInitRank(nranks " + std::to_string(world_) + ", rank " +
                             std::to_string(rank_) + ", CUDA device " + std::to_string(cuda_device) +
                             ")",
                         r);
    }
    agree(bootstrap, error, "ncclCommInitRank");
  }

  // Without a bootstrap communicator (a launch without MPI): the id came from
  // the rendezvous. A failure is this rank's alone; a peer left in NCCL's init
  // is ended by its watchdog.
  void init_from_id(const std::string& id_bytes, int cuda_device) {
    const std::string error = prepare_device(cuda_device);
    if (!error.empty()) throw_failed(prefix_ + error);
    ncclUniqueId id{};
    if (id_bytes.size() != sizeof id.internal)
      throw_failed(prefix_ + "the rendezvous carried " + std::to_string(id_bytes.size()) +
                   " bytes, not an NCCL unique id (" + std::to_string(sizeof id.internal) + ")");
    std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
    ncclResult_t r;
    {
      InFlight in_flight(watchdog_slot(), "ncclCommInitRank", /*ends_on_stop=*/true);
      r = ncclCommInitRank(&comm_, world_, id, rank_);
    }
    if (r != ncclSuccess) {
      comm_ = nullptr;
      throw_failed(prefix_ + error_text("ncclCommInitRank(nranks " + std::to_string(world_) + ", rank " +
                                            std::to_string(rank_) + ", CUDA device " + std::to_string(cuda_device) + ")",
                                        r));
    }
  }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  bool is_device_memory() const override { return true; }
  bool overlaps() const override { return world_ > 1; }
  std::string name() const override { return "nccl"; }

 protected:
  std::string error_prefix() const override { return prefix_; }

  // No watchdog abort hook: the watchdog's thread would abort the communicator
  // while this rank's thread may be inside it (NCCL forbids that); it ends the
  // process instead, and the communicator is aborted only on its own thread.

  void do_all_reduce(const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op) override {
    if (world_ == 1) return copy(recv, send, count * data_type_bytes(type));
    const cudaStream_t s = enter();
    check(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_, s),
          call_text("ncclAllReduce", count, type));
    leave(s);
  }

  // The interface has checked NCCL's in-place rule (recv == send + rank * block).
  void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type,
                         ReduceOp op) override {
    if (world_ == 1) return copy(recv, send, recv_count * data_type_bytes(type));
    const cudaStream_t s = enter();
    check(ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op), comm_, s),
          call_text("ncclReduceScatter", recv_count, type));
    leave(s);
  }

  // ncclReduceScatter takes one count for every block, so uneven blocks are W
  // reductions: block r is an ncclReduce to root r, to which every rank sends its
  // block r and which only rank r receives. Inside one ncclGroupStart/End NCCL
  // launches them together as one operation, where W separate calls would run
  // one after another. ncclReduce reads recvbuff only on the root; the other
  // ranks pass null, and an empty block (possibly a null recv) is skipped by all.
  void do_reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& counts,
                           DataType type, ReduceOp op) override {
    const size_t eb = data_type_bytes(type);
    if (world_ == 1) return copy(recv, send, counts[0] * eb);
    // Equal blocks: one ncclReduceScatter does it (the same per-element sums).
    if (std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; }))
      return do_reduce_scatter(send, recv, counts[0], type, op);
    const cudaStream_t s = enter();
    per_block_group(counts, type, "reduce_scatter_v", "ncclReduce", [&](int r, size_t begin, size_t c) {
      return ncclReduce(at(send, begin * eb), r == rank_ ? recv : nullptr, c, nccl_type(type), nccl_op(op), r, comm_,
                        s);
    });
    leave(s);
  }

  // One group: an in-place ncclAllReduce per root -1 piece, an in-place
  // ncclReduce (only the root's copy changes) per rooted piece.
  void do_reduce_pieces(void* buf, const std::vector<ReducePiece>& pieces, DataType type,
                        ReduceOp op) override {
    if (world_ == 1) return;  // a reduction over one rank is the identity
    const size_t eb = data_type_bytes(type);
    const cudaStream_t s = enter();
    check(ncclGroupStart(), "ncclGroupStart");
    for (const ReducePiece& p : pieces) {
      if (p.count == 0) continue;
      void* at = static_cast<char*>(buf) + p.offset * eb;
      const ncclResult_t res =
          p.root < 0 ? ncclAllReduce(at, at, p.count, nccl_type(type), nccl_op(op), comm_, s)
                     : ncclReduce(at, at, p.count, nccl_type(type), nccl_op(op), p.root, comm_, s);
      if (res != ncclSuccess) {
        ncclGroupEnd();
        fail(call_text(p.root < 0 ? "ncclAllReduce" : "ncclReduce", p.count, type) + " of reduce_pieces", res);
      }
    }
    check(ncclGroupEnd(), "ncclGroupEnd of reduce_pieces");
    leave(s);
  }

  void do_begin_async() override {
    async_ = true;
    async_issued_ = false;
  }

  // A ticket only when something went to the comm stream (world 1 copies and
  // empty calls stay on the compute stream).
  CommTicket do_end_async() override {
    async_ = false;
    if (!async_issued_) return 0;
    const CommTicket t = ++last_ticket_;
    check_cuda(cudaEventRecord(tickets_[t % kTicketEvents], comm_stream_), "cudaEventRecord of a ticket");
    return t;
  }

  // A ticket's event may since carry a later ticket's record: waiting for that
  // waits longer (the comm stream is in order), never too little.
  void do_wait(CommTicket t) override {
    if (t > last_ticket_) throw std::runtime_error(prefix_ + "wait: unknown ticket " + std::to_string(t));
    check_cuda(cudaStreamWaitEvent(stream_, tickets_[t % kTicketEvents], 0),
               "cudaStreamWaitEvent of the compute stream for a ticket");
  }

  // The interface has checked NCCL's in-place rule (send == recv + rank * block).
  void do_all_gather(const void* send, void* recv, size_t send_count, DataType type) override {
    if (world_ == 1) return copy(recv, send, send_count * data_type_bytes(type));
    const cudaStream_t s = enter();
    check(ncclAllGather(send, recv, send_count, nccl_type(type), comm_, s),
          call_text("ncclAllGather", send_count, type));
    leave(s);
  }

  void do_all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type) override {
    if (world_ == 1) return;
    const size_t eb = data_type_bytes(type);
    const cudaStream_t s = enter();
    per_block_group(counts, type, "all_gather_v", "ncclBroadcast", [&](int r, size_t begin, size_t c) {
      void* block = static_cast<char*>(buf) + begin * eb;
      return ncclBroadcast(block, block, c, nccl_type(type), r, comm_, s);
    });
    leave(s);
  }

  void do_broadcast(void* buf, size_t bytes, int root) override {
    if (world_ == 1) return;
    const cudaStream_t s = enter();
    check(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, s),
          "ncclBroadcast(" + std::to_string(bytes) + " bytes, root " + std::to_string(root) + ")");
    leave(s);
  }

  // NCCL has no barrier. An all-reduce cannot complete on any rank before every
  // rank has joined it, so waiting for a 1-element one is a barrier (its value
  // is irrelevant). The wait covers the compute stream's earlier work too: the
  // comm stream waits for it first (enter). World 1 waits for the compute stream.
  void do_barrier() override {
    if (world_ > 1) {
      const cudaStream_t s = enter();
      check(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, s),
            "ncclAllReduce(1 int32) of barrier");
      leave(s);
    }
    wait_stream("barrier", world_ > 1 ? comm_stream_ : stream_);
    check(ncclSuccess, "barrier");  // errors that arose while the stream ran
  }

  void do_wait_device() override {
    wait_stream("wait_device", stream_);
    check(ncclSuccess, "wait_device");  // errors that arose while it ran
  }

 private:
  // Waits for the stream. With a collective timeout (the watchdog's), polls it
  // instead of blocking: NCCL's asynchronous error state is checked on every
  // round, and past the deadline the communicator is aborted (its kernels
  // return) and the wait throws, naming the call.
  void wait_stream(const char* call, cudaStream_t stream) {
    usable();
    const CommWatchdog* dog = watchdog();
    if (dog == nullptr || !dog->enabled())
      return check_cuda(cudaStreamSynchronize(stream), std::string("cudaStreamSynchronize of ") + call);
    const auto start = std::chrono::steady_clock::now();
    const auto limit = std::chrono::duration<double>(dog->timeout_seconds());
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, std::string("cudaStreamQuery of ") + call);
      check(ncclSuccess, call);  // a peer's failure surfaces here first
      if (std::chrono::steady_clock::now() - start > limit) timed_out(call, dog->timeout_seconds());
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // The collective after the compute stream's work so far (event `ready_`);
  // returns the stream to issue it on. A compute stream that takes no event
  // (a destroyed handle) gets the collective itself, so that NCCL's own
  // stream check names the problem.
  cudaStream_t enter() {
    usable();
    if (drop_before_) return comm_stream_;
    if (cudaEventRecord(ready_, stream_) != cudaSuccess) {
      cudaGetLastError();  // NCCL reports it
      return stream_;
    }
    check_cuda(cudaStreamWaitEvent(comm_stream_, ready_, 0), "cudaStreamWaitEvent of the comm stream");
    return comm_stream_;
  }

  // Later compute work after the collective (event `done_`).
  void leave(cudaStream_t used) {
    if (used == stream_) return;
    if (async_) {  // the caller waits for the ticket
      async_issued_ = true;
      return;
    }
    if (drop_after_) return;
    check_cuda(cudaEventRecord(done_, comm_stream_), "cudaEventRecord on the comm stream");
    check_cuda(cudaStreamWaitEvent(stream_, done_, 0), "cudaStreamWaitEvent of the compute stream");
  }

  // An aborted communicator is gone: no call may reach NCCL with it.
  void usable() const {
    if (aborted_)
      throw std::runtime_error(prefix_ + "the NCCL communicator was aborted after an earlier failure and cannot "
                                         "be used");
  }

  // The deadline's message carries the failure: the exception that led to the
  // abort is still unwinding and would never be printed.
  std::string abort_deadline_message() const {
    char grace[32];
    std::snprintf(grace, sizeof grace, "%g", kAbortGraceSeconds);
    std::string failure = failure_;
    if (failure.compare(0, prefix_.size(), prefix_) == 0) failure.erase(0, prefix_.size());
    return prefix_ + "ending the process: ncclCommAbort did not return within " + grace + " s" +
           (failure.empty() ? std::string() : " (aborting after: " + failure + ")");
  }

  // Every error marks the communicator failed (it can then only be aborted)
  // and is kept for the abort's deadline message.
  [[noreturn]] void throw_failed(const std::string& message) {
    failed_ = true;
    failure_ = message;
    throw std::runtime_error(message);
  }

  [[noreturn]] void timed_out(const char* call, double seconds) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", seconds);
    const std::string message = prefix_ + "nccl " + call + " did not complete within " + limit +
                                " s (a peer rank died or hangs); aborted the NCCL communicator";
    failed_ = true;
    failure_ = message;
    if (!aborted_) {
      aborted_ = true;  // before the call: nothing uses comm_ after this point
      const ExitDeadline deadline(kAbortGraceSeconds, abort_deadline_message());
      ncclCommAbort(comm_);
    }
    throw std::runtime_error(message);
  }

  // The NCCL version, the device and the barrier's word; "" or the error.
  std::string prepare_device(int cuda_device) {
    const std::string where = "distributed/comm_nccl.cpp: ";
    int version = 0;
    const ncclResult_t v = ncclGetVersion(&version);
    if (v != ncclSuccess) return error_text("ncclGetVersion", v);
    if (version < kMinNcclVersion)
      return where + "NCCL " + std::to_string(version) + " is too old: ncclAvg and bf16 need NCCL " +
             "2.10 (" + std::to_string(kMinNcclVersion) + ") or newer";
    cudaError_t e = cudaSetDevice(cuda_device);
    if (e != cudaSuccess)
      return where + "cudaSetDevice(" + std::to_string(cuda_device) + ") failed: " + cudaGetErrorString(e);
    e = cudaMalloc(&barrier_word_, sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMemset(barrier_word_, 0, sizeof(int32_t));
    if (e != cudaSuccess) return where + "cudaMalloc of 4 bytes failed: " + cudaGetErrorString(e);
    // The comm stream at the device's highest priority, non-blocking: it is
    // ordered with the compute stream by the two events only.
    int least = 0, greatest = 0;
    e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    for (cudaEvent_t& t : tickets_)
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&t, cudaEventDisableTiming);
    if (e != cudaSuccess) return where + "creating the comm stream and its events failed: " + cudaGetErrorString(e);
    return {};
  }

  // Rank 0 makes the id, the bootstrap (host memory) carries it to every rank.
  IdMessage unique_id_from_rank0(Communicator& bootstrap) {
    IdMessage msg{};
    if (rank_ == 0) msg.result = ncclGetUniqueId(&msg.id);
    bootstrap.broadcast(&msg, sizeof msg, 0);
    if (msg.result != ncclSuccess) {
      throw_failed(prefix_ + (rank_ == 0 ? "" : "on rank 0: ") +
                               error_text("ncclGetUniqueId", static_cast<ncclResult_t>(msg.result)));
    }
    return msg;
  }

  // Throws on every rank if any rank failed: its own error where it failed, a
  // pointer to the others' elsewhere.
  void agree(Communicator& bootstrap, const std::string& my_error, const char* step) {
    int32_t any_failed = my_error.empty() ? 0 : 1;
    bootstrap.all_reduce(&any_failed, &any_failed, 1, DataType::kInt32, ReduceOp::kMax);
    if (any_failed == 0) return;
    throw_failed(prefix_ + (my_error.empty()
                                            ? std::string(step) + " failed on another rank (see its error)"
                                            : my_error));
  }

  // "distributed/comm_nccl.cpp: CALL failed: <ncclGetErrorString>: <ncclGetLastError>",
  // plus the communicator's asynchronous error when there is one: a call refused
  // because an earlier collective failed then names that failure too.
  std::string error_text(const std::string& what, ncclResult_t r) const {
    std::string text = "distributed/comm_nccl.cpp: " + what + " failed: " + ncclGetErrorString(r) +
                       last_error();
    ncclResult_t async = ncclSuccess;
    if (comm_ != nullptr && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress)
      text += std::string(" (asynchronous error of the communicator: ") + ncclGetErrorString(async) + ")";
    return text;
  }

  // ": <ncclGetLastError>", or nothing when NCCL left no message.
  std::string last_error() const {
    const char* last = ncclGetLastError(comm_);
    return last != nullptr && *last != '\0' ? ": " + std::string(last) : std::string();
  }

  // Every error marks the communicator failed: the peers may be waiting inside
  // the collective this rank gives up on, so it can only be aborted.
  [[noreturn]] void fail(const std::string& what, ncclResult_t r) {
    throw_failed(prefix_ + error_text(what, r));
  }

  // call(r, begin, count) for every non-empty block r of `counts` (begin: the
  // elements before it) inside one ncclGroupStart/End; a refused call closes
  // the group (NCCL drops it) before it is reported.
  template <class Call>
  void per_block_group(const std::vector<size_t>& counts, DataType type, const char* entry, const char* nccl_call,
                       Call call) {
    check(ncclGroupStart(), "ncclGroupStart");
    size_t begin = 0;
    for (int r = 0; r < world_; ++r) {
      const size_t c = counts[static_cast<size_t>(r)];
      if (c > 0) {
        const ncclResult_t res = call(r, begin, c);
        if (res != ncclSuccess) {
          ncclGroupEnd();
          fail(call_text(nccl_call, c, type) + " with root " + std::to_string(r), res);
        }
      }
      begin += c;
    }
    check(ncclGroupEnd(), call_text((std::string("ncclGroupEnd of ") + entry).c_str(), begin, type));
  }

  // The call's own result, then the communicator's asynchronous error state: a
  // collective that failed while running (this one or an earlier one) shows there.
  void check(ncclResult_t r, const std::string& what) {
    if (r != ncclSuccess) fail(what, r);
    ncclResult_t async = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &async);
    if (q != ncclSuccess) fail("ncclCommGetAsyncError after " + what, q);
    if (async == ncclSuccess || async == ncclInProgress) return;
    throw_failed(prefix_ + "distributed/comm_nccl.cpp: a collective failed while running (" +
                             "reported after " + what + "): " + ncclGetErrorString(async) + last_error());
  }

  void check_cuda(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    throw_failed(prefix_ + "distributed/comm_nccl.cpp: " + what + " failed: " +
                             cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }

  // World 1: a collective is the identity, so a copy at most and no NCCL call.
  void copy(void* dst, const void* src, size_t bytes) {
    if (dst == src || bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync (world of one)");
  }

  std::string prefix_;
  const int rank_;
  const int world_;
  const cudaStream_t stream_;          // the backend's compute stream
  cudaStream_t comm_stream_ = nullptr;  // every NCCL call runs here
  cudaEvent_t ready_ = nullptr;         // compute -> comm (enter)
  cudaEvent_t done_ = nullptr;          // comm -> compute (leave)
  bool drop_before_ = false, drop_after_ = false;  // GPT2_TEST_DROP_COMM_WAIT
  static constexpr size_t kTicketEvents = 8;  // reused round robin (see do_wait)
  std::array<cudaEvent_t, kTicketEvents> tickets_{};
  CommTicket last_ticket_ = 0;
  bool async_ = false, async_issued_ = false;
  ncclComm_t comm_ = nullptr;
  void* barrier_word_ = nullptr;  // device int32 reduced by barrier()
  bool failed_ = false;           // abort instead of destroy
  std::string failure_;           // the error that set failed_
  bool aborted_ = false;          // ncclCommAbort called (own thread only): comm_ is gone
};

// Host memory through NCCL, for launches without MPI: every call copies the
// host buffer to a device staging buffer on a private stream, runs the NCCL
// collective there and copies the result back; wait_device (polled against the
// watchdog's timeout) makes it complete on return, as comm.h requires.
class NcclHostCommunicator final : public Communicator {
 public:
  NcclHostCommunicator(std::unique_ptr<NcclCommunicator> nccl, cudaStream_t stream)
      : nccl_(std::move(nccl)), stream_(stream) {}
  ~NcclHostCommunicator() override {
    detach_watchdog();
    nccl_.reset();
    if (staging_ != nullptr) cudaFree(staging_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int rank() const override { return nccl_->rank(); }
  int world() const override { return nccl_->world(); }
  bool is_device_memory() const override { return false; }
  std::string name() const override { return "nccl (host buffers staged)"; }

 protected:
  std::string error_prefix() const override { return prefix(); }

  void do_all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override {
    const size_t bytes = count * data_type_bytes(type);
    char* d = upload(send, bytes, 0, bytes);
    nccl_->all_reduce(d, d, count, type, op);
    download(recv, d, bytes);
  }

  void do_reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) override {
    const size_t block = recv_count * data_type_bytes(type), mine = block * static_cast<size_t>(rank());
    char* d = upload(send, block * static_cast<size_t>(world()), 0, block * static_cast<size_t>(world()));
    nccl_->reduce_scatter(d, d + mine, recv_count, type, op);
    download(recv, d + mine, block);
  }

  void do_reduce_scatter_v(const void* send, void* recv, const std::vector<size_t>& counts, DataType type,
                           ReduceOp op) override {
    const size_t eb = data_type_bytes(type);
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t mine = counts[static_cast<size_t>(rank())] * eb;
    char* d = upload(send, total * eb, 0, total * eb + mine);
    nccl_->reduce_scatter_v(d, d + total * eb, counts, type, op);
    download(recv, d + total * eb, mine);
  }

  void do_all_gather(const void* send, void* recv, size_t send_count, DataType type) override {
    const size_t block = send_count * data_type_bytes(type), mine = block * static_cast<size_t>(rank());
    char* d = upload(send, block, mine, block * static_cast<size_t>(world()));
    nccl_->all_gather(d + mine, d, send_count, type);
    download(recv, d, block * static_cast<size_t>(world()));
  }

  void do_all_gather_v(void* buf, const std::vector<size_t>& counts, DataType type) override {
    size_t total = 0;
    for (size_t c : counts) total += c;
    const size_t bytes = total * data_type_bytes(type);
    char* d = upload(buf, bytes, 0, bytes);
    nccl_->all_gather_v(d, counts, type);
    download(buf, d, bytes);
  }

  void do_broadcast(void* buf, size_t bytes, int root) override {
    char* d = upload(buf, bytes, 0, bytes);
    nccl_->broadcast(d, bytes, root);
    download(buf, d, bytes);
  }

  void do_barrier() override { nccl_->barrier(); }

 private:
  std::string prefix() const {
    DistContext ctx;
    ctx.rank = rank();
    ctx.world = world();
    ctx.host = host_name();
    return ctx.prefix();
  }

  void check(cudaError_t e, const char* what) const {
    if (e != cudaSuccess)
      throw std::runtime_error(prefix() + "distributed/comm_nccl.cpp: " + what + " failed: " + cudaGetErrorString(e));
  }

  // `bytes` of `src` at offset `at` of a staging buffer of at least `size` bytes.
  char* upload(const void* src, size_t bytes, size_t at, size_t size) {
    if (size > staging_bytes_) {
      if (staging_ != nullptr) check(cudaFree(staging_), "cudaFree of the staging buffer");
      staging_ = nullptr;
      check(cudaMalloc(&staging_, size), "cudaMalloc of the staging buffer");
      staging_bytes_ = size;
    }
    char* d = static_cast<char*>(staging_);
    check(cudaMemcpyAsync(d + at, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to the device");
    return d;
  }

  void download(void* dst, const char* src, size_t bytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync to the host");
    nccl_->wait_device();  // polled against the collective timeout
  }

  std::unique_ptr<NcclCommunicator> nccl_;
  cudaStream_t stream_;
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
};

}  // namespace

bool nccl_linked() { return true; }

std::string nccl_unique_id_for_launch(const DistContext& ctx) {
  ncclUniqueId id{};
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    throw std::runtime_error(ctx.prefix() + "distributed/comm_nccl.cpp: ncclGetUniqueId failed: " +
                             ncclGetErrorString(r));
  return std::string(id.internal, sizeof id.internal);
}

std::string nccl_launch_problem(const DistContext& ctx) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return "no GPU visible: " + cpu_ranks_need_mpi(ctx);
  if (ctx.local_rank >= devices)
    return "local rank " + std::to_string(ctx.local_rank) + " but only " + std::to_string(devices) +
           " visible GPU(s): start at most one rank per GPU";
  return "";
}

std::unique_ptr<Communicator> make_nccl_host_communicator(const std::string& nccl_id, const DistContext& ctx,
                                                          CommWatchdog* watchdog) {
  const std::string problem = nccl_launch_problem(ctx);
  if (!problem.empty()) throw std::runtime_error(ctx.prefix() + problem);
  const int device = ctx.local_rank;  // as train/device_link.h's cuda_device_for_rank picks it
  cudaStream_t stream = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    throw std::runtime_error(ctx.prefix() + "distributed/comm_nccl.cpp: cannot create a stream on CUDA device " +
                             std::to_string(device));
  auto nccl = std::make_unique<NcclCommunicator>(ctx.rank, ctx.world, stream);
  nccl->set_watchdog(watchdog);
  try {
    nccl->init_from_id(nccl_id, device);
  } catch (...) {
    nccl.reset();
    cudaStreamDestroy(stream);
    throw;
  }
  auto host = std::make_unique<NcclHostCommunicator>(std::move(nccl), stream);
  host->set_watchdog(watchdog);
  return host;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int cuda_device,
                                                     void* cuda_stream) {
  auto comm = std::make_unique<NcclCommunicator>(bootstrap.rank(), bootstrap.world(),
                                                 static_cast<cudaStream_t>(cuda_stream));
  comm->set_watchdog(bootstrap.watchdog());  // the same collective timeout as the host calls
  comm->init(bootstrap, cuda_device);  // on failure the destructor releases what was made
  return comm;
}

}  // namespace gpt2

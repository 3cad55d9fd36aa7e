// Collective timeout: a rank that dies or hangs must not leave its peers
// blocked forever in a collective. MPI has no timeout of its own, and NCCL's
// kernels wait for a missing peer indefinitely, so every communicator reports
// the start and the end of each transport call to a CommWatchdog (two atomic
// stores, no lock); a thread of the watchdog wakes about once a second and,
// when one call has been in flight longer than the timeout, prints
//   error: rank R/W (host): mpi all_reduce did not complete within N s (a peer rank died or hangs); aborting
// to stderr, runs the abort hooks (the NCCL communicator's ncclCommAbort) and
// ends the job with MPI_Abort (under mpirun/srun every rank exits non-zero).
//
// Only calls in flight count: a rank that is busy outside collectives (a long
// step, a checkpoint write, rank 0 sampling) is never timed itself, but its
// peers waiting for it in a collective are. The timeout must therefore exceed
// the longest stretch one rank can spend outside collectives while the others
// wait (checkpoint writes between barriers, rank 0's samples).
#ifndef DISTRIBUTED_WATCHDOG_H
#define DISTRIBUTED_WATCHDOG_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gpt2 {

// --comm-timeout's default: torch's default NCCL timeout (10 minutes).
constexpr double kDefaultCommTimeoutSeconds = 600.0;

class CommWatchdog {
 public:
  // Milliseconds on a monotonic clock.
  using Clock = std::function<int64_t()>;
  // Called once, on the watchdog's thread (or poll()'s caller), with the whole
  // message (no "error: " in front, no newline). The default prints
  // "error: <message>" and calls MPI_Abort; it does not return.
  using ExpireAction = std::function<void(const std::string& message)>;

  // One communicator's in-flight call. The owner (a Communicator) calls
  // begin/end around every transport call; both are lock-free.
  class Slot {
   public:
    void begin(const char* call);
    void end();
    const std::string& kind() const { return kind_; }

   private:
    friend class CommWatchdog;
    Slot(CommWatchdog* owner, std::string kind, std::function<void()> abort_hook)
        : owner_(owner), kind_(std::move(kind)), abort_hook_(std::move(abort_hook)) {}
    CommWatchdog* owner_;
    const std::string kind_;           // "mpi", "nccl": names the communicator in messages
    std::function<void()> abort_hook_;  // run before the job is ended (may be empty)
    std::atomic<int64_t> since_ms_{-1};  // start of the call in flight; -1: none
    std::atomic<const char*> call_{nullptr};  // a string literal: "all_reduce", ...
  };

  // timeout_s <= 0 disables the watchdog (no thread; slots cost nothing).
  // `prefix` is the rank prefix ("rank R/W (host): "). With start_thread false
  // nothing polls by itself: tests call poll() with a fake clock.
  CommWatchdog(double timeout_s, std::string prefix, Clock clock = {}, ExpireAction expire = {},
               bool start_thread = true);
  ~CommWatchdog();
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  bool enabled() const { return timeout_ms_ > 0; }
  double timeout_seconds() const { return static_cast<double>(timeout_ms_) / 1000.0; }
  int64_t now_ms() const { return clock_(); }

  // A slot for one communicator; released with release(). `abort_hook` runs
  // (on the watchdog's thread) when any slot expires, before the job ends.
  Slot* add_slot(const std::string& kind, std::function<void()> abort_hook = {});
  void release(Slot* slot);

  // One check: when a call has been in flight longer than the timeout, the
  // expire action runs (after the hooks) and poll returns its message; else "".
  std::string poll();

  // "rank R/W (host): <kind> <call> did not complete within N s (a peer rank
  // died or hangs); aborting".
  std::string expiry_message(const std::string& kind, const char* call) const;

  // The default expire action: "error: <message>" on stderr, MPI_Abort(1).
  static void abort_job(const std::string& message);

 private:
  void run_thread();

  const int64_t timeout_ms_;
  const std::string prefix_;
  Clock clock_;
  ExpireAction expire_;
  std::mutex mutex_;  // guards slots_ and stop_; never held while expiring
  std::condition_variable wake_;
  bool stop_ = false;
  std::atomic<bool> expired_{false};
  std::vector<std::unique_ptr<Slot>> slots_;
  std::thread thread_;
};

// Scoped in-flight mark: begin in the constructor, end in the destructor (also
// when the call throws). A null slot does nothing.
class InFlight {
 public:
  InFlight(CommWatchdog::Slot* slot, const char* call) : slot_(slot) {
    if (slot_) slot_->begin(call);
  }
  ~InFlight() {
    if (slot_) slot_->end();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  CommWatchdog::Slot* slot_;
};

}  // namespace gpt2

#endif  // DISTRIBUTED_WATCHDOG_H

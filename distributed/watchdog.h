// Collective timeout: a rank that dies or hangs must not leave its peers
// blocked forever in a collective. MPI has no timeout of its own, and NCCL's
// kernels wait for a missing peer indefinitely, so every communicator reports
// the start and the end of each transport call to a CommWatchdog (two atomic
// stores, no lock); a thread of the watchdog wakes about once a second and,
// when one call has been in flight longer than the timeout, prints
//   error: rank R/W (host): mpi all_reduce did not complete within N s (a peer rank died or hangs); aborting
// to stderr, runs the abort hooks and ends the job with MPI_Abort (under
// mpirun/srun every rank exits non-zero; without MPI, _Exit(1)).
//
// The end of the process never depends on an abort returning: before any hook
// runs, an ExitDeadline is armed that _Exit(1)s the process kAbortGraceSeconds
// later (real ncclCommAbort and MPI_Abort are known to block when a peer is
// gone). So every rank whose call is in flight exits within --comm-timeout +
// kCommTimeoutSlackSeconds. Hooks run on the watchdog's thread while the main
// thread may be inside the communicator, so they must not touch it (the NCCL
// communicator has none: it aborts only on its own thread, see comm_nccl.cpp).
//
// A set-up call that waits for peers (ncclCommInitRank) is marked to end on a
// stop signal: a SIGTERM or Ctrl-C that arrives while it is in flight ends the
// process within about a second, exit 128 + the signal, since the call itself
// cannot notice the signal and there is no step boundary to stop at yet. While
// such a call waits, every kSetUpNoteSeconds the watchdog says so on stderr.
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
// How long an abort (hooks, ncclCommAbort, MPI_Abort) may take before the
// process ends itself with _Exit(1).
constexpr double kAbortGraceSeconds = 5.0;
// The stated bound: a rank with a call in flight exits at most this long after
// --comm-timeout (polling about once a second + the grace + exit).
constexpr double kCommTimeoutSlackSeconds = 10.0;
// How often a set-up call still waiting for its peers is reported.
constexpr int64_t kSetUpNoteSeconds = 30;

// Ends the process with _Exit(code) after printing "error: <message>" unless
// destroyed within `seconds`: bounds a call that may block forever (an abort).
// Scoped: a call that returns in time disarms it. Its thread captures nothing
// of the caller, so an ExitDeadline whose owner never returns still fires.
class ExitDeadline {
 public:
  ExitDeadline(double seconds, std::string message, int code = 1);
  ~ExitDeadline();
  ExitDeadline(const ExitDeadline&) = delete;
  ExitDeadline& operator=(const ExitDeadline&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

class CommWatchdog {
 public:
  // Milliseconds on a monotonic clock.
  using Clock = std::function<int64_t()>;
  // Called once, on the watchdog's thread (or poll()'s caller), with the whole
  // message (no "error: " in front, no newline) and the exit code (1 for a
  // timeout, 128 + the signal for a stop). The default prints "error:
  // <message>" and calls MPI_Abort; it does not return.
  using ExpireAction = std::function<void(const std::string& message, int exit_code)>;

  // One communicator's in-flight call. The owner (a Communicator) calls
  // begin/end around every transport call; both are lock-free.
  class Slot {
   public:
    // ends_on_stop: a stop signal during the call ends the process (set-up calls).
    void begin(const char* call, bool ends_on_stop = false);
    void end();
    const std::string& kind() const { return kind_; }

   private:
    friend class CommWatchdog;
    Slot(CommWatchdog* owner, std::string kind, std::function<void()> abort_hook)
        : owner_(owner), kind_(std::move(kind)), abort_hook_(std::move(abort_hook)) {}
    CommWatchdog* owner_;
    const std::string kind_;           // "mpi", "nccl": names the communicator in messages
    std::function<void()> abort_hook_;  // run before the job is ended (may be empty); thread-safe
    std::atomic<int64_t> since_ms_{-1};  // start of the call in flight; -1: none
    std::atomic<const char*> call_{nullptr};  // a string literal: "all_reduce", ...
    std::atomic<bool> ends_on_stop_{false};
    std::atomic<int64_t> next_note_ms_{-1};  // a set-up call's next progress note
  };

  // timeout_s <= 0 disables the watchdog (no thread; slots cost nothing).
  // `prefix` is the rank prefix ("rank R/W (host): "). With start_thread false
  // nothing polls by itself: tests call poll() with a fake clock. Hooks and
  // the expire action together get `grace_s` before the process _Exit(1)s.
  CommWatchdog(double timeout_s, std::string prefix, Clock clock = {}, ExpireAction expire = {},
               bool start_thread = true, double grace_s = kAbortGraceSeconds);
  ~CommWatchdog();
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  bool enabled() const { return timeout_ms_ > 0; }
  double timeout_seconds() const { return static_cast<double>(timeout_ms_) / 1000.0; }
  int64_t now_ms() const { return clock_(); }

  // A slot for one communicator; released with release(). `abort_hook` runs
  // (on the watchdog's thread, under the exit deadline) when any slot expires,
  // before the job ends; it must not use a communicator another thread may be in.
  Slot* add_slot(const std::string& kind, std::function<void()> abort_hook = {});
  void release(Slot* slot);

  // One check: when a call has been in flight longer than the timeout, or a
  // call marked ends_on_stop is in flight after a stop signal, the exit
  // deadline is armed, the hooks run, then the expire action, and poll returns
  // its message (once the action returned: tests); else "".
  std::string poll();

  // Where progress notes go (default: stderr, one line each); tests record them.
  void set_note(std::function<void(const std::string&)> note) { note_ = std::move(note); }

  // "rank R/W (host): <kind> <call> did not complete within N s (a peer rank
  // died or hangs); aborting".
  std::string expiry_message(const std::string& kind, const char* call) const;

  // The default expire action: "error: <message>" on stderr, MPI_Abort(exit_code).
  static void abort_job(const std::string& message, int exit_code);

 private:
  void run_thread();

  const int64_t timeout_ms_;
  const double grace_s_;
  const std::string prefix_;
  Clock clock_;
  ExpireAction expire_;
  std::function<void(const std::string&)> note_;
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
  InFlight(CommWatchdog::Slot* slot, const char* call, bool ends_on_stop = false) : slot_(slot) {
    if (slot_) slot_->begin(call, ends_on_stop);
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

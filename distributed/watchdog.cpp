#include "distributed/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "distributed/preempt.h"

namespace gpt2 {
namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "5", "0.5", "600": the timeout as given, without trailing zeros.
std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

// Shared with the thread, so that a deadline destroyed while its thread wakes
// leaves nothing dangling.
struct ExitDeadline::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool cancelled = false;
};

ExitDeadline::ExitDeadline(double seconds, std::string message, int code) : state_(std::make_shared<State>()) {
  const auto limit = std::chrono::duration<double>(seconds);
  thread_ = std::thread([state = state_, limit, message = std::move(message), code] {
    std::unique_lock<std::mutex> lock(state->mutex);
    if (state->wake.wait_for(lock, limit, [&] { return state->cancelled; })) return;
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  });
}

ExitDeadline::~ExitDeadline() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->cancelled = true;
  }
  state_->wake.notify_all();
  thread_.join();
}

void CommWatchdog::Slot::begin(const char* call, bool ends_on_stop) {
  if (!owner_->enabled()) return;
  call_.store(call, std::memory_order_relaxed);
  ends_on_stop_.store(ends_on_stop, std::memory_order_relaxed);
  next_note_ms_.store(ends_on_stop ? owner_->clock_() + kSetUpNoteSeconds * 1000 : -1, std::memory_order_relaxed);
  since_ms_.store(owner_->clock_(), std::memory_order_release);
}

void CommWatchdog::Slot::end() {
  if (!owner_->enabled()) return;
  since_ms_.store(-1, std::memory_order_release);
}

CommWatchdog::CommWatchdog(double timeout_s, std::string prefix, Clock clock, ExpireAction expire,
                           bool start_thread, double grace_s)
    : timeout_ms_(timeout_s > 0 ? static_cast<int64_t>(std::llround(timeout_s * 1000.0)) : 0),
      grace_s_(grace_s),
      prefix_(std::move(prefix)),
      clock_(clock ? std::move(clock) : Clock(steady_ms)),
      expire_(expire ? std::move(expire) : ExpireAction(abort_job)),
      note_([](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
      }) {
  if (enabled() && start_thread) thread_ = std::thread([this] { run_thread(); });
}

CommWatchdog::~CommWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CommWatchdog::Slot* CommWatchdog::add_slot(const std::string& kind, std::function<void()> abort_hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.emplace_back(new Slot(this, kind, std::move(abort_hook)));
  return slots_.back().get();
}

void CommWatchdog::release(Slot* slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = slots_.begin(); it != slots_.end(); ++it)
    if (it->get() == slot) {
      slots_.erase(it);
      return;
    }
}

std::string CommWatchdog::expiry_message(const std::string& kind, const char* call) const {
  return prefix_ + kind + " " + (call ? call : "collective") + " did not complete within " +
         seconds_text(timeout_seconds()) + " s (a peer rank died or hangs); aborting";
}

// The slot scan holds the mutex only to copy what expiring needs (message and
// hooks); hooks and the expire action run without any lock of the watchdog, so
// neither they nor MPI_Abort can wait on a lock a blocked thread holds, and
// under an armed ExitDeadline, so neither can keep the process alive.
std::string CommWatchdog::poll() {
  if (!enabled() || expired_.load()) return {};
  std::string message;
  int code = 1;
  std::vector<std::function<void()>> hooks;
  std::vector<std::string> notes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = clock_();
    const int stop = local_stop_signal();
    for (const auto& slot : slots_) {
      const int64_t since = slot->since_ms_.load(std::memory_order_acquire);
      if (since < 0) continue;
      const char* call = slot->call_.load(std::memory_order_relaxed);
      const int64_t note_at = slot->next_note_ms_.load(std::memory_order_relaxed);
      if (note_at >= 0 && now >= note_at && now - since <= timeout_ms_) {
        notes.push_back(prefix_ + slot->kind_ + " " + (call ? call : "set-up") + ": waiting for the other ranks (" +
                        std::to_string((now - since) / 1000) + " s of " + seconds_text(timeout_seconds()) + " s)");
        slot->next_note_ms_.store(note_at + kSetUpNoteSeconds * 1000, std::memory_order_relaxed);
      }
      if (now - since > timeout_ms_) {
        message = expiry_message(slot->kind_, call);
        break;
      }
      if (stop != 0 && slot->ends_on_stop_.load(std::memory_order_relaxed)) {
        message = prefix_ + "stop requested by signal " + std::to_string(stop) + " during " + slot->kind_ + " " +
                  (call ? call : "set-up") + " (waiting for the other ranks); exiting";
        code = stopped_exit_code(stop);
        break;
      }
    }
    if (!message.empty())
      for (const auto& slot : slots_)
        if (slot->abort_hook_) hooks.push_back(slot->abort_hook_);
  }
  for (const std::string& line : notes) note_(line);
  if (message.empty()) return {};
  if (expired_.exchange(true)) return {};
  const ExitDeadline deadline(grace_s_,
                              prefix_ + "ending the process: the abort after the " +
                                  (code == 1 ? "collective timeout" : "stop signal") + " did not finish within " +
                                  seconds_text(grace_s_) + " s",
                              code);
  for (auto& hook : hooks) hook();
  expire_(message, code);
  return message;
}

void CommWatchdog::run_thread() {
  // About once a second, or sooner for sub-second timeouts (tests).
  const auto period = std::chrono::milliseconds(timeout_ms_ < 2000 ? std::max<int64_t>(timeout_ms_ / 4, 10) : 1000);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    poll();
    lock.lock();
  }
}

void CommWatchdog::abort_job(const std::string& message, int exit_code) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace gpt2

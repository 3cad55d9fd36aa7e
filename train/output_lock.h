// DIR/.lock, held by rank 0 of a training run for its whole life so no second
// run writes to the same --output-dir. Text, key=value lines: host, pid, started,
// heartbeat (unix seconds), then inside Slurm slurm_job, slurm_restart (format_lock).
#ifndef TRAIN_OUTPUT_LOCK_H
#define TRAIN_OUTPUT_LOCK_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gpt2 {

// Where warnings and notes go (the trainer passes its logger); may be empty.
using Notify = std::function<void(const std::string&)>;

// Held under flock(LOCK_EX) for the life of an OutputDirLock, removed by its
// destructor (also on error exits). A second run throws:
//   "--output-dir DIR is in use by PID P on host H (started ...)..."
// A lock left behind by a killed run is stale, and taken over with a warning, when
//   * its holder is on this host and flock is granted (the kernel drops the
//     lock of a dead process), or, where the filesystem has no flock, its PID
//     no longer exists;
//   * it is a previous incarnation of this Slurm job (same SLURM_JOB_ID, other
//     SLURM_RESTART_COUNT: Slurm requeues only a job that has ended);
//   * its holder is on another host and its heartbeat (rewritten every
//     kLockHeartbeatSeconds by a thread) is older than kLockStaleSeconds: flock
//     across nodes is not trusted (NFS/Lustre may grant it locally only).
constexpr int kLockHeartbeatSeconds = 60;
constexpr int kLockStaleSeconds = 600;

// The lock file's contents and the staleness rules (public for the tests).
struct LockHolder {
  std::string host;
  int64_t pid = 0;
  int64_t started = 0, heartbeat = 0;  // unix seconds
  std::string slurm_job, slurm_restart;  // empty outside Slurm
};
std::string format_lock(const LockHolder& h);
bool parse_lock(const std::string& text, LockHolder* h);
LockHolder this_process_lock_holder();
// Why `holder` no longer holds its lock ("" when it may still be running).
// granted: this process got flock on the file; no_flock: the filesystem has none.
std::string stale_lock_reason(const LockHolder& holder, const LockHolder& me, bool granted, bool no_flock,
                              int64_t now);

class OutputDirLock {
 public:
  OutputDirLock(const std::string& dir, const Notify& note, int heartbeat_seconds = kLockHeartbeatSeconds);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  struct Heartbeat;
  bool try_acquire(const Notify& note);
  void write_contents();
  std::string path_;
  int fd_ = -1;
  LockHolder me_;
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace gpt2

#endif  // TRAIN_OUTPUT_LOCK_H

// The output directory lock, DIR/.lock: taking it (or taking over a stale
// one), its heartbeat thread and its release; format in train/output_lock.h.
#include "train/output_lock.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace gpt2 {

namespace {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::string utc_time(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string read_fd_text(int fd) {
  std::string text;
  char buf[512];
  for (off_t off = 0;;) {
    const ssize_t n = pread(fd, buf, sizeof(buf), off);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return text;
}

std::string describe_holder(const LockHolder& h) {
  std::string s = "PID " + std::to_string(h.pid) + " on host " + h.host + " (started " + utc_time(h.started) +
                  ", heartbeat " + std::to_string(std::max<int64_t>(0, unix_now() - h.heartbeat)) + " s ago";
  if (!h.slurm_job.empty()) s += ", Slurm job " + h.slurm_job + " restart " + h.slurm_restart;
  return s + ")";
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::runtime_error in_use_error(const std::string& lock_path, const std::string& holder) {
  const std::string dir = lock_path.substr(0, lock_path.rfind('/'));
  return std::runtime_error("--output-dir " + dir + " is in use by " + holder +
                            ": a duplicated or requeued job? If that process is gone, remove " + lock_path);
}

// Whether `fd` is still the file `path` names (not unlinked or replaced since).
bool still_named(int fd, const std::string& path) {
  struct stat opened, named;
  return fstat(fd, &opened) == 0 && ::stat(path.c_str(), &named) == 0 && opened.st_ino == named.st_ino &&
         opened.st_dev == named.st_dev;
}

}  // namespace

std::string format_lock(const LockHolder& h) {
  std::string s = "host=" + h.host + "\npid=" + std::to_string(h.pid) + "\nstarted=" + std::to_string(h.started) +
                  "\nheartbeat=" + std::to_string(h.heartbeat) + "\n";
  if (!h.slurm_job.empty()) s += "slurm_job=" + h.slurm_job + "\nslurm_restart=" + h.slurm_restart + "\n";
  return s;
}

bool parse_lock(const std::string& text, LockHolder* h) {
  LockHolder out;
  bool host = false, pid = false, beat = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    char* end = nullptr;
    const long long num = std::strtoll(value.c_str(), &end, 10);
    const bool is_num = !value.empty() && *end == '\0';
    if (key == "host") host = !(out.host = value).empty();
    else if (key == "pid") pid = is_num && (out.pid = num) > 0;
    else if (key == "started" && is_num) out.started = num;
    else if (key == "heartbeat") beat = is_num && ((out.heartbeat = num), true);
    else if (key == "slurm_job") out.slurm_job = value;
    else if (key == "slurm_restart") out.slurm_restart = value;
  }
  if (!host || !pid || !beat) return false;
  *h = out;
  return true;
}

LockHolder this_process_lock_holder() {
  LockHolder me;
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  me.host = host;
  me.pid = getpid();
  me.started = me.heartbeat = unix_now();
  me.slurm_job = env_or("SLURM_JOB_ID", "");
  // Slurm sets SLURM_RESTART_COUNT only once a job has been requeued.
  if (!me.slurm_job.empty()) me.slurm_restart = env_or("SLURM_RESTART_COUNT", "0");
  return me;
}

std::string stale_lock_reason(const LockHolder& holder, const LockHolder& me, bool granted, bool no_flock,
                              int64_t now) {
  if (!holder.slurm_job.empty() && holder.slurm_job == me.slurm_job && holder.slurm_restart != me.slurm_restart)
    return "it is an earlier run of this Slurm job " + me.slurm_job + " (restart " + holder.slurm_restart +
           "; Slurm requeues a job only after it ended)";
  if (holder.host == me.host) {
    // One kernel: it drops a process's flock when the process dies, whatever
    // its PID namespace. Without flock, the PID is all there is to go by.
    if (granted) return "no process on this host holds it any more";
    if (no_flock && kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH)
      return "PID " + std::to_string(holder.pid) + " no longer exists";
    return "";
  }
  if (now - holder.heartbeat > kLockStaleSeconds)
    return "host " + holder.host + " has not renewed it for " + std::to_string(now - holder.heartbeat) +
           " s (stale after " + std::to_string(kLockStaleSeconds) + " s)";
  return "";
}

// Renews the heartbeat every few seconds-to-minutes from a thread, so that
// liveness never depends on how often the run checkpoints.
struct OutputDirLock::Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

OutputDirLock::OutputDirLock(const std::string& dir, const Notify& note, int heartbeat_seconds)
    : path_(dir + "/.lock"), me_(this_process_lock_holder()) {
  // A holder that exits unlinks the file; one that we opened just before that
  // is retried (see try_acquire).
  for (int attempt = 0; attempt < 10 && fd_ < 0; attempt++) try_acquire(note);
  if (fd_ < 0) throw std::runtime_error(path_ + ": could not take the lock (the file keeps being replaced)");
  try {
    write_contents();
  } catch (...) {
    ::close(fd_);  // no destructor runs for a throwing constructor
    throw;
  }
  if (heartbeat_seconds <= 0) return;
  heartbeat_ = std::make_unique<Heartbeat>();
  heartbeat_->thread = std::thread([this, heartbeat_seconds] {
    std::unique_lock<std::mutex> lk(heartbeat_->mu);
    while (!heartbeat_->cv.wait_for(lk, std::chrono::seconds(heartbeat_seconds), [this] { return heartbeat_->stop; })) {
      me_.heartbeat = unix_now();
      try {
        write_contents();
      } catch (const std::exception&) {
        // A missed heartbeat must not stop training; the next one retries.
      }
    }
  });
}

OutputDirLock::~OutputDirLock() {
  if (heartbeat_) {
    {
      std::lock_guard<std::mutex> lk(heartbeat_->mu);
      heartbeat_->stop = true;
    }
    heartbeat_->cv.notify_all();
    heartbeat_->thread.join();
  }
  if (still_named(fd_, path_)) ::unlink(path_.c_str());  // only while still ours (not taken over as stale)
  ::close(fd_);  // releases the flock
}

bool OutputDirLock::try_acquire(const Notify& note) {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot open the lock file (" + std::strerror(errno) + ")");
  const bool granted = flock(fd, LOCK_EX | LOCK_NB) == 0;
  const int err = errno;
  // filesystems without flock answer these instead of granting or refusing it
  const bool no_flock = !granted && (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL);
  if (!granted && !no_flock) {
    LockHolder holder;
    const bool known = parse_lock(read_fd_text(fd), &holder);
    ::close(fd);
    if (err != EWOULDBLOCK) throw std::runtime_error(path_ + ": flock failed (" + std::strerror(err) + ")");
    throw in_use_error(path_, known ? describe_holder(holder) : "another process, starting up");
  }
  if (!still_named(fd, path_)) {
    ::close(fd);  // the previous holder unlinked it meanwhile: open the new one
    return false;
  }
  LockHolder holder;
  const std::string text = read_fd_text(fd);
  if (parse_lock(text, &holder)) {
    const std::string reason = stale_lock_reason(holder, me_, granted, no_flock, unix_now());
    if (reason.empty()) {
      ::close(fd);
      throw in_use_error(path_, describe_holder(holder));
    }
    if (note) note("WARNING: taking over the stale lock " + path_ + " of " + describe_holder(holder) + ": " + reason);
  } else if (!text.empty() && note) {
    note("WARNING: " + path_ + " is not a lock file this program wrote; taking it over");
  }
  if (no_flock && note) note("note: " + path_ + ": the filesystem has no flock; the lock relies on its contents");
  fd_ = fd;
  return true;
}

// pwrite + ftruncate (never an empty file in between) + fsync, so readers on
// other nodes see the heartbeat (NFS close-to-open consistency).
void OutputDirLock::write_contents() {
  const std::string text = format_lock(me_);
  if (pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ftruncate(fd_, static_cast<off_t>(text.size())) != 0 || fsync(fd_) != 0)
    throw std::runtime_error(path_ + ": cannot write the lock file (" + std::strerror(errno) + ")");
}

}  // namespace gpt2

// File rendezvous (distributed/rendezvous.h, file:DIR): for nodes that share a
// file system but cannot open ports to each other. Files in DIR, each written
// whole (a temporary name, then rename or link) so a reader never sees half:
//   rank0   rank 0's announcement: job, world, host, pid, time, a random nonce
//           and the payload (hex), created with link(). A rank0 or go already
//           there when rank 0 starts is a stale file of an earlier job:
//           refused; a rank0 of a live process on this host is a second
//           process given RANK=0, told through rank0.claim so both end.
//   rankR   rank R's claim (after reading rank0): the nonce it read, its world,
//           host, and why it cannot go on if it cannot. Created with link(),
//           which fails if it exists, so two processes claiming one rank
//           cannot both succeed.
//   go      rank 0's verdict once every claim is in: the nonce and ok, or the
//           error (world sizes that disagree, a claim of another nonce, a rank
//           that cannot start).
//   alive.R rank R's heartbeat (the set-up watch, rendezvous.h), from its claim
//           (rank 0: its verdict) until its communicator is made: the nonce and
//           a count rewritten every half second, removed when its set-up is
//           done. One that stops changing is a rank whose process or host ended.
// Each rank R removes its claim after reading go; rank 0 removes rank0 and go
// once the claims are gone, and each rank its alive.R once set up, leaving DIR
// as it found it. A rank that ends for a lost peer removes the peer's alive.R,
// and its own where no one else watches it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "distributed/preempt.h"
#include "distributed/rendezvous_internal.h"

namespace gpt2 {
namespace rdzv {
namespace {

using Fields = std::map<std::string, std::string>;

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string unhex(const std::string& text) {
  std::string out;
  for (size_t i = 0; i + 1 < text.size(); i += 2) out += static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16));
  return out;
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// key=value lines; an absent file gives an empty map. A file larger than any
// rank writes (a payload and a few short fields) is not read at all.
Fields read_fields(const std::string& path) {
  constexpr off_t kMostBytes = 1 << 20;
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && st.st_size > kMostBytes)
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, more than a rendezvous file holds (" +
                             std::to_string(kMostBytes) + "): not written by a rank of this program");
  Fields f;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) f[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return f;
}

std::string format(const Fields& f) {
  std::string out;
  for (const auto& kv : f) out += kv.first + "=" + kv.second + "\n";
  return out;
}

// Writes a temporary file next to `path`; returns its name. The name carries a
// random tag, not only the pid: two writers of one path may share a pid (threads
// of one process, or processes on two hosts of a shared file system), and a
// shared temporary name lets one writer's remove() break the other's link().
std::string write_temp(const std::string& path, const Fields& f, const std::string& prefix) {
  std::random_device entropy;
  const unsigned long long tag = (static_cast<unsigned long long>(entropy()) << 32) ^ entropy();
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + hex(std::string(
      reinterpret_cast<const char*>(&tag), sizeof tag));
  std::ofstream out(tmp, std::ios::trunc);
  out << format(f);
  out.close();
  if (!out) throw std::runtime_error(prefix + "rendezvous: cannot write " + tmp + ": " + std::strerror(errno));
  return tmp;
}

// "host H, pid P, written N s ago, job J" for messages about someone else's file.
std::string origin(const Fields& f) {
  std::string s = "host " + (f.count("host") ? f.at("host") : "?") + ", pid " + (f.count("pid") ? f.at("pid") : "?");
  if (f.count("time")) s += ", written " + std::to_string(std::time(nullptr) - std::atoll(f.at("time").c_str())) + " s ago";
  if (f.count("job") && !f.at("job").empty()) s += ", job " + f.at("job");
  return s;
}

Fields mine(const RendezvousRequest& req) {
  return {{"host", req.host},
          {"pid", std::to_string(getpid())},
          {"time", std::to_string(std::time(nullptr))},
          {"job", req.job_id},
          {"world", std::to_string(req.world)},
          {"problem", hex(req.problem)}};
}

// Whether the process that wrote `f` runs on this host now.
bool alive_here(const Fields& f, const std::string& host) {
  const long pid = f.count("pid") ? std::atol(f.at("pid").c_str()) : 0;
  return f.count("host") && f.at("host") == host && pid > 0 &&
         (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

void sleep_a_little() { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }

// The file watch (SetUpWatch): this rank's DIR/alive.R rewritten every kBeatMs,
// the watched peers' read as often. A peer's file that is gone is a peer set
// up; one whose text stays the same over kSilentS seconds and kSilentReads
// reads is a peer whose process or host ended (a slow file system delays the
// writes and the reads alike, so the time alone does not decide).
class FileWatch final : public SetUpWatch {
 public:
  static constexpr int kBeatMs = 500;
  static constexpr double kSilentS = 5;
  static constexpr int kSilentReads = 8;

  // Writes DIR/alive.RANK and starts rewriting it.
  FileWatch(std::string dir, int rank, int world, std::string nonce, std::string prefix)
      : path_(alive_path(dir, rank)), dir_(std::move(dir)), rank_(rank), world_(world), nonce_(std::move(nonce)),
        prefix_(std::move(prefix)) {
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0 || close(fd) != 0 || !beat())
      throw std::runtime_error(prefix_ + "rendezvous: cannot write " + path_ + ": " + std::strerror(errno));
    thread_ = std::thread([this] { run(); });
  }
  ~FileWatch() override { done(); }
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

  // Once the rendezvous is done: watch these peers, by rank ("rank R (host H)").
  void watch(const std::vector<std::pair<int, std::string>>& peers) {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [rank, name] : peers) peers_.push_back({rank, name, "", std::chrono::steady_clock::now(), 0});
  }

  void done() override {
    if (stop_.exchange(true)) return;
    thread_.join();
    unlink(path_.c_str());
  }

 private:
  struct Peer {
    int rank;
    std::string name;
    std::string text;  // as last read
    std::chrono::steady_clock::time_point changed;
    int same_reads;  // since it changed
  };

  static std::string alive_path(const std::string& dir, int rank) { return dir + "/alive." + std::to_string(rank); }

  // The count, in place and of one width, so that a reader never sees the file empty.
  bool beat() {
    char text[64];
    const int n = std::snprintf(text, sizeof text, " %020llu\n", static_cast<unsigned long long>(beats_++));
    const std::string line = nonce_ + text;
    const int fd = open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = pwrite(fd, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size()) && n > 0;
    return close(fd) == 0 && ok;  // closed each time: another host sees it only then (NFS)
  }

  void run() {
    auto next = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      next += std::chrono::milliseconds(kBeatMs);
      while (!stop_.load() && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (stop_.load()) return;
      beat();  // a failed write is a silence the peers judge
      check_peers();
    }
  }

  void check_peers() {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < peers_.size();) {
      Peer& p = peers_[i];
      const std::string path = alive_path(dir_, p.rank);
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) {  // removed: that rank is set up
        peers_.erase(peers_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      char buf[128];
      const ssize_t got = fd < 0 ? -1 : read(fd, buf, sizeof buf);
      if (fd >= 0) close(fd);
      const std::string text = got > 0 ? std::string(buf, static_cast<size_t>(got)) : "";
      if (text != p.text) {
        p.text = text;
        p.changed = now;
        p.same_reads = 0;
      } else if (++p.same_reads >= kSilentReads && now - p.changed >= std::chrono::duration<double>(kSilentS)) {
        const double silent = std::chrono::duration<double>(now - p.changed).count();
        unlink(path.c_str());  // it will not remove it
        if (rank_ != 0 || world_ == 2) unlink(path_.c_str());  // no live rank watches this one
        end_for_lost_peer(prefix_, p.name, path + " unchanged for " + seconds_text(static_cast<int>(silent)) +
                                               " s: its process or its host ended");
      }
      ++i;
    }
  }

  const std::string path_, dir_;
  const int rank_, world_;
  const std::string nonce_, prefix_;
  unsigned long long beats_ = 0;
  std::mutex mutex_;
  std::vector<Peer> peers_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

RendezvousResult as_rank0(const std::string& dir, const RendezvousRequest& req) {
  const std::string where = "rendezvous at file " + dir + ": ";
  const auto fail = [&](const std::string& what) { throw std::runtime_error(req.prefix + where + what); };
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) fail("cannot create the directory: " + std::string(std::strerror(errno)));
  // A rank 0 still waiting there: a second process given RANK=0. Tell it
  // (rank0.claim), so that both end now naming each other.
  const auto refuse_if_rank0_waits = [&](const Fields& other) {
    if (!alive_here(other, req.host)) return;
    std::rename(write_temp(dir + "/rank0.claim", mine(req), req.prefix).c_str(), (dir + "/rank0.claim").c_str());
    fail("rank 0 is claimed by two processes: " + dir + "/rank0 is held by a live process (" + origin(other) + ")");
  };
  for (const std::string name : {"rank0", "go"}) {
    if (!exists(dir + "/" + name)) continue;
    const Fields other = read_fields(dir + "/" + name);
    if (name == "rank0") refuse_if_rank0_waits(other);
    fail("stale rendezvous file " + dir + "/" + name + " of an earlier job (" + origin(other) +
         "): remove it, or give this job a new directory");
  }
  for (int r = 1; r < req.world; ++r)
    if (exists(dir + "/rank" + std::to_string(r)) && read_fields(dir + "/rank" + std::to_string(r)).count("nonce") &&
        !exists(dir + "/rank0"))
      fail("stale rendezvous file " + dir + "/rank" + std::to_string(r) + " of an earlier job (" +
           origin(read_fields(dir + "/rank" + std::to_string(r))) + "): remove it, or give this job a new directory");
  std::random_device rd;
  const std::string nonce = std::to_string(rd()) + std::to_string(rd());
  Fields announce = mine(req);
  announce["nonce"] = nonce;
  announce["payload"] = hex(req.payload);
  const std::string rank0 = dir + "/rank0";
  const std::string tmp = write_temp(rank0, announce, req.prefix);
  const int linked = link(tmp.c_str(), rank0.c_str());  // exclusive: two rank 0s cannot both announce
  const int link_errno = errno;
  std::remove(tmp.c_str());
  if (linked != 0) {
    if (link_errno == EEXIST) refuse_if_rank0_waits(read_fields(rank0));
    fail("cannot write " + rank0 + ": " + std::strerror(link_errno));
  }

  const Deadline deadline(req.timeout_s);
  Waiting waiting(req, "rendezvous at file " + dir);
  const std::string go = dir + "/go";
  const auto wait_a_little = [&](const std::string& waiting_for) {
    try {
      waiting.check(waiting_for);
    } catch (const StopRequested&) {  // no file of this rank outlives it
      std::remove(go.c_str());
      std::remove(rank0.c_str());
      throw;
    }
    sleep_a_little();
  };
  std::vector<std::string> hosts(static_cast<size_t>(req.world));
  hosts[0] = req.host;
  std::string problem;  // a mismatch: ends the wait
  // A rank that cannot go on: the others are still waited for, so that every rank hears it.
  std::string cannot_start = req.problem.empty() ? "" : rdzv::cannot_start(0, req.host, req.problem);
  const std::string claim0 = dir + "/rank0.claim";  // a second process given RANK=0
  for (int r = 1; r < req.world && problem.empty(); ++r) {
    const std::string path = dir + "/rank" + std::to_string(r);
    while (!exists(path) && !exists(claim0) && deadline.left_ms() > 0)
      wait_a_little("rank " + std::to_string(r) + " (" + path + ")");
    if (exists(claim0)) {
      problem = "rank 0 is claimed by two processes: this one and " + origin(read_fields(claim0));
      std::remove(claim0.c_str());
      break;
    }
    if (!exists(path)) {
      std::string missing;
      for (int m = r; m < req.world; ++m)
        if (!exists(dir + "/rank" + std::to_string(m))) missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      problem = "rank(s) " + missing + " never came (no " + dir + "/rankN) within " + seconds_text(req.timeout_s) + " s";
      break;
    }
    const Fields claim = read_fields(path);
    const std::string who = "rank " + std::to_string(r) + " (" + origin(claim) + ")";
    if (claim.count("nonce") == 0 || claim.at("nonce") != nonce)
      problem = path + " is not from this rendezvous (a stale file of an earlier job? " + origin(claim) + ")";
    else if (claim.count("world") == 0 || claim.at("world") != std::to_string(req.world))
      problem = "world sizes disagree: " + who + " has " + (claim.count("world") ? claim.at("world") : "?") +
                ", rank 0 has " + std::to_string(req.world);
    else
      hosts[static_cast<size_t>(r)] = claim.count("host") ? claim.at("host") : "?";
    const std::string why = claim.count("problem") ? unhex(claim.at("problem")) : "";
    if (problem.empty() && !why.empty() && cannot_start.empty())
      cannot_start = rdzv::cannot_start(r, claim.count("host") ? claim.at("host") : "?", why);
  }
  if (problem.empty()) problem = cannot_start;
  std::shared_ptr<FileWatch> watch;  // before the verdict: a rank that reads ok may watch rank 0 at once
  if (problem.empty()) {
    try {
      watch = std::make_shared<FileWatch>(dir, 0, req.world, nonce, req.prefix);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  Fields verdict{{"nonce", nonce}, {"status", problem.empty() ? "ok" : "error"}, {"message", problem}};
  verdict["hosts"] = hex(encode_hosts(hosts));
  const std::string go_tmp = write_temp(go, verdict, req.prefix);
  std::rename(go_tmp.c_str(), go.c_str());
  // The others remove their claims once they read go; then rank0 and go go too.
  const Deadline cleanup(problem.empty() ? std::max(5.0, deadline.left_ms() / 1000.0) : 3.0);
  for (int r = 1; r < req.world; ++r)
    while (exists(dir + "/rank" + std::to_string(r)) && cleanup.left_ms() > 0)
      wait_a_little("rank " + std::to_string(r) + " to read " + go);
  std::remove(go.c_str());
  std::remove(rank0.c_str());
  if (!problem.empty()) {
    for (int r = 1; r < req.world; ++r) std::remove((dir + "/rank" + std::to_string(r)).c_str());
    fail(problem);
  }
  std::vector<std::pair<int, std::string>> peers;
  for (int r = 1; r < req.world; ++r) peers.emplace_back(r, rank_on_host(r, hosts[static_cast<size_t>(r)]));
  watch->watch(peers);
  return {req.payload, hosts, watch};
}

RendezvousResult as_other(const std::string& dir, const RendezvousRequest& req) {
  const std::string where = "rendezvous at file " + dir + ": ";
  const auto fail = [&](const std::string& what) { throw std::runtime_error(req.prefix + where + what); };
  const Deadline deadline(req.timeout_s);
  Waiting waiting(req, "rendezvous at file " + dir);
  const std::string rank0 = dir + "/rank0";
  while (!exists(rank0) && deadline.left_ms() > 0) {
    waiting.check("rank 0 (" + rank0 + ")");
    sleep_a_little();
  }
  if (!exists(rank0))
    fail("rank 0 never came: no " + rank0 + " within " + seconds_text(req.timeout_s) + " s");
  const Fields announce = read_fields(rank0);
  const std::string their_job = announce.count("job") ? announce.at("job") : "";
  if (their_job != req.job_id)
    fail("stale rendezvous file " + rank0 + " (" + origin(announce) + "): it is of job '" + their_job +
         "', this is job '" + req.job_id + "'; remove it, or give this job a new directory");
  const std::string nonce = announce.count("nonce") ? announce.at("nonce") : "";
  Fields claim = mine(req);
  claim["nonce"] = nonce;
  const std::string path = dir + "/rank" + std::to_string(req.rank);
  const std::string tmp = write_temp(path, claim, req.prefix);
  const int linked = link(tmp.c_str(), path.c_str());
  const int link_errno = errno;
  std::remove(tmp.c_str());
  if (linked != 0) {
    const Fields other = read_fields(path);
    if (link_errno == EEXIST)
      fail("rank " + std::to_string(req.rank) + " is claimed by two processes: " + path + " already exists (" +
           origin(other) + (other.count("nonce") && other.at("nonce") != nonce ? "; a stale file of an earlier job" : "") +
           ")");
    fail("cannot write " + path + ": " + std::strerror(link_errno));
  }
  // After the claim, which only one process of this rank makes; before rank 0
  // can see the claim gone and start watching.
  std::shared_ptr<FileWatch> watch;
  try {
    watch = std::make_shared<FileWatch>(dir, req.rank, req.world, nonce, req.prefix);
  } catch (...) {
    std::remove(path.c_str());
    throw;
  }
  const std::string their_world = announce.count("world") ? announce.at("world") : "?";
  if (their_world != std::to_string(req.world))
    fail("world sizes disagree: rank 0 (" + origin(announce) + ") has " + their_world + ", this rank has " +
         std::to_string(req.world));
  const std::string go = dir + "/go";
  Fields verdict;
  while (deadline.left_ms() > 0) {
    verdict = read_fields(go);
    if (verdict.count("nonce") && verdict.at("nonce") == nonce) break;
    try {
      waiting.check("rank 0's verdict (" + go + ")");
    } catch (const StopRequested&) {  // no file of this rank outlives it
      std::remove(path.c_str());
      throw;
    }
    sleep_a_little();
  }
  std::remove(path.c_str());
  if (!verdict.count("nonce") || verdict.at("nonce") != nonce)
    fail("rank 0 (" + origin(announce) + ") did not confirm within " + seconds_text(req.timeout_s) +
         " s (no " + go + "; a stale " + rank0 + " of an earlier job?)");
  if (verdict["status"] != "ok") throw std::runtime_error(req.prefix + "rank 0 refused the rendezvous: " + verdict["message"]);
  std::vector<std::string> hosts = decode_hosts(unhex(verdict["hosts"]));
  watch->watch({{0, rank_on_host(0, hosts.empty() ? "?" : hosts[0])}});
  return {unhex(announce.count("payload") ? announce.at("payload") : ""), hosts, watch};
}

}  // namespace

RendezvousResult file_rendezvous(const RendezvousSpec& spec, const RendezvousRequest& req) {
  return req.rank == 0 ? as_rank0(spec.dir, req) : as_other(spec.dir, req);
}

}  // namespace rdzv
}  // namespace gpt2

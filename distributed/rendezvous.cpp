// TCP rendezvous (distributed/rendezvous.h). Rank 0 accepts one connection per
// other rank; each sends a Hello (rank, world, job, host, and why it cannot go
// on, if it cannot), rank 0 checks them all
// and answers every connection with one Reply: ok + payload + hosts, or the
// error, so a mismatch fails on every rank that came, not just on rank 0.
// The file variant is in rendezvous_file.cpp.
#include "distributed/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

#include "distributed/preempt.h"
#include "distributed/rendezvous_internal.h"

namespace gpt2 {
namespace rdzv {

Deadline::Deadline(double seconds)
    : end_(std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                  std::chrono::duration<double>(seconds))) {}

int Deadline::left_ms() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

Waiting::Waiting(const RendezvousRequest& req, std::string where)
    : req_(req),
      where_(std::move(where)),
      start_(std::chrono::steady_clock::now()),
      next_note_(start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(req.progress_every_s))) {}

void Waiting::check(const std::string& waiting_for) {
  throw_if_local_stop();
  const auto now = std::chrono::steady_clock::now();
  if (now < next_note_) return;
  const double waited = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "%s%s: waiting for %s (%.0f s of %s s)\n", req_.prefix.c_str(), where_.c_str(),
               waiting_for.c_str(), waited, seconds_text(req_.timeout_s).c_str());
  std::fflush(stderr);
  next_note_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(req_.progress_every_s));
}

std::string rank_on_host(int rank, const std::string& host) {
  return "rank " + std::to_string(rank) + " (host " + host + ")";
}

std::string cannot_start(int rank, const std::string& host, const std::string& why) {
  return rank_on_host(rank, host) + " cannot start: " + why;
}

void end_for_lost_peer(const std::string& prefix, const std::string& peer, const std::string& how) {
  // A job stopped as a whole signals every rank at about the same time, and a
  // peer may end on its signal before this rank's arrives: a stop that comes
  // within the grace ends this rank as stopped (128 + signal), not as failed.
  constexpr int kStopGraceMs = 500, kPollMs = 10;
  for (int waited = 0; waited <= kStopGraceMs; waited += kPollMs) {
    if (const int stop = local_stop_signal()) {
      std::fprintf(stderr, "error: %sstop requested by signal %d during the communicator's set-up (%s ended too); exiting\n",
                   prefix.c_str(), stop, peer.c_str());
      std::fflush(stderr);
      std::_Exit(stopped_exit_code(stop));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
  }
  std::fprintf(stderr, "error: %s%s ended before the communicator's set-up was done (%s); exiting\n", prefix.c_str(),
               peer.c_str(), how.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

std::string encode_hosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += h + '\n';
  return out;
}

std::vector<std::string> decode_hosts(const std::string& text) {
  std::vector<std::string> hosts;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) hosts.push_back(text.substr(pos, nl - pos));
  return hosts;
}

}  // namespace rdzv

namespace {

using rdzv::Deadline;
using rdzv::kWaitSliceMs;
using rdzv::Waiting;

constexpr char kMagic[8] = {'G', 'P', 'T', '2', 'R', 'D', 'V', '2'};
// rank 0's payload (a communicator id) or its error message
constexpr uint32_t kMaxReplyText = 1u << 16;

// Fixed-size, so one read decides; strings are NUL-padded.
struct Hello {
  char magic[8];
  int32_t rank;
  int32_t world;
  char job[64];
  char host[64];
  char problem[256];  // empty: this rank can go on
};

void copy_text(char* dst, size_t n, const std::string& src) {
  std::memset(dst, 0, n);
  std::memcpy(dst, src.data(), std::min(n - 1, src.size()));
}

std::string text_of(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Reads or writes exactly n bytes before the deadline; false on EOF, error or
// time. With `waiting`, a stop signal ends it (StopRequested).
bool transfer(int fd, void* buf, size_t n, const Deadline& deadline, bool writing, Waiting* waiting = nullptr,
              const std::string& waiting_for = "") {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    if (waiting) waiting->check(waiting_for);
    pollfd pfd{fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0};
    const int ready = poll(&pfd, 1, std::min(deadline.left_ms(), kWaitSliceMs));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && deadline.left_ms() > 0) continue;
    if (ready <= 0) return false;
    const ssize_t got = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// Reply: status (0 ok, 1 error), then a length-prefixed text (ok: payload, hosts).
bool send_reply(int fd, bool ok, const std::string& a, const std::string& b, const Deadline& d) {
  uint32_t head[3] = {ok ? 0u : 1u, static_cast<uint32_t>(a.size()), static_cast<uint32_t>(b.size())};
  return transfer(fd, head, sizeof head, d, true) && transfer(fd, const_cast<char*>(a.data()), a.size(), d, true) &&
         transfer(fd, const_cast<char*>(b.data()), b.size(), d, true);
}

std::string errno_text(int e) { return std::strerror(e); }

// Rank 0's refusal of this rank, as join() reports it.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

RendezvousResult join(const RendezvousSpec& spec, const RendezvousRequest& req);

// The TCP watch (SetUpWatch): one byte on each connection says "my set-up is
// done"; the end of a connection without it is a peer whose process ended.
class SocketWatch final : public SetUpWatch {
 public:
  SocketWatch(std::vector<int> fds, std::vector<std::string> peers, std::string prefix)
      : fds_(std::move(fds)), peers_(std::move(peers)), prefix_(std::move(prefix)) {
    thread_ = std::thread([this] { watch(); });
  }
  ~SocketWatch() override { done(); }
  SocketWatch(const SocketWatch&) = delete;
  SocketWatch& operator=(const SocketWatch&) = delete;

  void done() override {
    if (stop_.exchange(true)) return;
    thread_.join();
    for (int fd : fds_) {
      send(fd, &kSetUpDone, 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // a peer already gone needs no word
      close(fd);
    }
  }

 private:
  static constexpr char kSetUpDone = 'D';

  void watch() {
    std::vector<bool> finished(fds_.size(), false);
    size_t left = fds_.size();
    while (!stop_.load() && left > 0) {
      std::vector<pollfd> pfds;
      std::vector<size_t> index;
      for (size_t i = 0; i < fds_.size(); ++i)
        if (!finished[i]) pfds.push_back({fds_[i], POLLIN, 0}), index.push_back(i);
      if (poll(pfds.data(), pfds.size(), 200) <= 0) continue;
      for (size_t k = 0; k < pfds.size(); ++k) {
        if (pfds[k].revents == 0) continue;
        char byte = 0;
        const ssize_t got = recv(pfds[k].fd, &byte, 1, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got == 1 && byte == kSetUpDone) {
          finished[index[k]] = true;
          --left;
          continue;
        }
        if (stop_.load()) return;
        rdzv::end_for_lost_peer(prefix_, peers_[index[k]], "its process exited");
      }
    }
  }

  std::vector<int> fds_;
  std::vector<std::string> peers_;  // "rank 1 (host b)", by fd
  std::string prefix_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Rank 0 finds its port taken. When the taker is a rank 0 of this program (a
// second process given RANK=0), joining it as rank 0 makes it refuse both of
// them, each naming the other; anything else on the port is reported as it is.
void refuse_if_rank0_serves_there(const RendezvousSpec& spec, const RendezvousRequest& req) {
  RendezvousRequest probe = req;
  probe.timeout_s = std::min(2.0, req.timeout_s);
  try {
    join(spec, probe);
  } catch (const Refused&) {
    throw;
  } catch (const std::exception&) {  // not one of ours: the caller says the port is in use
  }
}

// Rank 0: listen, collect world-1 hellos, check, answer.
RendezvousResult serve(const RendezvousSpec& spec, const RendezvousRequest& req) {
  const std::string where = "rendezvous at tcp " + spec.host + ":" + std::to_string(spec.port);
  const auto fail = [&](const std::string& what) { throw std::runtime_error(req.prefix + where + ": " + what); };
  Fd listener(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = listener.get() >= 0;
  if (!v6) listener = Fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) fail("socket failed: " + errno_text(errno));
  const int one = 1, zero = 0;
  setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a closed job's TIME_WAIT only
  int rc;
  if (v6) {
    setsockopt(listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 peers too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(spec.port));
    rc = bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(spec.port));
    rc = bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc == 0 && listen(listener.get(), 128) != 0) rc = -1;  // a port bound, not yet listened on, is taken too
  if (rc != 0) {
    const int e = errno;
    if (e == EADDRINUSE) refuse_if_rank0_serves_there(spec, req);
    fail("rank 0 cannot listen on port " + std::to_string(spec.port) + ": " + errno_text(e) +
         (e == EADDRINUSE ? " (another job or program uses it: choose another MASTER_PORT)" : ""));
  }

  const Deadline deadline(req.timeout_s);
  std::vector<Fd> peers;                          // every connection that said hello
  std::vector<std::string> peer_names;            // "rank R (host H)" of each
  std::vector<std::string> hosts(static_cast<size_t>(req.world));
  std::vector<bool> seen(static_cast<size_t>(req.world), false);
  hosts[0] = req.host;
  seen[0] = true;
  int joined = 1;
  std::string problem;  // a mismatch: ends the wait
  // A rank that cannot go on: the others are still waited for, so that every
  // rank hears it.
  std::string cannot_start = req.problem.empty() ? "" : rdzv::cannot_start(0, req.host, req.problem);
  const auto missing = [&] {
    std::string m;
    for (int r = 0; r < req.world; ++r)
      if (!seen[static_cast<size_t>(r)]) m += (m.empty() ? "" : ", ") + std::to_string(r);
    return "rank(s) " + m + " of " + std::to_string(req.world);
  };
  Waiting waiting(req, where);
  while (joined < req.world && problem.empty()) {
    waiting.check(missing());
    pollfd pfd{listener.get(), POLLIN, 0};
    const int ready = poll(&pfd, 1, std::min(deadline.left_ms(), kWaitSliceMs));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && deadline.left_ms() > 0) continue;
    if (ready <= 0) {
      problem = missing() + " never came within " + rdzv::seconds_text(req.timeout_s) + " s";
      break;
    }
    Fd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    Hello h{};
    const Deadline hello_deadline(std::min(5.0, deadline.left_ms() / 1000.0));
    if (!transfer(conn.get(), &h, sizeof h, hello_deadline, false) || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
      continue;  // not one of ours (a port scan, a health check)
    const std::string host = text_of(h.host, sizeof h.host), job = text_of(h.job, sizeof h.job);
    const std::string who = rdzv::rank_on_host(h.rank, host);
    if (h.world != req.world)
      problem = "world sizes disagree: " + who + " has " + std::to_string(h.world) + ", rank 0 has " +
                std::to_string(req.world);
    else if (job != req.job_id)
      problem = who + " belongs to job '" + job + "', rank 0 to job '" + req.job_id + "'";
    else if (h.rank == 0)
      problem = "rank 0 is claimed by two processes (hosts " + req.host + " and " + host + ")";
    else if (h.rank < 0 || h.rank >= req.world)
      problem = who + " is outside a world of " + std::to_string(req.world);
    else if (seen[static_cast<size_t>(h.rank)])
      problem = "rank " + std::to_string(h.rank) + " is claimed by two processes (hosts " +
                hosts[static_cast<size_t>(h.rank)] + " and " + host + ")";
    else {
      seen[static_cast<size_t>(h.rank)] = true;
      hosts[static_cast<size_t>(h.rank)] = host;
      ++joined;
      const std::string why = text_of(h.problem, sizeof h.problem);
      if (!why.empty() && cannot_start.empty()) cannot_start = rdzv::cannot_start(h.rank, host, why);
    }
    peers.push_back(std::move(conn));
    peer_names.push_back(who);
  }
  if (problem.empty()) problem = cannot_start;
  const Deadline reply_deadline(5.0);
  for (const Fd& p : peers)
    send_reply(p.get(), problem.empty(), problem.empty() ? req.payload : req.prefix + where + ": " + problem,
               problem.empty() ? rdzv::encode_hosts(hosts) : "", reply_deadline);
  if (!problem.empty()) fail(problem);
  std::vector<int> fds;
  for (Fd& p : peers) fds.push_back(p.release());
  return {req.payload, hosts, std::make_shared<SocketWatch>(std::move(fds), std::move(peer_names), req.prefix)};
}

// One attempt to connect before the deadline; "" on success, else why not.
std::string try_connect(const addrinfo* ai, const Deadline& deadline, Fd* out) {
  Fd fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
  if (fd.get() < 0) return "socket: " + errno_text(errno);
  if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return errno_text(errno);
    pollfd pfd{fd.get(), POLLOUT, 0};
    const int ready = poll(&pfd, 1, std::min(deadline.left_ms(), 2000));
    if (ready <= 0) return "no answer (connect timed out)";
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return errno_text(err);
  }
  *out = std::move(fd);
  return {};
}

// Ranks 1..W-1: connect (retrying while rank 0 is not up), hello, reply.
RendezvousResult join(const RendezvousSpec& spec, const RendezvousRequest& req) {
  const std::string where = "rendezvous at tcp " + spec.host + ":" + std::to_string(spec.port);
  const auto fail = [&](const std::string& what) { throw std::runtime_error(req.prefix + where + ": " + what); };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int g = getaddrinfo(spec.host.c_str(), std::to_string(spec.port).c_str(), &hints, &found);
  if (g != 0) fail("cannot resolve the address '" + spec.host + "': " + gai_strerror(g));
  const Deadline deadline(req.timeout_s);
  Waiting waiting(req, where);
  Fd conn;
  std::string last;
  while (conn.get() < 0) {
    try {
      waiting.check("rank 0");
    } catch (...) {
      freeaddrinfo(found);
      throw;
    }
    for (const addrinfo* ai = found; ai != nullptr && conn.get() < 0; ai = ai->ai_next)
      last = try_connect(ai, deadline, &conn);
    if (conn.get() >= 0) break;
    if (deadline.left_ms() == 0) {
      freeaddrinfo(found);
      fail("rank 0 never came: nothing answered within " + rdzv::seconds_text(req.timeout_s) +
           " s (last attempt: " + last + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(200, deadline.left_ms())));
  }
  freeaddrinfo(found);
  Hello h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.rank = req.rank;
  h.world = req.world;
  copy_text(h.job, sizeof h.job, req.job_id);
  copy_text(h.host, sizeof h.host, req.host);
  copy_text(h.problem, sizeof h.problem, req.problem);
  uint32_t head[3] = {};
  if (!transfer(conn.get(), &h, sizeof h, deadline, true) ||
      !transfer(conn.get(), head, sizeof head, deadline, false, &waiting, "rank 0's answer (rank 0 waits for the others)"))
    fail("rank 0 did not answer within " + rdzv::seconds_text(req.timeout_s) +
         " s (it may be waiting for other ranks, or be another program)");
  // Checked before anything is allocated: whatever answers on the port cannot
  // make this rank reserve more than a reply of rank 0's can hold.
  const size_t host_text_most = static_cast<size_t>(req.world) * (sizeof h.host + 1);
  if (head[0] > 1 || head[1] > kMaxReplyText || head[2] > host_text_most)
    fail("what answers on the port is not rank 0 of this program (a reply header of status " +
         std::to_string(head[0]) + ", " + std::to_string(head[1]) + " + " + std::to_string(head[2]) +
         " bytes; at most 1, " + std::to_string(kMaxReplyText) + " + " + std::to_string(host_text_most) + ")");
  std::string a(head[1], '\0'), b(head[2], '\0');
  if (!transfer(conn.get(), &a[0], a.size(), deadline, false) || !transfer(conn.get(), &b[0], b.size(), deadline, false))
    fail("the connection to rank 0 broke during the reply");
  if (head[0] != 0) throw Refused(req.prefix + "rank 0 refused the rendezvous: " + a);
  std::vector<std::string> hosts = rdzv::decode_hosts(b);
  const std::string rank0 = rdzv::rank_on_host(0, hosts.empty() ? "?" : hosts[0]);
  return {a, hosts, std::make_shared<SocketWatch>(std::vector<int>{conn.release()}, std::vector<std::string>{rank0},
                                                  req.prefix)};
}

}  // namespace

std::string RendezvousSpec::describe() const {
  return kind == Kind::kFile ? "file " + dir : "tcp " + host + ":" + std::to_string(port);
}

RendezvousSpec parse_rendezvous(const std::string& value, const std::string& master_addr, int master_port) {
  RendezvousSpec spec;
  if (value.empty() || value == "tcp") {
    spec.host = master_addr;
    spec.port = master_port;
  } else if (value.compare(0, 5, "file:") == 0) {
    spec.kind = RendezvousSpec::Kind::kFile;
    spec.dir = value.substr(5);
    if (spec.dir.empty()) throw std::runtime_error("--rendezvous '" + value + "': file: needs a directory");
  } else if (value.compare(0, 4, "tcp:") == 0) {
    const size_t colon = value.rfind(':');
    spec.host = value.substr(4, colon > 4 ? colon - 4 : 0);
    char* end = nullptr;
    const long port = std::strtol(value.c_str() + colon + 1, &end, 10);
    if (colon <= 4 || spec.host.empty() || *end != '\0' || port < 1 || port > 65535)
      throw std::runtime_error("--rendezvous '" + value + "': want tcp:HOST:PORT with a port 1-65535");
    spec.port = static_cast<int>(port);
  } else {
    throw std::runtime_error("--rendezvous '" + value + "': want tcp, tcp:HOST:PORT or file:DIR");
  }
  return spec;
}

RendezvousResult rendezvous(const RendezvousSpec& spec, const RendezvousRequest& req) {
  if (req.world == 1) {
    if (!req.problem.empty()) throw std::runtime_error(req.prefix + req.problem);
    return {req.payload, {req.host}};
  }
  if (spec.kind == RendezvousSpec::Kind::kFile) return rdzv::file_rendezvous(spec, req);
  return req.rank == 0 ? serve(spec, req) : join(spec, req);
}

}  // namespace gpt2

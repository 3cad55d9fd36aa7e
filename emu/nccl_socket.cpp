#include "emu/nccl_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>

#include "emu/nccl_internal.h"

namespace gpt2 {
namespace emu {
namespace {

constexpr char kMagic[8] = {'E', 'M', 'U', 'S', 'O', 'C', 'K', '1'};

// "\0gpt2-emu-nccl-<hex of the id's random bytes>": an abstract socket address.
sockaddr_un address_of(const ncclUniqueId& id, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = "gpt2-emu-nccl-";
  static const char* digits = "0123456789abcdef";
  for (size_t i = sizeof kMagic; i < sizeof kMagic + 24; ++i) {
    const auto c = static_cast<unsigned char>(id.internal[i]);
    name += digits[c >> 4];
    name += digits[c & 15];
  }
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

bool full(int fd, void* buf, size_t n, bool writing) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = writing ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

struct Hello {
  int32_t rank, nranks;
};

}  // namespace

void make_socket_unique_id(ncclUniqueId* id) {
  std::random_device rd;
  for (size_t i = 0; i < sizeof id->internal; ++i) id->internal[i] = static_cast<char>(rd() & 0xFF);
  std::memcpy(id->internal, kMagic, sizeof kMagic);
}

bool is_socket_unique_id(const ncclUniqueId& id) { return std::memcmp(id.internal, kMagic, sizeof kMagic) == 0; }

SocketGroup::~SocketGroup() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

std::unique_ptr<SocketGroup> SocketGroup::connect(const ncclUniqueId& id, int rank, int nranks, double timeout_s,
                                                  std::string* error) {
  std::unique_ptr<SocketGroup> g(new SocketGroup(rank, nranks));
  socklen_t len = 0;
  const sockaddr_un addr = address_of(id, &len);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  const auto left_ms = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return ms.count() < 0 ? 0 : static_cast<int>(ms.count());
  };
  if (nranks == 1) return g;
  if (rank != 0) {
    for (;;) {
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
        g->fds_.push_back(fd);
        break;
      }
      close(fd);
      if (left_ms() == 0) {
        *error = "ncclCommInitRank: rank 0 of the emulated communicator never came (socket transport)";
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Hello h{rank, nranks};
    int32_t verdict = 0;
    if (!full(g->fds_[0], &h, sizeof h, true) || !full(g->fds_[0], &verdict, sizeof verdict, false) || verdict != 0) {
      *error = "ncclCommInitRank: rank 0 refused rank " + std::to_string(rank) + " of nranks " +
               std::to_string(nranks) + " (another process has this rank, or nranks disagree)";
      return nullptr;
    }
    return g;
  }
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || listen(listener, 128) != 0) {
    *error = "ncclCommInitRank: cannot listen on the emulated socket: " + std::string(std::strerror(errno));
    close(listener);
    return nullptr;
  }
  g->fds_.assign(static_cast<size_t>(nranks), -1);
  int joined = 1;
  std::string problem;
  std::vector<int> refused;
  while (joined < nranks && problem.empty()) {
    pollfd p{listener, POLLIN, 0};
    const int ready = poll(&p, 1, left_ms());
    if (ready < 0 && errno == EINTR) continue;  // a signal is not a timeout: the caller decides
    if (ready <= 0) {
      problem = "ncclCommInitRank: only " + std::to_string(joined) + " of " + std::to_string(nranks) +
                " ranks came within " + std::to_string(static_cast<int>(timeout_s)) + " s (socket transport)";
      break;
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello h{};
    if (!full(fd, &h, sizeof h, false)) {
      close(fd);
      continue;
    }
    if (h.nranks != nranks || h.rank <= 0 || h.rank >= nranks || g->fds_[static_cast<size_t>(h.rank)] >= 0) {
      problem = "ncclCommInitRank: rank " + std::to_string(h.rank) + " with nranks " + std::to_string(h.nranks) +
                " does not fit rank 0's nranks " + std::to_string(nranks) + " (or two processes passed that rank)";
      refused.push_back(fd);
      break;
    }
    g->fds_[static_cast<size_t>(h.rank)] = fd;
    ++joined;
  }
  close(listener);
  for (size_t r = 1; r < g->fds_.size(); ++r) {
    int32_t verdict = problem.empty() ? 0 : 1;
    if (g->fds_[r] >= 0) full(g->fds_[r], &verdict, sizeof verdict, true);
  }
  for (int fd : refused) {
    int32_t verdict = 1;
    full(fd, &verdict, sizeof verdict, true);
    close(fd);
  }
  if (!problem.empty()) {
    *error = problem;
    return nullptr;
  }
  return g;
}

bool SocketGroup::all_gather(const void* mine, size_t bytes, void* all, std::string* error) {
  unsigned char* out = static_cast<unsigned char*>(all);
  std::memcpy(out + static_cast<size_t>(rank_) * bytes, mine, bytes);
  if (nranks_ == 1) return true;
  const auto gone = [&](int peer) {
    *error = "socket transport: rank " + std::to_string(peer) + " is gone (its process exited or closed the "
             "connection)";
    return false;
  };
  if (rank_ != 0)  // send mine, receive everyone's
    return full(fds_[0], const_cast<void*>(mine), bytes, true) &&
                   full(fds_[0], out, static_cast<size_t>(nranks_) * bytes, false)
               ? true
               : gone(0);
  for (int r = 1; r < nranks_; ++r)
    if (!full(fds_[static_cast<size_t>(r)], out + static_cast<size_t>(r) * bytes, bytes, false)) return gone(r);
  for (int r = 1; r < nranks_; ++r)
    if (!full(fds_[static_cast<size_t>(r)], out, static_cast<size_t>(nranks_) * bytes, true)) return gone(r);
  return true;
}

}  // namespace emu
}  // namespace gpt2

// ---- the transport of emu/nccl.cpp's collectives (emu/nccl_internal.h) --------------------------
namespace gpt2 {
namespace emu {
namespace {
constexpr int kSocketFailed = -1;  // not an MPI error code: the text is in transport_error

int socket_all_gather(ncclComm& c, const void* mine, size_t bytes, void* all) {
  return c.sockets->all_gather(mine, bytes, all, &c.transport_error) ? MPI_SUCCESS : kSocketFailed;
}
}  // namespace

int transport_all_gather(ncclComm& c, const void* mine, size_t bytes, void* all) {
  if (c.sockets) return socket_all_gather(c, mine, bytes, all);
  return MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, c.mpi);
}

// The socket transport has only an all-gather: every rank's whole packed
// buffer travels (the emulator's traffic, not NCCL's), and each keeps its blocks.
int transport_all_to_all(ncclComm& c, const void* packed, size_t block, void* all) {
  if (!c.sockets)
    return MPI_Alltoall(packed, static_cast<int>(block), MPI_BYTE, all, static_cast<int>(block), MPI_BYTE, c.mpi);
  const size_t n = static_cast<size_t>(c.nranks), row = n * block;
  std::vector<unsigned char> every(n * row);
  const int rc = socket_all_gather(c, packed, row, every.data());
  if (rc != MPI_SUCCESS) return rc;
  for (size_t s = 0; s < n; ++s)
    std::memcpy(static_cast<unsigned char*>(all) + s * block, every.data() + s * row + static_cast<size_t>(c.rank) * block,
                block);
  return MPI_SUCCESS;
}

int transport_gather(ncclComm& c, const void* mine, size_t bytes, void* all, int root) {
  if (!c.sockets)
    return MPI_Gather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, root, c.mpi);
  std::vector<unsigned char> every(static_cast<size_t>(c.nranks) * bytes);
  const int rc = socket_all_gather(c, mine, bytes, every.data());
  if (rc == MPI_SUCCESS && c.rank == root) std::memcpy(all, every.data(), every.size());
  return rc;
}

int transport_broadcast(ncclComm& c, void* buf, size_t bytes, int root) {
  if (!c.sockets) return MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, c.mpi);
  std::vector<unsigned char> every(static_cast<size_t>(c.nranks) * bytes);
  const int rc = socket_all_gather(c, buf, bytes, every.data());
  if (rc == MPI_SUCCESS) std::memcpy(buf, every.data() + static_cast<size_t>(root) * bytes, bytes);
  return rc;
}

std::string transport_error_text(const ncclComm& c, int rc) {
  if (rc == kSocketFailed) return c.transport_error;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return "MPI error: " + std::string(text, len);
}

}  // namespace emu
}  // namespace gpt2

// Shared by the two rendezvous transports (rendezvous.cpp: TCP, rendezvous_file.cpp).
#ifndef DISTRIBUTED_RENDEZVOUS_INTERNAL_H
#define DISTRIBUTED_RENDEZVOUS_INTERNAL_H

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "distributed/rendezvous.h"

namespace gpt2 {
namespace rdzv {

// A point on the monotonic clock `seconds` from construction.
class Deadline {
 public:
  explicit Deadline(double seconds);
  int left_ms() const;  // 0 once passed

 private:
  std::chrono::steady_clock::time_point end_;
};

std::string seconds_text(double s);

// The longest a wait sleeps or polls between its checks.
constexpr int kWaitSliceMs = 200;

// A wait of a rendezvous: check() throws StopRequested once a stop signal is
// recorded, and every progress_every_s prints to stderr what the rank waits for.
class Waiting {
 public:
  Waiting(const RendezvousRequest& req, std::string where);
  void check(const std::string& waiting_for);

 private:
  const RendezvousRequest& req_;
  const std::string where_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point next_note_;
};
// "rank R (host H)": a rank as every rendezvous message names it.
std::string rank_on_host(int rank, const std::string& host);
// "rank R (host H) cannot start: WHY", what every rank hears of a rank that
// came but cannot go on.
std::string cannot_start(int rank, const std::string& host, const std::string& why);

// Ends the process (exit 1) for a peer that ended before its set-up was done,
// naming it and how that showed; as stopped (128 + signal) when this rank's
// own stop signal comes within half a second.
[[noreturn]] void end_for_lost_peer(const std::string& prefix, const std::string& peer, const std::string& how);

// Host names one per line, and back.
std::string encode_hosts(const std::vector<std::string>& hosts);
std::vector<std::string> decode_hosts(const std::string& text);

RendezvousResult file_rendezvous(const RendezvousSpec& spec, const RendezvousRequest& req);

}  // namespace rdzv
}  // namespace gpt2

#endif  // DISTRIBUTED_RENDEZVOUS_INTERNAL_H

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
// Host names one per line, and back.
std::string encode_hosts(const std::vector<std::string>& hosts);
std::vector<std::string> decode_hosts(const std::string& text);

RendezvousResult file_rendezvous(const RendezvousSpec& spec, const RendezvousRequest& req);

}  // namespace rdzv
}  // namespace gpt2

#endif  // DISTRIBUTED_RENDEZVOUS_INTERNAL_H

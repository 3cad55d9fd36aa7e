// Rendezvous without MPI: the ranks of a torchrun- or
// srun --mpi=none-launched job find each other and receive rank 0's payload
// (the NCCL unique id) over one of
//   tcp:HOST:PORT  rank 0 listens on PORT (all interfaces), the others connect to
//                  HOST:PORT (MASTER_ADDR:MASTER_PORT by default);
//   file:DIR       files in DIR on a file system every rank sees, for clusters
//                  whose nodes cannot open ports to each other.
// Every failure is a std::runtime_error within the timeout, starting with the
// rank prefix and naming the address or path: rank 0 never comes, an address
// that does not resolve or answer, a port in use, two processes claiming one
// rank, world sizes that disagree, a file left by an earlier job. A stop signal
// (distributed/preempt.h) ends every wait within a fraction of a second with
// StopRequested, the rank's own rendezvous files removed; a rank still waiting
// says every progress_every_s what it waits for.
#ifndef DISTRIBUTED_RENDEZVOUS_H
#define DISTRIBUTED_RENDEZVOUS_H

#include <memory>
#include <string>
#include <vector>

namespace gpt2 {

struct RendezvousSpec {
  enum class Kind { kTcp, kFile };
  Kind kind = Kind::kTcp;
  std::string host;  // tcp: where rank 0 is
  int port = 0;      // tcp
  std::string dir;   // file
  std::string describe() const;  // "tcp 10.0.0.1:29500", "file /shared/rdzv"
};

// --rendezvous's value: "" or "tcp" (MASTER_ADDR:MASTER_PORT as given), "tcp:HOST:PORT",
// "file:DIR". Throws naming the value.
RendezvousSpec parse_rendezvous(const std::string& value, const std::string& master_addr, int master_port);

struct RendezvousRequest {
  int rank = 0;
  int world = 1;
  std::string job_id;   // launcher's job id ("" if none): files of another job are stale
  std::string payload;  // rank 0's bytes for every rank (others: ignored)
  // Why this rank cannot go on ("": it can). It still comes, and the
  // rendezvous fails on every rank naming it (the first such rank's).
  std::string problem;
  std::string host;     // this process's host name, for messages
  std::string prefix;   // "rank R/W (host): "
  double timeout_s = 300;
  double progress_every_s = 30;
};

// The rendezvous's peers, watched through the communicator's set-up (NCCL's
// init cannot notice a peer whose process ended): a thread watches them, and
// a peer that ends before telling its set-up is done ends this process within
// seconds, naming it (exit 1). Rank 0 watches every rank, the others rank 0.
// done() tells the peers and stops watching; so does the destructor.
//   tcp:  the rendezvous's connections stay open; a peer's end is their EOF
//         (within a second);
//   file: each rank rewrites its heartbeat file DIR/alive.R; one that stops
//         changing is a peer whose process (or host) ended (within seconds).
class SetUpWatch {
 public:
  virtual ~SetUpWatch() = default;
  virtual void done() = 0;
};

struct RendezvousResult {
  std::string payload;             // rank 0's
  std::vector<std::string> hosts;  // every rank's host name, by rank
  std::shared_ptr<SetUpWatch> watch;  // at world > 1; else empty
};

// Collective over the `world` processes: blocks until all have come or fails
// within about timeout_s.
RendezvousResult rendezvous(const RendezvousSpec& spec, const RendezvousRequest& request);

}  // namespace gpt2

#endif  // DISTRIBUTED_RENDEZVOUS_H

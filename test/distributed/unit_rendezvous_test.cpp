// Rank discovery (distributed/env_launch.h) on synthetic environments, and the
// rendezvous (distributed/rendezvous.h) between threads of this process over
// loopback TCP and a temporary directory: the payload reaches every rank, and
// every failure listed in distributed/rendezvous.h is an error naming the
// address or path and the rank, within the timeout.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/env_launch.h"
#include "distributed/preempt.h"
#include "distributed/rendezvous.h"
#include "test/temp_dir.h"

namespace gpt2 {
namespace {

TEST(EnvLaunch, TorchrunVariables) {
  const EnvLaunch l = discover_env_launch({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                                           {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node1"},
                                           {"MASTER_PORT", "29511"}, {"TORCHELASTIC_RUN_ID", "abc"}});
  EXPECT_EQ(l.source, RankSource::kTorchrun);
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world, 2);
  EXPECT_EQ(l.node, 1);
  EXPECT_EQ(l.num_nodes, 2);
  EXPECT_EQ(l.master_addr, "node1");
  EXPECT_EQ(l.master_port, 29512);  // torchrun's agent holds 29511 (TORCHELASTIC_RUN_ID)
  EXPECT_EQ(l.job_id, "abc");
  EXPECT_STREQ(rank_source_name(l.source), "torchrun (RANK/WORLD_SIZE)");
}

TEST(EnvLaunch, MpiFirstThenTorchrunThenSlurm) {
  EXPECT_EQ(discover_env_launch({{"OMPI_COMM_WORLD_SIZE", "2"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}).source,
            RankSource::kNone);
  EXPECT_EQ(discover_env_launch({{"PMIX_RANK", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}}).source,
            RankSource::kNone);
  const std::map<std::string, std::string> slurm = {
      {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_LOCALID", "0"},
      {"SLURM_NODEID", "1"}, {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "2,1"},
      {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_ID", "1234"}};
  const EnvLaunch s = discover_env_launch(slurm);
  EXPECT_EQ(s.source, RankSource::kSlurm);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.local_world, 1);
  EXPECT_EQ(s.node, 1);
  EXPECT_EQ(s.master_addr, "gpu07");
  EXPECT_EQ(s.master_port, 21234);
  auto both = slurm;
  both["RANK"] = "0";
  both["WORLD_SIZE"] = "1";
  EXPECT_EQ(discover_env_launch(both).source, RankSource::kTorchrun);
  // The batch script itself (no step) is a standalone run.
  EXPECT_EQ(discover_env_launch({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).source, RankSource::kNone);
  EXPECT_EQ(discover_env_launch({}).source, RankSource::kNone);
}

TEST(EnvLaunch, BadValuesNameTheVariable) {
  const auto error = [](const std::map<std::string, std::string>& env) {
    try {
      discover_env_launch(env);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(error({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}}).find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error({{"RANK", "1"}, {"WORLD_SIZE", "2"}}).find("without LOCAL_RANK"), std::string::npos);
  // zero is named, not divided by (the node index divides by it)
  EXPECT_NE(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}})
                .find("LOCAL_WORLD_SIZE=0 must be at least 1"),
            std::string::npos);
  EXPECT_NE(error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_PORT", "70000"}})
                .find("master port 70000"),
            std::string::npos);
  EXPECT_NE(error({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"},
                   {"SLURM_NODEID", "0"}})
                .find("without MASTER_ADDR or SLURM_JOB_NODELIST"),
            std::string::npos);
}

TEST(EnvLaunch, SlurmListsParse) {
  EXPECT_EQ(first_slurm_host("gpu[03-05,9],cpu1"), "gpu03");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("n[7]"), "n7");
  EXPECT_THROW(first_slurm_host("n[1-2"), std::runtime_error);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_THROW(slurm_tasks_on_node("2(x3),1", 4), std::runtime_error);
}

// A TCP port nobody listens on right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

RendezvousRequest request(int rank, int world, double timeout_s = 5, const std::string& job = "job1") {
  RendezvousRequest r;
  r.rank = rank;
  r.world = world;
  r.job_id = job;
  r.host = "host" + std::to_string(rank);
  r.prefix = "rank " + std::to_string(rank) + "/" + std::to_string(world) + " (host" + std::to_string(rank) + "): ";
  r.timeout_s = timeout_s;
  if (rank == 0) r.payload = std::string("id\0bytes\xff", 9);
  return r;
}

// Runs every request on its own thread; each result is the payload or "error: <what>".
std::vector<std::string> run_all(const RendezvousSpec& spec, const std::vector<RendezvousRequest>& reqs,
                                 double* seconds = nullptr) {
  std::vector<std::string> out(reqs.size());
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        const RendezvousResult r = rendezvous(spec, reqs[i]);
        out[i] = r.payload + "|" + std::to_string(r.hosts.size());
      } catch (const std::exception& e) {
        out[i] = std::string("error: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<RendezvousSpec> both_transports(const TempDir& dir) {
  return {parse_rendezvous("tcp", "127.0.0.1", free_port()), parse_rendezvous("file:" + dir.path() + "/r", "", 0)};
}

TEST(Rendezvous, PayloadAndHostsReachEveryRank) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    const auto out = run_all(spec, {request(2, 3), request(0, 3), request(1, 3)});
    const std::string want = std::string("id\0bytes\xff", 9) + "|3";
    for (const auto& o : out) EXPECT_EQ(o, want) << spec.describe();
  }
  // The file transport leaves the directory empty for the next job.
  std::ifstream left(dir.path() + "/r/rank0");
  EXPECT_FALSE(left.good());
}

TEST(Rendezvous, RankZeroNeverComes) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    double secs = 0;
    const auto out = run_all(spec, {request(1, 2, 0.5)}, &secs);
    EXPECT_TRUE(has(out[0], "rank 1/2 (host1): rendezvous at " + spec.describe() + ": rank 0 never came")) << out[0];
    EXPECT_LT(secs, 3);
  }
}

TEST(Rendezvous, AnotherRankNeverComes) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    const auto out = run_all(spec, {request(0, 3, 0.5), request(1, 3, 0.5)});
    EXPECT_TRUE(has(out[0], "rank 0/3 (host0): rendezvous at " + spec.describe() + ": rank(s) 2 of 3 never came") ||
                has(out[0], "rank(s) 2 never came"))
        << out[0];
    EXPECT_TRUE(has(out[1], "error: rank 1/3 (host1): ")) << out[1];
  }
}

TEST(Rendezvous, UnreachableAddresses) {
  RendezvousSpec spec = parse_rendezvous("tcp:no-such-host.invalid:29500", "", 0);
  auto out = run_all(spec, {request(1, 2, 0.5)});
  EXPECT_TRUE(has(out[0], "rendezvous at tcp no-such-host.invalid:29500: cannot resolve the address")) << out[0];
  spec = parse_rendezvous("tcp:192.0.2.1:29500", "", 0);  // TEST-NET-1: never answers
  double secs = 0;
  out = run_all(spec, {request(1, 2, 1)}, &secs);
  EXPECT_TRUE(has(out[0], "rendezvous at tcp 192.0.2.1:29500: rank 0 never came")) << out[0];
  EXPECT_LT(secs, 4);
}

// A socket listening on a port the system picks, on `address`; *port is that port.
int listening_socket(uint32_t address, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(address);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  listen(fd, 4);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

TEST(Rendezvous, PortInUse) {
  int port = 0;
  const int fd = listening_socket(INADDR_ANY, &port);
  const auto out = run_all(parse_rendezvous("tcp", "127.0.0.1", port), {request(0, 2, 1)});
  close(fd);
  EXPECT_TRUE(has(out[0], "rank 0/2 (host0): rendezvous at tcp 127.0.0.1:" + std::to_string(port) +
                              ": rank 0 cannot listen on port " + std::to_string(port) + ": Address already in use"))
      << out[0];
}

TEST(Rendezvous, TwoProcessesClaimOneRank) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    RendezvousRequest dup = request(1, 3, 2);
    dup.host = "hostX";
    const auto out = run_all(spec, {request(0, 3, 2), request(1, 3, 2), dup});
    int claimed = 0;
    for (const auto& o : out) claimed += has(o, "rank 1 is claimed by two processes") ? 1 : 0;
    EXPECT_GE(claimed, 1) << spec.describe() << ": " << out[0] << "\n" << out[1] << "\n" << out[2];
    for (const auto& o : out) EXPECT_TRUE(has(o, "error: ")) << spec.describe() << ": " << o;
  }
}

// A rank that cannot go on still comes, so every rank hears its reason at
// once (a local rank beyond the visible GPUs, rank 0's unique id failing).
TEST(Rendezvous, ARankThatCannotStartIsNamedOnEveryRank) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    for (int failing : {1, 0}) {
      std::vector<RendezvousRequest> reqs = {request(0, 3, 20), request(1, 3, 20), request(2, 3, 20)};
      reqs[static_cast<size_t>(failing)].problem = "local rank 1 but only 1 visible GPU(s)";
      double secs = 0;
      const auto out = run_all(spec, reqs, &secs);
      // the same words over either transport
      const std::string want = "rank " + std::to_string(failing) + " (host host" + std::to_string(failing) +
                               ") cannot start: local rank 1 but only 1 visible GPU(s)";
      for (size_t r = 0; r < out.size(); ++r) {
        EXPECT_TRUE(has(out[r], "error: rank " + std::to_string(r) + "/3 (host" + std::to_string(r) + "): "))
            << spec.describe() << ": " << out[r];
        EXPECT_TRUE(has(out[r], "cannot start: local rank 1 but only 1 visible GPU(s)"))
            << spec.describe() << ": " << out[r];
        EXPECT_TRUE(has(out[r], want)) << spec.describe() << ": " << out[r];
      }
      EXPECT_LT(secs, 5) << spec.describe();  // not the 20 s timeout
    }
  }
}

// Two processes given RANK=0: the one that finds the port taken joins the
// other as rank 0, so both end at once naming the duplicate, instead of one
// reporting a busy port and the other waiting out its timeout.
TEST(Rendezvous, TwoProcessesClaimRankZero) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    double secs = 0;
    const auto out = run_all(spec, {request(0, 2, 20), request(0, 2, 20)}, &secs);
    for (const auto& o : out) EXPECT_TRUE(has(o, "rank 0 is claimed by two processes")) << spec.describe() << ": " << o;
    EXPECT_LT(secs, 10) << spec.describe();  // not the 20 s timeout
  }
}

TEST(Rendezvous, WorldSizesDisagree) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    const auto out = run_all(spec, {request(0, 2, 2), request(1, 3, 2)});
    EXPECT_TRUE(has(out[0], "rendezvous at " + spec.describe() + ": world sizes disagree")) << out[0];
    EXPECT_TRUE(has(out[1], "world sizes disagree")) << out[1];
  }
}

TEST(Rendezvous, StaleFilesOfAnEarlierJob) {
  TempDir dir("rdzv_test");
  const RendezvousSpec spec = parse_rendezvous("file:" + dir.path(), "", 0);
  std::ofstream(dir.path() + "/rank0") << "host=old\npid=99\ntime=1\njob=job0\nworld=2\nnonce=7\npayload=\n";
  auto out = run_all(spec, {request(0, 2, 0.5)});
  EXPECT_TRUE(has(out[0], "rank 0/2 (host0): rendezvous at file " + dir.path() + ": stale rendezvous file " + dir.path() +
                              "/rank0 of an earlier job (host old, pid 99")) << out[0];
  out = run_all(spec, {request(1, 2, 0.5)});
  EXPECT_TRUE(has(out[0], "stale rendezvous file " + dir.path() + "/rank0 (host old, pid 99")) << out[0];
  EXPECT_TRUE(has(out[0], "it is of job 'job0', this is job 'job1'")) << out[0];
}

// Another program on the port, answering every connection with 0xFF bytes:
// the joining rank refuses the reply header at once, allocating nothing for it.
TEST(Rendezvous, AHostileAnswerIsRefusedBeforeAnyAllocation) {
  int port = 0;
  const int fd = listening_socket(INADDR_LOOPBACK, &port);
  std::thread hostile([fd] {
    const int conn = accept(fd, nullptr, nullptr);
    if (conn < 0) return;
    const std::string ff(4096, '\xff');
    send(conn, ff.data(), ff.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    close(conn);
  });
  double secs = 0;
  const auto out = run_all(parse_rendezvous("tcp", "127.0.0.1", port), {request(1, 2, 5)}, &secs);
  hostile.join();
  close(fd);
  EXPECT_TRUE(has(out[0], "rank 1/2 (host1): rendezvous at tcp 127.0.0.1:" + std::to_string(port) +
                              ": what answers on the port is not rank 0 of this program (a reply header of status "
                              "4294967295, 4294967295 + 4294967295 bytes; at most 1, 65536 + 130)"))
      << out[0];
  EXPECT_LT(secs, 3);
}

// A rendezvous file no rank wrote, too large to be one, is refused unread.
TEST(Rendezvous, AnOversizedRendezvousFileIsNotRead) {
  TempDir dir("rdzv_test");
  std::ofstream(dir.path() + "/rank0") << std::string((1 << 20) + 1, 'x');
  const auto out = run_all(parse_rendezvous("file:" + dir.path(), "", 0), {request(1, 2, 1)});
  EXPECT_TRUE(has(out[0], dir.path() + "/rank0: 1048577 bytes, more than a rendezvous file holds (1048576)")) << out[0];
}

// A stop signal ends every wait within a fraction of a second (rank 0 waiting
// for the others, a rank waiting for rank 0), and no file of the stopped rank
// is left for the next job to take as stale.
TEST(Rendezvous, AStopSignalEndsTheWaitAndLeavesNoFile) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    for (int rank : {0, 1}) {
      clear_stop_signal();
      std::thread signal([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        request_stop(SIGTERM);
      });
      double secs = 0;
      const auto out = run_all(spec, {request(rank, 2, 20)}, &secs);
      signal.join();
      clear_stop_signal();
      EXPECT_EQ(out[0], "error: stop requested by signal " + std::to_string(SIGTERM)) << spec.describe() << " rank " << rank;
      EXPECT_LT(secs, 2) << spec.describe() << " rank " << rank;
      EXPECT_FALSE(std::ifstream(dir.path() + "/r/rank" + std::to_string(rank)).good()) << spec.describe();
    }
  }
}

// A rank still waiting says what for, every progress_every_s.
TEST(Rendezvous, AWaitingRankSaysWhatItWaitsFor) {
  TempDir dir("rdzv_test");
  for (const RendezvousSpec& spec : both_transports(dir)) {
    RendezvousRequest r0 = request(0, 3, 0.7), r1 = request(1, 3, 0.7);
    r0.progress_every_s = r1.progress_every_s = 0.2;
    testing::internal::CaptureStderr();
    run_all(spec, {r0, r1});
    const std::string notes = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(has(notes, "rank 0/3 (host0): rendezvous at " + spec.describe() + ": waiting for ")) << notes;
    EXPECT_TRUE(has(notes, "rank(s) 2 of 3") || has(notes, "rank 2 (")) << notes;
    EXPECT_TRUE(has(notes, " s of 0.7 s)")) << notes;
  }
}

TEST(Rendezvous, SpecsParse) {
  EXPECT_EQ(parse_rendezvous("", "m", 5).describe(), "tcp m:5");
  EXPECT_EQ(parse_rendezvous("tcp:10.0.0.1:29500", "m", 5).describe(), "tcp 10.0.0.1:29500");
  EXPECT_EQ(parse_rendezvous("file:/shared/x", "m", 5).describe(), "file /shared/x");
  EXPECT_THROW(parse_rendezvous("tcp:host", "m", 5), std::runtime_error);
  EXPECT_THROW(parse_rendezvous("udp:x", "m", 5), std::runtime_error);
  EXPECT_THROW(parse_rendezvous("file:", "m", 5), std::runtime_error);
}

}  // namespace
}  // namespace gpt2

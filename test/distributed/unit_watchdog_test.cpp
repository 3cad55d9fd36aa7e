// CommWatchdog (distributed/watchdog.h) alone: a fake clock and a recording
// expire action instead of MPI_Abort; one case with its own thread and the
// real clock.
#include "distributed/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distributed/preempt.h"

namespace gpt2 {
namespace {

const char* const kPrefix = "rank 0/2 (node1): ";

// A watchdog on a clock the test sets, which records instead of aborting.
struct Fixture {
  int64_t now = 1000;
  std::vector<std::string> expired;
  std::vector<int> codes;           // the exit code of each
  std::vector<std::string> events;  // hooks and the action, in order
  CommWatchdog dog;
  explicit Fixture(double timeout_s)
      : dog(timeout_s, kPrefix, [this] { return now; },
            [this](const std::string& m, int code) {
              expired.push_back(m);
              codes.push_back(code);
              events.push_back("expire");
            },
            /*start_thread=*/false) {}
};

TEST(Watchdog, ExpiresOnlyAfterTheTimeoutWithTheMessage) {
  Fixture f(5);
  CommWatchdog::Slot* slot = f.dog.add_slot("mpi");
  slot->begin("all_reduce");
  f.now += 5000;  // exactly the timeout: not yet
  EXPECT_EQ(f.dog.poll(), "");
  f.now += 1;
  const std::string want =
      "rank 0/2 (node1): mpi all_reduce did not complete within 5 s (a peer rank died or hangs); aborting";
  EXPECT_EQ(f.dog.poll(), want);
  ASSERT_EQ(f.expired.size(), 1u);
  EXPECT_EQ(f.expired[0], want);
  f.now += 10000;  // once only
  EXPECT_EQ(f.dog.poll(), "");
  EXPECT_EQ(f.expired.size(), 1u);
}

TEST(Watchdog, OnlyCallsInFlightCount) {
  Fixture f(2);
  CommWatchdog::Slot* slot = f.dog.add_slot("mpi");
  {
    InFlight call(slot, "barrier");
    f.now += 1500;
    EXPECT_EQ(f.dog.poll(), "");
  }
  f.now += 3600 * 1000;  // a long checkpoint write between collectives
  EXPECT_EQ(f.dog.poll(), "");
  slot->begin("broadcast");  // the clock starts again at the call
  f.now += 1999;
  EXPECT_EQ(f.dog.poll(), "");
  f.now += 2;
  EXPECT_NE(f.dog.poll().find("mpi broadcast did not complete within 2 s"), std::string::npos);
}

TEST(Watchdog, EndsTheCallEvenWhenItThrows) {
  Fixture f(1);
  CommWatchdog::Slot* slot = f.dog.add_slot("nccl");
  try {
    InFlight call(slot, "all_gather");
    throw 1;
  } catch (int) {
  }
  f.now += 5000;
  EXPECT_EQ(f.dog.poll(), "");
}

TEST(Watchdog, NamesTheSlotInFlightAndRunsEveryHookFirst) {
  Fixture f(0.5);
  CommWatchdog::Slot* host = f.dog.add_slot("mpi", [&] { f.events.push_back("hook mpi"); });
  CommWatchdog::Slot* nccl = f.dog.add_slot("nccl", [&] { f.events.push_back("hook nccl"); });
  host->begin("all_reduce");
  host->end();
  nccl->begin("reduce_scatter_v");
  f.now += 501;
  EXPECT_EQ(f.dog.poll(),
            "rank 0/2 (node1): nccl reduce_scatter_v did not complete within 0.5 s (a peer rank died or "
            "hangs); aborting");
  EXPECT_EQ(f.events, (std::vector<std::string>{"hook mpi", "hook nccl", "expire"}));
}

// A hook (an abort) that never returns cannot keep the process alive: the exit
// deadline armed before the hooks ends it after the grace, with exit 1.
TEST(WatchdogDeathTest, AHookThatBlocksForeverStillEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int64_t now = 0;
        CommWatchdog dog(1, kPrefix, [&] { return now; }, [](const std::string&, int) {}, false, /*grace_s=*/0.3);
        CommWatchdog::Slot* slot =
            dog.add_slot("nccl", [] { for (;;) std::this_thread::sleep_for(std::chrono::hours(1)); });
        slot->begin("all_reduce");
        now += 1001;
        dog.poll();
      },
      ::testing::ExitedWithCode(1),
      "rank 0/2 \\(node1\\): ending the process: the abort after the collective timeout did not finish within 0.3 s");
}

// A deadline disarmed in time does nothing; one that is not ends the process.
TEST(WatchdogDeathTest, ExitDeadlineFiresOnlyWhenNotDisarmed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  { const ExitDeadline quick(0.05, "never printed"); }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EXIT(
      {
        const ExitDeadline d(0.1, "rank 1/2 (n): the abort blocked", 3);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      },
      ::testing::ExitedWithCode(3), "error: rank 1/2 \\(n\\): the abort blocked");
}

TEST(Watchdog, ReleasedSlotsAreForgotten) {
  Fixture f(1);
  CommWatchdog::Slot* slot = f.dog.add_slot("mpi");
  slot->begin("barrier");
  f.dog.release(slot);
  f.now += 5000;
  EXPECT_EQ(f.dog.poll(), "");
}

TEST(Watchdog, ZeroDisablesIt) {
  Fixture f(0);
  EXPECT_FALSE(f.dog.enabled());
  CommWatchdog::Slot* slot = f.dog.add_slot("mpi");
  slot->begin("barrier");
  f.now += 1LL << 40;
  EXPECT_EQ(f.dog.poll(), "");
  EXPECT_TRUE(f.expired.empty());
}

// A stop signal ends a set-up call that waits for peers at once, with 128 +
// the signal; ordinary collectives are left to finish (the trainer stops at
// the next step boundary).
TEST(Watchdog, AStopSignalEndsOnlyASetUpCallInFlight) {
  Fixture f(600);
  CommWatchdog::Slot* slot = f.dog.add_slot("nccl");
  request_stop(15);
  {
    InFlight call(slot, "all_reduce");
    f.now += 2000;
    EXPECT_EQ(f.dog.poll(), "");
  }
  EXPECT_EQ(f.dog.poll(), "");  // nothing in flight
  {
    InFlight init(slot, "ncclCommInitRank", /*ends_on_stop=*/true);
    const std::string want =
        "rank 0/2 (node1): stop requested by signal 15 during nccl ncclCommInitRank (waiting for the other ranks); "
        "exiting";
    EXPECT_EQ(f.dog.poll(), want);
  }
  clear_stop_signal();
  ASSERT_EQ(f.codes.size(), 1u);
  EXPECT_EQ(f.codes[0], 143);
}

// A set-up call waiting for its peers says so every 30 s; a collective does not.
TEST(Watchdog, ASetUpCallStillWaitingSaysSoEvery30Seconds) {
  Fixture f(600);
  std::vector<std::string> notes;
  f.dog.set_note([&](const std::string& line) { notes.push_back(line); });
  CommWatchdog::Slot* nccl = f.dog.add_slot("nccl");
  CommWatchdog::Slot* mpi = f.dog.add_slot("mpi");
  InFlight init(nccl, "ncclCommInitRank", /*ends_on_stop=*/true);
  InFlight reduce(mpi, "all_reduce");
  f.now += 29999;
  EXPECT_EQ(f.dog.poll(), "");
  EXPECT_TRUE(notes.empty());
  f.now += 1;
  f.dog.poll();
  f.now += 30000;
  f.dog.poll();
  f.dog.poll();  // once per 30 s
  EXPECT_EQ(notes, (std::vector<std::string>{
                       "rank 0/2 (node1): nccl ncclCommInitRank: waiting for the other ranks (30 s of 600 s)",
                       "rank 0/2 (node1): nccl ncclCommInitRank: waiting for the other ranks (60 s of 600 s)"}));
  EXPECT_TRUE(f.expired.empty());
}

TEST(Watchdog, ASetUpCallWithoutAStopWaitsForTheTimeout) {
  Fixture f(5);
  CommWatchdog::Slot* slot = f.dog.add_slot("nccl");
  InFlight init(slot, "ncclCommInitRank", /*ends_on_stop=*/true);
  f.now += 5000;
  EXPECT_EQ(f.dog.poll(), "");
  f.now += 1;
  EXPECT_NE(f.dog.poll().find("nccl ncclCommInitRank did not complete within 5 s"), std::string::npos);
  ASSERT_EQ(f.codes.size(), 1u);
  EXPECT_EQ(f.codes[0], 1);
}

// The thread polls by itself on the real clock (sub-second timeouts poll every
// quarter of the timeout) and stops when the watchdog is destroyed.
TEST(Watchdog, ItsThreadFiresOnTheRealClock) {
  std::atomic<int> fired{0};
  std::string message;
  {
    CommWatchdog dog(0.2, kPrefix, {}, [&](const std::string& m, int) {
      message = m;
      fired.store(1);
    });
    CommWatchdog::Slot* slot = dog.add_slot("mpi");
    slot->begin("all_reduce");
    const auto start = std::chrono::steady_clock::now();
    while (!fired.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 0.2);
    EXPECT_LT(waited, 2.0);
  }
  EXPECT_EQ(fired.load(), 1);
  EXPECT_NE(message.find("mpi all_reduce did not complete within 0.2 s"), std::string::npos);
}

}  // namespace
}  // namespace gpt2

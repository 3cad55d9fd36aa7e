// The stop flag set from a signal handler (the collective check is in comm_test).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

#include "distributed/preempt.h"

namespace gpt2 {
namespace {

TEST(Preempt, SignalSetsTheFlag) {
  install_stop_handlers({SIGUSR1, SIGTERM});
  clear_stop_signal();
  EXPECT_EQ(local_stop_signal(), 0);
  ASSERT_EQ(raise(SIGUSR1), 0);  // without the handler this would end the test binary
  EXPECT_EQ(local_stop_signal(), SIGUSR1);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_EQ(local_stop_signal(), SIGTERM);
  clear_stop_signal();
  EXPECT_EQ(local_stop_signal(), 0);
}

TEST(Preempt, SignalFromAnotherProcess) {
  install_stop_handlers({SIGUSR2});
  clear_stop_signal();
  const pid_t parent = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(kill(parent, SIGUSR2) == 0 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Delivery to this process is asynchronous; wait briefly for it.
  for (int i = 0; i < 200 && local_stop_signal() == 0; ++i) usleep(5000);
  EXPECT_EQ(local_stop_signal(), SIGUSR2);
  clear_stop_signal();
}

// SIGINT's handler (second_is_default): the first Ctrl-C is recorded, the
// default action is back for the second.
TEST(Preempt, SecondSignalTakesTheDefaultAction) {
  install_stop_handlers({SIGUSR2}, /*second_is_default=*/true);
  clear_stop_signal();
  ASSERT_EQ(raise(SIGUSR2), 0);
  EXPECT_EQ(local_stop_signal(), SIGUSR2);
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  install_stop_handlers({SIGUSR2});  // back to recording, for the other tests
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &now), 0);
  EXPECT_NE(now.sa_handler, SIG_DFL);
  clear_stop_signal();
}

TEST(Preempt, RequestStopWithoutASignal) {
  clear_stop_signal();
  request_stop(SIGTERM);
  EXPECT_EQ(local_stop_signal(), SIGTERM);
  clear_stop_signal();
}

TEST(Preempt, SignalNames) {
  EXPECT_EQ(parse_signal_name("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal_name("sigusr2"), SIGUSR2);
  EXPECT_EQ(parse_signal_name("SIGTERM"), SIGTERM);
  EXPECT_EQ(parse_signal_name("10"), 10);
  EXPECT_THROW(parse_signal_name("KILL"), std::runtime_error);
  EXPECT_THROW(parse_signal_name("9"), std::runtime_error);  // SIGKILL cannot be caught
  EXPECT_THROW(parse_signal_name(""), std::runtime_error);
  EXPECT_THROW(parse_signal_name("USR1x"), std::runtime_error);
  EXPECT_THROW(install_stop_handlers({SIGKILL}), std::runtime_error);
  EXPECT_THROW(install_stop_handlers({0}), std::runtime_error);
  EXPECT_EQ(kPreemptedExitCode, 75);  // EX_TEMPFAIL, what the sbatch scripts requeue on
}

}  // namespace
}  // namespace gpt2

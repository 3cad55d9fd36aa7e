#include "distributed/preempt.h"

#include <signal.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "distributed/comm.h"

namespace gpt2 {
namespace {

// The project's one mutable global, and why it has to be one: a signal handler
// receives no user pointer, so the only state it can reach is static, and the
// only type it may write with defined behaviour is `volatile sig_atomic_t`
// (C++17 [support.signal]). It holds the received signal number (0 = none).
volatile sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signum) { g_stop_signal = signum; }

}  // namespace

void install_stop_handlers(const std::vector<int>& signals, bool second_is_default) {
  for (int signum : signals) {
    if (signum == SIGKILL || signum == SIGSTOP || signum <= 0 || signum >= NSIG)
      throw std::runtime_error("distributed/preempt.cpp: cannot handle signal " +
                               std::to_string(signum));
    struct sigaction action;
    // An interrupt inherited as ignored (a script's background job, nohup) stays
    // ignored: Ctrl-C at the terminal is not meant for it.
    if (second_is_default && sigaction(signum, nullptr, &action) == 0 && action.sa_handler == SIG_IGN) continue;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = record_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | (second_is_default ? SA_RESETHAND : 0);
    if (sigaction(signum, &action, nullptr) != 0)
      throw std::runtime_error("distributed/preempt.cpp: sigaction(" + std::to_string(signum) +
                               ") failed: " + std::strerror(errno));
  }
}

int parse_signal_name(const std::string& name) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper.rfind("SIG", 0) == 0) upper = upper.substr(3);
  struct Named {
    const char* name;
    int signum;
  };
  static const Named kNames[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},
                                 {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
                                 {"XCPU", SIGXCPU}};
  for (const Named& n : kNames)
    if (upper == n.name) return n.signum;
  char* end = nullptr;
  const long v = std::strtol(name.c_str(), &end, 10);
  if (!name.empty() && *end == '\0' && v > 0 && v < NSIG && v != SIGKILL && v != SIGSTOP)
    return static_cast<int>(v);
  throw std::runtime_error("stop signal '" + name +
                           "': expected USR1, USR2, TERM, INT, HUP, QUIT, XCPU or a number");
}

int local_stop_signal() { return g_stop_signal; }

void clear_stop_signal() { g_stop_signal = 0; }

void request_stop(int signum) { g_stop_signal = signum; }

bool should_stop(Communicator& comm) {
  int32_t sig = g_stop_signal;
  comm.all_reduce(&sig, &sig, 1, DataType::kInt32, ReduceOp::kMax);
  if (sig != 0 && g_stop_signal == 0) g_stop_signal = sig;  // another rank's signal
  return sig != 0;
}

void throw_if_stop_requested(Communicator& comm) {
  if (should_stop(comm)) throw StopRequested(local_stop_signal());
}

}  // namespace gpt2

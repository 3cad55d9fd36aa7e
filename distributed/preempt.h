// Preemption: a signal asks the job to stop, every rank stops at the same step
// boundary, the trainer checkpoints and exits with kPreemptedExitCode so the
// Slurm script requeues the job and the restart continues with --resume.
//
// Slurm delivers the warning signal (`#SBATCH --signal=USR1@120`) and, at the
// time limit or on scancel, SIGTERM to every task - but not necessarily at the
// same instant, and a rank may be mid-step. So the handler only records the
// signal, and the trainer calls should_stop() once per step boundary: a
// collective max over ranks, so all ranks take the same decision at the same
// step (a rank that saw no signal yet still stops with the others).
#ifndef DISTRIBUTED_PREEMPT_H
#define DISTRIBUTED_PREEMPT_H

#include <stdexcept>
#include <string>
#include <vector>

namespace gpt2 {

class Communicator;

// Exit status of a run that stopped on a signal after writing its checkpoint:
// EX_TEMPFAIL from <sysexits.h>, "try again later". The sbatch scripts requeue
// the job on it.
constexpr int kPreemptedExitCode = 75;

// Installs the recording handler for each signal (sigaction, SA_RESTART so
// blocking I/O is not interrupted). Default set: SIGUSR1 and SIGTERM. A signal
// arriving later sets the flag; the handler stays installed, so repeated
// signals are harmless - unless second_is_default: then the first signal is
// recorded and the default action comes back for the next (SA_RESETHAND), so a
// second Ctrl-C ends a process that is slow to stop, and a signal inherited
// as ignored stays ignored (a script's background job, nohup). Throws on an
// invalid signal number.
void install_stop_handlers(const std::vector<int>& signals, bool second_is_default = false);

// Parses "USR1", "SIGUSR1", "TERM", "10" ... into a signal number (throws on
// anything else). For a --stop-signal style flag.
int parse_signal_name(const std::string& name);

// Signal number received on this rank since the last clear (0 if none).
int local_stop_signal();
// Forgets a received signal (tests; a trainer never needs it).
void clear_stop_signal();
// Records a stop request as if `signum` had arrived (tests, and a trainer that
// wants to stop for its own reasons through the same path).
void request_stop(int signum);

// Collective: true on every rank when any rank received a stop signal (a rank
// that saw none then records the other's, so every rank names the same
// signal). Costs one 1-element all-reduce (max); call it at every step
// boundary, and per batch in long collective phases (validation, evaluation).
bool should_stop(Communicator& comm);

// Thrown where a long phase notices a stop request (validation, --eval-only);
// the mode's runner catches it and exits.
struct StopRequested : std::runtime_error {
  explicit StopRequested(int s) : std::runtime_error("stop requested by signal " + std::to_string(s)), signum(s) {}
  int signum;
};
// Collective: throws StopRequested when should_stop(comm), so a long phase
// ends on every rank at the same batch.
void throw_if_stop_requested(Communicator& comm);
// This rank alone: throws StopRequested when it received a stop signal (a
// wait no other rank shares: the rendezvous, the prompt from stdin).
inline void throw_if_local_stop() {
  if (const int s = local_stop_signal()) throw StopRequested(s);
}
// Exit status of a run stopped by signal `signum` without a checkpoint to
// continue from: 128 + signum, as a shell reports a process the signal ended.
inline int stopped_exit_code(int signum) { return 128 + signum; }

}  // namespace gpt2

#endif  // DISTRIBUTED_PREEMPT_H

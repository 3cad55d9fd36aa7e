// The emulated NCCL's fault switches (docs/emulator.md), for the error paths'
// tests: collectives that fail while running, and NCCL that blocks.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "emu/nccl_internal.h"

namespace gpt2 {
namespace emu {

namespace {
// Env GPT2_EMU_NCCL_FAIL_AT=N: the N-th collective of every communicator fails.
uint64_t fail_at_from_env() {
  static const uint64_t n = [] {
    const char* s = std::getenv("GPT2_EMU_NCCL_FAIL_AT");
    return s ? std::strtoull(s, nullptr, 10) : 0ULL;
  }();
  return n;
}
}  // namespace

// Test switches for the fatal-error path (docs/emulator.md): a GPU whose NCCL
// blocks where real ones are known to.
//   GPT2_EMU_NCCL_ABORT_BLOCKS=1                          ncclCommAbort never returns
//   GPT2_EMU_NCCL_FREEZE_RANK=R [GPT2_EMU_NCCL_FREEZE_AT=N]  the N-th (default 1st)
//       collective that rank R of a communicator runs never returns (a hung kernel)
//   GPT2_EMU_NCCL_FREEZE_INIT_RANK=R                      rank R's ncclCommInitRank
//       never returns (a peer that never joins the set-up)
namespace {
bool env_flag(const char* name) {
  const char* s = std::getenv(name);
  return s != nullptr && *s != '\0' && std::strcmp(s, "0") != 0;
}

[[noreturn]] void block_forever(const std::string& why) {
  std::fprintf(stderr, "NCCL (emulated): %s\n", why.c_str());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

void maybe_freeze(const ncclComm& c) {
  const char* rank = std::getenv("GPT2_EMU_NCCL_FREEZE_RANK");
  if (rank == nullptr || *rank == '\0' || std::atoi(rank) != c.rank) return;
  const char* at = std::getenv("GPT2_EMU_NCCL_FREEZE_AT");
  const uint64_t n = at != nullptr && *at != '\0' ? std::strtoull(at, nullptr, 10) : 1;
  if (c.executed != n) return;
  block_forever("rank " + std::to_string(c.rank) + " freezes in collective " + std::to_string(n) +
                " (GPT2_EMU_NCCL_FREEZE_RANK)");
}

void maybe_freeze_init(int rank) {
  const char* r = std::getenv("GPT2_EMU_NCCL_FREEZE_INIT_RANK");
  if (r == nullptr || *r == '\0' || std::atoi(r) != rank) return;
  block_forever("rank " + std::to_string(rank) + " freezes in ncclCommInitRank (GPT2_EMU_NCCL_FREEZE_INIT_RANK)");
}

ncclResult_t take_injected(ncclComm* c, std::string* why) {
  if (c->injected != ncclSuccess) {
    ncclResult_t r = c->injected;
    *why = c->injected_reason;
    c->injected = ncclSuccess;
    return r;
  }
  if (fail_at_from_env() != 0 && c->executed == fail_at_from_env()) {
    *why = "injected by GPT2_EMU_NCCL_FAIL_AT=" + std::to_string(fail_at_from_env());
    return ncclRemoteError;
  }
  return ncclSuccess;
}

void maybe_block_abort(const ncclComm& c) {
  if (env_flag("GPT2_EMU_NCCL_ABORT_BLOCKS"))
    block_forever("ncclCommAbort of rank " + std::to_string(c.rank) + " blocks forever (GPT2_EMU_NCCL_ABORT_BLOCKS)");
}

}  // namespace emu
}  // namespace gpt2

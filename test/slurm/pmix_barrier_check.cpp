// pmix_barrier_check: do the launcher's PMIx fences hold every rank until all have joined?
//
// Open MPI's MPI_Init exchanges its addresses in one fence (with data) and ends with a second
// one without data, a barrier: once a rank leaves it, it may send to any peer, which must by
// then be able to receive. If the launcher lets a rank leave the barrier while a peer is still
// inside MPI_Init, the peer gets a message it cannot yet dispatch and dies of SIGSEGV. This
// program does the same two fences with the last rank sleeping DELAY_MS (default 2000) between
// them; each rank prints when it entered the barrier and when it left, and
// test/slurm/slurm_smoke_test.sh fails when a rank left before the last one entered.
//   srun -N 2 -n 2 build/test/slurm/pmix_barrier_check
#include <pmix.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

int fence(bool collect) {
  pmix_info_t info;
  PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  const int rc = PMIx_Fence(nullptr, 0, &info, 1);
  PMIX_INFO_DESTRUCT(&info);
  return rc;
}

}  // namespace

int main() {
  pmix_proc_t me;
  if (PMIx_Init(&me, nullptr, 0) != PMIX_SUCCESS) {
    std::fprintf(stderr, "pmix_barrier_check: PMIx_Init failed (not launched through PMIx?)\n");
    return 1;
  }
  pmix_proc_t job = me;
  job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t* size = nullptr;
  if (PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &size) != PMIX_SUCCESS || size == nullptr) {
    std::fprintf(stderr, "pmix_barrier_check: rank %u: no job size from PMIx\n", me.rank);
    PMIx_Finalize(nullptr, 0);
    return 1;
  }
  const unsigned world = size->data.uint32;
  PMIX_VALUE_RELEASE(size);
  const char* delay_env = std::getenv("DELAY_MS");
  const int delay_ms = delay_env ? std::atoi(delay_env) : 2000;

  const int rc1 = fence(true);
  // The last rank arrives late at the barrier, as a rank on a busy CPU does.
  if (me.rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  const double entered = wall_seconds();
  const int rc2 = fence(false);
  const double left = wall_seconds();
  // Every rank prints when it entered and left; the test compares them across ranks.
  std::printf("pmix_barrier_check rank=%u world=%u fence_rc=%d,%d entered=%.3f left=%.3f\n", me.rank, world, rc1,
              rc2, entered, left);
  std::fflush(stdout);
  PMIx_Finalize(nullptr, 0);
  return rc1 == PMIX_SUCCESS && rc2 == PMIX_SUCCESS ? 0 : 1;
}

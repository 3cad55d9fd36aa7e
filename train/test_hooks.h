// Test hooks of the training loop, read from the environment here and nowhere
// else; unset, they do nothing. For the tests named below only.
#ifndef TRAIN_TEST_HOOKS_H
#define TRAIN_TEST_HOOKS_H

#include <cstddef>

namespace gpt2 {

struct DistContext;

// Faults of one rank (test/distributed/comm_timeout_test.sh): at the start of
// optimizer step N (1-based, as logged) of rank R, after the step's stop
// check, before its first forward,
//   GPT2_TEST_HANG_RANK=R GPT2_TEST_HANG_AT_STEP=N   the rank hangs (sleeps forever)
//   GPT2_TEST_EXIT_RANK=R GPT2_TEST_EXIT_AT_STEP=N   the rank exits 1 at once
// so that its peers wait in the next collective for a rank that never comes.
void test_fault_hook(const DistContext& dist, int step);

// The tied wte gradient's chunk rows (ParamLayout::wte_chunk_rows; 0: the
// default), so small models stage it in several chunks (test/distributed/
// zero_train_test.sh, comm_overlap_test.sh): GPT2_TEST_WTE_CHUNK_ROWS=N, the
// same on every rank. Results stay exact.
size_t test_wte_chunk_rows();

// The offloaded optimizer's chunk, in elements (0: the default), so small
// models pipeline several chunks (test/distributed/zero_cuda_emu_test.sh):
// GPT2_TEST_OFFLOAD_CHUNK=N. Results stay exact.
size_t test_offload_chunk();

// A planted gradient spike (test/e2e/spike_guard_test.sh):
// GPT2_TEST_SCALE_GRAD=N:F multiplies every gradient of step N (1-based) by F
// on every rank, leaving its loss alone. 1 for other steps.
float test_gradient_scale(int step);

}  // namespace gpt2

#endif  // TRAIN_TEST_HOOKS_H

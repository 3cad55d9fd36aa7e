#!/usr/bin/env bash
# Emulated NCCL between real processes: each MPI rank is one emulated GPU (its own
# emulated device). 2 ranks, and 3: with three ranks a bf16 ring sum rounds at a
# hop that two ranks do not have, so per-hop rounding becomes visible. Every
# launch has a timeout: a collective that deadlocks fails the test.
set -u
bin=build/test/emu/nccl_test
[ -x "$bin" ] || { echo "missing $bin (make $bin)"; exit 1; }
fail=0
for np in 2 3; do
  echo "== mpirun -np $np $bin"
  timeout -k 10 300 mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin" --gtest_color=no || {
    echo "FAIL: nccl_test with $np ranks"
    fail=1
  }
done
exit $fail

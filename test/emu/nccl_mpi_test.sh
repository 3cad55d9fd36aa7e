#!/usr/bin/env bash
# Emulated NCCL between two real processes: each MPI rank is one emulated GPU.
set -u
bin=build/test/emu/nccl_test
[ -x "$bin" ] || { echo "missing $bin (make $bin)"; exit 1; }
mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" --gtest_color=no

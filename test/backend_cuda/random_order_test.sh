#!/usr/bin/env bash
# The whole CUDA backend suite once more with the emulator's random run order as
# the process default (warps and lanes shuffled at every sync point), so tests
# that do not pick an order themselves (the model step, sum_squares, ...) also
# run under it. A race shows up as a mismatch against the CPU backend.
set -u
bin=build/test/backend_cuda/backend_cuda_test
[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }
GPT2_EMU_ORDER=random GPT2_EMU_SEED=20260522 "$bin" --gtest_brief=1

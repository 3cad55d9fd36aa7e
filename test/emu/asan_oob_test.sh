#!/usr/bin/env bash
# An out-of-bounds store in an emulated kernel must be reported by AddressSanitizer
# with the kernel's file:line (exact-size cudaMalloc allocations + ASan build).
set -u
bin=build/test/emu/emu_oob_asan
[ -x "$bin" ] || { echo "missing $bin (make $bin)"; exit 1; }
line=$(grep -n 'OOB_STORE' test/emu/oob_kernel.cu | cut -d: -f1)
out=$(ASAN_OPTIONS=detect_leaks=0 "$bin" 2>&1)
rc=$?
echo "$out" | head -20
[ "$rc" -ne 0 ] || { echo "FAIL: the binary exited 0"; exit 1; }
echo "$out" | grep -q 'heap-buffer-overflow' || { echo "FAIL: no heap-buffer-overflow report"; exit 1; }
echo "$out" | grep -q "test/emu/oob_kernel.cu:$line" || { echo "FAIL: report does not name oob_kernel.cu:$line"; exit 1; }
echo "PASS: overflow reported at test/emu/oob_kernel.cu:$line"

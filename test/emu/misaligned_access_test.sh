#!/usr/bin/env bash
# Misaligned 128-bit loads are refused in emulation as a GPU refuses them:
#  raw float4 load 8 bytes past a 16-byte boundary -> UBSan (sanitizer build) names its file:line;
#  the same through kern::load128                  -> a launch error naming the kernel and address;
#  the aligned twins                               -> run and sum correctly.
set -u
bin=build/test/emu/emu_misaligned_asan
[ -x "$bin" ] || { echo "missing $bin (make $bin)"; exit 1; }
line=$(grep -n 'RAW_LOAD' test/emu/misaligned_kernel.cu | cut -d: -f1)
fails=0
expect() {  # expect NAME WANT_RC PATTERN -- args
  local name=$1 want=$2 pat=$3; shift 4
  local out rc
  out=$(ASAN_OPTIONS=detect_leaks=0 "$bin" "$@" 2>&1); rc=$?
  local got=ok
  [ "$rc" -eq 0 ] || got=fail
  if [ "$got" = "$want" ] && grep -qE -- "$pat" <<<"$out"; then
    echo "ok   $name: $(grep -m1 -E -- "$pat" <<<"$out" | cut -c1-160)"; return
  fi
  echo "FAIL $name: rc=$rc, want $want and /$pat/:"; sed 's/^/    /' <<<"$out" | head -8; fails=$((fails + 1))
}
expect raw-aligned ok "sum of floats 4..7: 26" -- raw 4
expect raw-misaligned fail "misaligned_kernel.cu:$line:.*(load of|reference binding to) misaligned address .* which requires 16 byte alignment" -- raw 2
expect helper-aligned ok "sum of floats 0..3: 10" -- helper 0
expect helper-misaligned fail "launch of helper_pack_sum_kernel failed: misaligned address: kernel helper_pack_sum_kernel, block \\(0,0,0\\): misaligned address 0x[0-9a-f]+: load128 needs 16-byte alignment \(the address is 8 bytes past a boundary\)" -- helper 2
echo "$fails failure(s)"
[ "$fails" -eq 0 ]

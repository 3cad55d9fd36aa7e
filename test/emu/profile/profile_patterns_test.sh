#!/usr/bin/env bash
# test-timeout: 120
# The emulator's profile build (emu/profile.h) on kernels whose memory
# transactions are known (test/emu/profile/patterns.cu): every count exact.
# Shared wavefronts: conflict-free 4-byte requests 1, a 2-way stride 2, a 32-way
# stride 32, a padded tile column 1, a broadcast 1; 16-byte requests 4 per warp
# (quarter-warps), 8 at a 32-byte stride; 8-byte requests 2 (half-warps).
# Global sectors: a coalesced 4-byte request 4, shifted by 4 bytes 5, at a
# 128-byte stride 32; float4 per lane 16. Requests: one per site and warp between
# barriers (a loop's 4 executions are 4, divergent lanes one), summed over
# blocks and launches. Tensor-core tiles as emu/wmma.h models them: a 16x16 bf16
# load (ldmatrix.x4: 16-byte row pieces, 8 rows per quarter-warp) at rows of 32
# bytes 2-way, of 128 bytes 8-way, of 144 bytes conflict-free; a 16x16 fp32
# accumulator store (mma C layout, 8-byte pairs) at rows of 64 bytes 2-way, of 96
# bytes conflict-free.
set -u
cd "$(dirname "$0")/../../.."
BIN=build/test/emu/profile_patterns
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (needs clang++-14: scripts/install_deps.sh)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/profile_patterns.XXXXXX")
trap 'rm -rf "$W"' EXIT
GPT2_EMU_PROFILE="$W/p.jsonl" "$BIN" || { echo "FAIL: $BIN exited $?"; exit 1; }
# Without GPT2_EMU_PROFILE nothing is written.
(cd "$W" && env -u GPT2_EMU_PROFILE "$OLDPWD/$BIN") && [ "$(ls "$W")" = p.jsonl ] ||
  { echo "FAIL: the run without GPT2_EMU_PROFILE failed or wrote a file: $(ls "$W")"; exit 1; }
/usr/bin/env python3 - "$W/p.jsonl" <<'PY'
import json, sys
got = {r["kernel"]: r for r in map(json.loads, open(sys.argv[1]))}
fields = ["launches", "shared_requests", "shared_wavefronts", "shared_ideal_wavefronts", "shared_store_requests",
          "global_requests", "global_sectors", "global_ideal_sectors", "global_store_requests"]
want = {  # kernel: the fields above, in order
    "shared_conflict_free":     (1, 2, 2, 2, 1, 1, 4, 4, 1),
    "shared_stride32":          (1, 2, 64, 2, 1, 1, 4, 4, 1),
    "shared_stride2":           (3, 14, 28, 14, 7, 7, 28, 28, 7),  # 1 block + 2 launches of 3 blocks
    "shared_padded_column":     (1, 2, 2, 2, 1, 1, 4, 4, 1),
    "shared_broadcast":         (1, 2, 2, 2, 1, 1, 4, 4, 1),
    "shared_vector16":          (1, 2, 8, 8, 1, 1, 16, 16, 1),
    "shared_vector16_stride2":  (1, 2, 16, 8, 1, 1, 16, 16, 1),
    "shared_vector8":           (1, 2, 4, 4, 1, 1, 8, 8, 1),
    "shared_loop":              (1, 5, 5, 5, 4, 1, 4, 4, 1),
    "shared_divergent":         (1, 2, 2, 2, 1, 1, 4, 4, 1),
    "shared_dynamic_two_warps": (1, 4, 4, 4, 2, 2, 8, 8, 2),
    "global_coalesced":         (1, 0, 0, 0, 0, 2, 8, 8, 1),
    "global_strided":           (1, 0, 0, 0, 0, 2, 36, 8, 1),
    "global_misaligned":        (1, 0, 0, 0, 0, 2, 9, 8, 1),
    # emu/wmma.h: a 16x16 bf16 tile load is one ldmatrix.x4 request (4 quarter passes);
    # a 16x16 fp32 accumulator store is four 8-byte requests (2 half passes each).
    "wmma_load_ld16":           (1, 1, 8, 4, 0, 1, 4, 4, 1),
    "wmma_load_ld64":           (1, 1, 32, 4, 0, 1, 4, 4, 1),
    "wmma_load_ld72":           (1, 1, 4, 4, 0, 1, 4, 4, 1),
    "wmma_store_ld16":          (1, 4, 16, 8, 4, 1, 4, 4, 1),
    "wmma_store_ld24":          (1, 4, 8, 8, 4, 1, 4, 4, 1),
}
bad = 0
for kernel, values in want.items():
    row = got.get(kernel)
    if row is None:
        print("FAIL %s: not in the profile" % kernel); bad += 1; continue
    diff = ["%s %s (want %s)" % (f, row.get(f), v) for f, v in zip(fields, values) if row.get(f) != v]
    if diff: print("FAIL %s: %s" % (kernel, ", ".join(diff))); bad += 1
    else: print("PASS %s: %s" % (kernel, " ".join("%s=%d" % (f, v) for f, v in zip(fields, values) if v)))
extra = sorted(set(got) - set(want))
if extra: print("FAIL unexpected kernels: %s" % extra); bad += 1
sys.exit(1 if bad else 0)
PY

#!/usr/bin/env bash
# scripts/gpu_check.sh and the GPU kit, proven without a GPU:
#  1. the kit builds, its size is printed and under the 64 MiB carry limit;
#  2. the kit is self-contained: every library its binaries load comes from the kit,
#     glibc or the CUDA toolkit, and (where mount namespaces are allowed) its
#     trainer runs with the system's library folder hidden;
#  3. without a GPU and without --rehearsal the check refuses within seconds;
#  4. the quick rehearsal runs every phase on the emulated builds and passes, with
#     the JSON summary holding real test counts, tokens/s and ZeRO-3's verdicts;
#  5. a broken kit makes the check fail, naming the phase.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/test/gpu
work=$(mktemp -d "$PWD/build/test/gpu/rehearsal.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# 1. kit
scripts/gpu_kit.sh "$work/kit" > "$work/kit.log" 2>&1 || { cat "$work/kit.log"; bad "gpu_kit.sh failed"; exit 1; }
line=$(grep '^gpu_kit: .* MiB' "$work/kit.log")
mib=$(sed -E 's/^gpu_kit: [^:]+: ([0-9.]+) MiB.*/\1/' <<<"$line")
if awk -v m="$mib" 'BEGIN { exit !(m > 1 && m < 64) }'; then ok "kit size: $line"; else bad "kit size '$mib' MiB not in (1, 64): $line"; fi
mkdir -p "$work/unpacked" && tar -C "$work/unpacked" -xJf "$work/kit/gpu-kit.tar.xz"
root=$work/unpacked/gpu-kit
for f in bin/train_gpt2cu bin/backend_cuda_gpu_test bin/bench_cuda_ops lib/libopenblas.so.0 lib/libmpi.so.40 \
         data/gpt2/encoder.json data/tinyshakespeare/tiny_shakespeare_train.bin env.sh MANIFEST.txt; do
  [ -s "$root/$f" ] || bad "kit lacks $f"
done
grep -q "^gpu archs *sm_80 sm_90" "$root/MANIFEST.txt" && ok "manifest: $(grep '^gpu archs' "$root/MANIFEST.txt")" \
  || bad "manifest gpu archs: $(grep '^gpu archs' "$root/MANIFEST.txt")"

# 2. self-containment: libraries resolve into the kit, glibc or CUDA's lib64.
outside=$( (source "$root/env.sh"; ldd "$root"/bin/* "$root"/lib/*.so*) | awk '$2 == "=>" {print $3}' | sort -u \
  | grep -vE "^$root/lib/|/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64)\.so|/usr/local/cuda[^/]*/(targets/[^/]+/)?lib(64)?/lib(cu|nccl)")
if [ -z "$outside" ]; then ok "every library of the kit's binaries resolves into the kit, glibc or CUDA"
else bad "libraries from outside the kit: $outside"; fi
if unshare -m true 2>/dev/null; then
  mkdir -p "$work/glibc"
  for l in libc.so.6 libm.so.6 ld-linux-x86-64.so.2 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2; do
    cp -L "/usr/lib/x86_64-linux-gnu/$l" "$work/glibc/"
  done
  # Inside a private mount namespace the system's library folder holds glibc alone.
  unshare -m bash -c 'source "$1/env.sh"; mount --bind "$2" /usr/lib/x86_64-linux-gnu || exit 9
    "$1/bin/train_gpt2cu" --device cpu --model d2 --config n_embd=32,n_head=2,max_seq=32 -B 2 -T 16 \
      --train-data "$1/data/tinyshakespeare/tiny_shakespeare_train.bin" --max-steps 2 --val-every 0 --sample-every 0 \
    && "$1/bin/backend_cuda_gpu_test" --gtest_list_tests | grep -c "^  "' _ "$root" "$work/glibc" > "$work/hidden.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "step     2/2" "$work/hidden.log"; then
    ok "kit runs with /usr/lib/x86_64-linux-gnu reduced to glibc: $(tail -1 "$work/hidden.log") GPU test cases listed"
  else bad "kit with system libraries hidden (rc $rc):"; tail -5 "$work/hidden.log"; fi
else
  echo "note: mount namespaces are not permitted here; the ldd check above stands alone"
fi

# 3. no GPU, no rehearsal: a plain refusal within seconds.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "note: a GPU is visible; the no-GPU refusal is not checked here"
else
  start=$(date +%s%N)
  scripts/gpu_check.sh "$work/nogpu" > "$work/nogpu.log" 2>&1; rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [ $rc -eq 2 ] && grep -q "no NVIDIA GPU is visible" "$work/nogpu.log" && [ $ms -lt 5000 ]; then
    ok "no GPU: exit 2 in ${ms} ms: $(head -1 "$work/nogpu.log")"
  else bad "no-GPU refusal: rc $rc after ${ms} ms: $(cat "$work/nogpu.log")"; fi
fi

# 4. the quick rehearsal, every phase.
scripts/gpu_check.sh --rehearsal --quick --kit "$work/kit" "$work/out" > "$work/rehearsal.log" 2>&1; rc=$?
sed -n '/===== summary/,$p' "$work/rehearsal.log"
[ $rc -eq 0 ] || { bad "rehearsal exit $rc"; tail -30 "$work/rehearsal.log"; }
/usr/bin/python3 - "$work/out" <<'PY' || fails=$((fails + 1))
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "gpu_check_summary.json")))
report = open(os.path.join(out, "gpu_check_report.txt")).read()
phases = {p["name"]: p["status"] for p in s["phases"]}
want = ["env", "binaries", "op_tests", "train_tests", "zero3", "sanitizer", "attention", "bench_ops", "hf_client",
        "throughput"]
assert list(phases) == want, phases
try:
    import transformers  # noqa: F401
    has_transformers = True
except ImportError:
    has_transformers = False
# hf_client needs transformers; without it the phase says so ("skipped"), and only then
assert phases.pop("hf_client") == ("pass" if has_transformers else "skipped"), s["phases"]
assert has_transformers or any(p["name"] == "hf_client" and "transformers is not installed" in p["detail"]
                               for p in s["phases"]), s["phases"]
assert all(v == "pass" for v in phases.values()), phases
m = s["metrics"]
for key in ("op_tests", "memcheck", "racecheck", "synccheck"):
    assert int(m[f"{key}.passed"]) > 0 and int(m[f"{key}.failed"]) == 0, (key, m)
assert m["kit.checked"].startswith("unpacked"), m["kit.checked"]
# ZeRO-3 on the device and offloaded, bitwise ZeRO-2 (one emulator worker: no control run)
for key in ("zero3.stage3", "zero3.offload"):
    assert m[key] == "identical (2 losses, model.bin)", (key, m[key])
assert m["zero3.repeat"].startswith("not run"), m["zero3.repeat"]
times = [t.split() for t in m["zero3.step_ms"].split(",")]  # "z2 12.3 ms,z3 ...": every run timed
assert [t[0] for t in times] == ["z2", "z3", "z3_offload"] and all(float(t[1]) > 0 and t[2] == "ms" for t in times), times
tp = s["throughput"]
assert tp["ours"]["tok_per_s"] > 0 and tp["compact"]["tok_per_s"] > 0, tp
assert tp["speed_ours_over_compact"] > 0 and tp["ours"]["peak_mem_mib"] > 0, tp
hf = tp["hf"]["status"]
if has_transformers:
    assert hf == "ok", hf
else:
    assert hf.startswith("skipped: transformers is not installed"), hf
assert "fp32: worst relative difference" in report and "===== summary =====" in report
print(f"ok   rehearsal: {len(phases)} phases pass; op tests {m['op_tests.passed']} passed; zero3: {m['zero3.offload']}; "
      f"ours {tp['ours']['tok_per_s']:.0f} tok/s, compact {tp['compact']['tok_per_s']:.0f} tok/s; hf: {hf}")
PY

# 5. a truncated kit: the binaries phase fails by name and the check exits 1.
mkdir -p "$work/badkit" && head -c 100000 "$work/kit/gpu-kit.tar.xz" > "$work/badkit/gpu-kit.tar.xz"
scripts/gpu_check.sh --rehearsal --quick --kit "$work/badkit" "$work/bad" > "$work/bad.log" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -qE "^binaries +fail" "$work/bad.log" && grep -q "gpu_check: FAIL" "$work/bad.log"; then
  ok "truncated kit: exit 1, $(grep -E '^binaries +fail' "$work/bad.log")"
else bad "truncated kit: rc $rc"; tail -20 "$work/bad.log"; fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]

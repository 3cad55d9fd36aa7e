# The phases of scripts/gpu_check.sh, sourced by it and by each phase's subshell
# (which runs under `timeout`). Shared state lives in files under $work:
# bins.env (which programs each phase runs), metrics.tsv (KEY<TAB>VALUE).

metric() { printf '%s\t%s\n' "$1" "$2" >> "$METRICS"; echo "metric $1 = $2"; }
skip() { echo "$1" > "$work/skip_reason"; echo "skipped: $1"; exit 77; }
fail_with() { echo "$1" > "$work/fail_reason"; echo "FAIL: $1"; }  # the phase's detail in the summary
is_rehearsal() { [ "$rehearsal" = 1 ]; }
is_quick() { [ "$quick" = 1 ]; }

pick_python() {  # the Python with torch: the GPU machine's python3, Debian's /usr/bin/python3 here
  local p
  for p in ${GPU_CHECK_PYTHON:-} python3 /usr/bin/python3; do
    if "$p" -c 'import torch' 2>/dev/null; then PY=$p; return 0; fi
  done
  PY=python3
}

# Polls the peak GPU memory in use (MiB; nvidia-smi, the whole GPU) or, in
# rehearsal, the peak resident memory of PID, into FILE until PID exits.
watch_peak_memory() {  # PID FILE
  local pid=$1 file=$2 peak=0 now
  while kill -0 "$pid" 2>/dev/null; do
    if is_rehearsal; then now=$(( $(ps -o rss= -p "$pid" 2>/dev/null || echo 0) / 1024 ))
    else now=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1); fi
    [ "${now:-0}" -gt "$peak" ] 2>/dev/null && peak=$now && echo "$peak" > "$file"
    sleep 0.5
  done
}

run_watched() {  # FILE CMD... : runs CMD with watch_peak_memory beside it
  local file=$1; shift
  echo 0 > "$file"
  "$@" & local pid=$!
  watch_peak_memory "$pid" "$file" &
  wait "$pid"; local rc=$?
  wait
  return $rc
}

phase_env() {
  if is_rehearsal; then
    echo "rehearsal: no GPU; CUDA code runs on the emulator (emu/), CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
    metric gpu.name "emulated (rehearsal)"
  else
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv
    metric gpu.name "$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0)"
    metric gpu.driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
    metric gpu.compute_cap "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0)"
    metric gpu.memory_mib "$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)"
    nvidia-smi | sed -n '1,4p'
  fi
  local nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  [ -x "$nvcc" ] && metric cuda.nvcc "$("$nvcc" --version | grep -oE 'release [0-9.]+' | cut -d' ' -f2)"
  pick_python
  metric torch.version "$("$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo missing)"
  "$PY" -c 'import transformers; print(transformers.__version__)' >/dev/null 2>&1 \
    && metric transformers.version "$("$PY" -c 'import transformers; print(transformers.__version__)')"
  metric host.cpus "$(nproc)"
  metric host.glibc "$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')"
  return 0
}

# Unpacks the kit into $work/kit and checks it fits this machine. Prints the kit
# root; returns 1 when there is no kit, 2 when it is unusable.
unpack_kit() {
  local tarball need have
  tarball=$(cd "$repo" && realpath -m "$kit_dir/gpu-kit.tar.xz")
  [ -f "$tarball" ] || { echo "no kit at $tarball" >&2; return 1; }
  mkdir -p "$work/kit" && tar -C "$work/kit" -xJf "$tarball" || { echo "gpu_check: cannot unpack $tarball" >&2; return 2; }
  need=$(sed -n 's/^needs glibc *//p' "$work/kit/gpu-kit/MANIFEST.txt")
  have=$(ldd --version | head -1 | grep -oE '[0-9]+\.[0-9]+$')
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "gpu_check: the kit needs glibc $need, this machine has $have" >&2; return 2
  fi
  sed -n '1,7p' "$work/kit/gpu-kit/MANIFEST.txt" >&2
  echo "$work/kit/gpu-kit"
}

# The folders holding the CUDA libraries the kit does not carry (cuBLAS, cuBLASLt,
# cudart, NCCL, cuDNN), joined by ':': the toolkit's lib64, the loader's cache, and the
# nvidia-* Python wheels PyTorch brings (NCCL and cuDNN may live only there; the
# trainer loads cuDNN at run time and runs flash without it).
cuda_library_path() {
  local d dirs=() lib
  for lib in libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
    local wheel=${lib#lib}
    wheel=${wheel%%.*}
    for d in "${CUDA_HOME:-}/lib64" /usr/local/cuda/lib64 \
             "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")/../lib64" \
             "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}' | xargs -r dirname)" \
             "$("$PY" -c "import nvidia.$wheel, os; print(os.path.join(list(nvidia.$wheel.__path__)[0], 'lib'))" 2>/dev/null)"; do
      [ -n "$d" ] && [ -e "$d/$lib" ] && { dirs+=("$d"); break; }
    done
  done
  local IFS=:
  echo "${dirs[*]}"
}

phase_binaries() {
  local root arch cc krc
  root=$(unpack_kit); krc=$?
  [ $krc -ge 2 ] && return 1
  if is_rehearsal; then
    # The emulated builds stand in for the GPU ones; the kit, when present, is still unpacked and run on the CPU.
    for b in build/test/backend_cuda/backend_cuda_test build/test/backend_cuda/backend_cuda_asan_test \
             build/train_gpt2cu_emu build/dev/cuda/bench_cuda_ops_emu train_gpt2cu build/test/e2e/hf_logits; do
      [ -x "$b" ] || { echo "gpu_check: $b is not built (make -j2 test builds it)"; return 1; }
    done
    if [ $krc -eq 0 ]; then
      (source "$root/env.sh" && "$root/bin/train_gpt2cu" --device cpu --model d2 --config n_embd=32,n_head=2,max_seq=32 \
        -B 2 -T 16 --train-data "$root/data/tinyshakespeare/tiny_shakespeare_train.bin" --max-steps 2 \
        --val-every 0 --sample-every 0 | tail -2) || { echo "gpu_check: the kit's trainer does not run here"; return 1; }
      metric kit.checked "unpacked; its train_gpt2cu ran 2 CPU steps"
    else
      metric kit.checked "no kit at $kit_dir/ (make gpu-kit)"
    fi
    cat > "$work/bins.env" <<EOF
OPS_TEST=$repo/build/test/backend_cuda/backend_cuda_test
MEMCHECK=$repo/build/test/backend_cuda/backend_cuda_asan_test
CUDA_TRAINER=$repo/build/train_gpt2cu_emu
CPU_TRAINER=$repo/train_gpt2cu
HF_LOGITS=$repo/build/test/e2e/hf_logits
BENCH_OPS="$repo/build/dev/cuda/bench_cuda_ops_emu --smoke"
DATA=$repo/data
EOF
    return 0
  fi
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 | tr -d .)
  if [ $krc -eq 0 ] && grep -q "gpu archs.*sm_$cc" "$root/MANIFEST.txt"; then
    metric binaries "kit ($(sed -n 's/^commit *//p' "$root/MANIFEST.txt"))"
    source "$root/env.sh"
    pick_python
    local libs; libs=$(cuda_library_path)
    [ -n "$libs" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$libs"
    if ldd "$root/bin/"* | grep 'not found'; then echo "gpu_check: libraries missing (above)"; return 1; fi
    cat > "$work/bins.env" <<EOF
source $root/env.sh
export LD_LIBRARY_PATH=\$LD_LIBRARY_PATH:$libs
OPS_TEST=$root/bin/backend_cuda_gpu_test
CUDA_TRAINER=$root/bin/train_gpt2cu
CPU_TRAINER=$root/bin/train_gpt2cu
HF_LOGITS=$root/bin/hf_logits
BENCH_OPS=$root/bin/bench_cuda_ops
DATA=$root/data
EOF
    return 0
  fi
  # Without a usable kit: build for this GPU (needs the -dev packages, and data/ carried along).
  echo "no usable kit (absent, or not built for sm_$cc): building here for the local GPU"
  arch="-gencode arch=compute_$cc,code=sm_$cc"
  make -j"$(nproc)" CUDA_GENCODE="$arch" OPT="-O3 -march=native" gpu-binaries build/test/e2e/hf_logits || return 1
  [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || { echo "gpu_check: no data/ (carry it, or the kit)"; return 1; }
  metric binaries "built here for sm_$cc"
  cat > "$work/bins.env" <<EOF
OPS_TEST=$repo/build/gpu/backend_cuda_gpu_test
CUDA_TRAINER=$repo/build/gpu/train_gpt2cu
CPU_TRAINER=$repo/build/gpu/train_gpt2cu
HF_LOGITS=$repo/build/test/e2e/hf_logits
BENCH_OPS=$repo/build/dev/cuda/bench_cuda_ops
DATA=$repo/data
EOF
}

load_bins() {
  [ -f "$work/bins.env" ] || skip "no binaries (the binaries phase failed)"
  source "$work/bins.env"
  pick_python
}

# Runs a GoogleTest binary with a JSON report; records passed/failed/skipped and the failed names.
gtest_metrics() {  # KEY CMD...
  local key=$1 rc; shift
  "$@" --gtest_output="json:$work/$key.json" --gtest_brief=1; rc=$?
  "$PY" - "$work/$key.json" "$key" >> "$METRICS" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
cases = [(s["name"] + "." + t["name"], t) for s in r["testsuites"] for t in s["testsuite"]]
failed = [n for n, t in cases if t.get("failures")]
skipped = [n for n, t in cases if t.get("result") == "SKIPPED"]
k = sys.argv[2]
print(f"{k}.passed\t{len(cases) - len(failed) - len(skipped)}\n{k}.failed\t{len(failed)}\n{k}.skipped\t{len(skipped)}")
if failed:
    print(f"{k}.failed_names\t{' '.join(failed)}")
PY
  grep "^$key\." "$METRICS"
  return $rc
}

phase_op_tests() {
  load_bins
  # fp32 ops (each case under three "run orders" = three runs on a GPU), bf16 ops, one model step.
  # A quick rehearsal leaves out the flash shape sweep (CudaFlashAttention.*, the slowest on
  # the emulator: 3xTF32 runs three mma per product; CI runs it in backend_cuda_test).
  local filter='*'
  is_rehearsal && is_quick && filter='-CudaFlashAttention.*'
  gtest_metrics op_tests "$OPS_TEST" --gtest_filter="$filter"
}

phase_train_tests() {
  load_bins
  CUDA_TRAINER=$CUDA_TRAINER CPU_TRAINER=$CPU_TRAINER PYTHON=$PY bash test/e2e/cuda_emu_train_test.sh
}

# ZeRO-3 and the offloaded optimizer on one GPU: 2 steps of d12 bf16 at
# --zero-stage 3, on the device and with --offload-optimizer cpu, against the
# same run at --zero-stage 2. One rank's stage 3 gathers its own bits, and the
# host's AdamW rounds as the device kernel does (docs/distributed.md), so the
# losses (--log-jsonl) and model.bin must be identical: a difference is a
# finding (metrics zero3.stage3, zero3.offload). On a GPU a second stage-2 run
# is the control: the encoder backward's float atomics may add in another order
# from run to run, and then no comparison here means anything.
phase_zero3() {
  load_bins
  local d=$work/zero3 name rc model=(--model d12 -B 4 -T 256) runs=(z2 z2_again z3 z3_offload)
  if is_rehearsal; then
    model=(--model d2 --config n_embd=32,n_head=2,max_seq=32 -B 2 -T 16)
    export GPT2_EMU_THREADS=1  # one emulator worker: the atomics add in one order, no control needed
    runs=(z2 z3 z3_offload)
  fi
  local args=(--device cuda --dtype bf16 "${model[@]}" --max-steps 2 --val-every 0 --sample-every 0
              --train-data "$DATA/tinyshakespeare/tiny_shakespeare_train.bin")
  mkdir -p "$d"
  local times=()
  for name in "${runs[@]}"; do
    local flags=(--zero-stage 2)
    case $name in z3) flags=(--zero-stage 3) ;; z3_offload) flags=(--zero-stage 3 --offload-optimizer cpu) ;; esac
    "$CUDA_TRAINER" "${args[@]}" "${flags[@]}" --output-dir "$d/$name" --log-jsonl "$d/$name.jsonl" \
      > "$d/$name.log" 2>&1; rc=$?
    [ $rc -eq 0 ] || { tail -5 "$d/$name.log"; fail_with "$name: the trainer exited $rc"; return 1; }
    rm -f "$d/$name"/state_*.bin "$d/$name"/model_0*.bin  # the final checkpoint's optimizer state: GBs at d12
    echo "$name: $(grep -E '^step' "$d/$name.log" | tr -s ' ' | cut -d'|' -f1,2 | paste -sd' ')"
    times+=("$name $("$PY" -c 'import json, sys
print([r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "train"][-1]["ms"])' "$d/$name.jsonl") ms")
  done
  metric zero3.step_ms "$(IFS=','; echo "${times[*]}")"  # the last step's, update included (offload: the host AdamW)
  local repeat stage3 offload
  repeat="not run (rehearsal: one emulator worker)" stage3=$(same_run "$d" z2 z3) offload=$(same_run "$d" z2 z3_offload)
  is_rehearsal || repeat=$(same_run "$d" z2 z2_again)
  metric zero3.config "${model[*]} bf16, 2 steps, 1 rank"
  metric zero3.repeat "$repeat"
  metric zero3.stage3 "$stage3"
  metric zero3.offload "$offload"
  case $repeat in identical*|"not run"*) ;; *) skip "stage 2 run twice is not bitwise repeatable here ($repeat)" ;; esac
  local bad=()
  case $stage3 in identical*) ;; *) bad+=("stage 3 vs stage 2: $stage3") ;; esac
  case $offload in identical*) ;; *) bad+=("stage 3 offloaded vs stage 2: $offload") ;; esac
  [ ${#bad[@]} -eq 0 ] || { fail_with "$(IFS=';'; echo "${bad[*]}")"; return 1; }
}

# same_run DIR A B: "identical (N losses, model.bin)" or what differs first.
same_run() {
  local d=$1 a=$2 b=$3 losses
  losses=$("$PY" - "$d/$a.jsonl" "$d/$b.jsonl" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if r.get("type") == "train"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
diff = [k for k, (x, y) in enumerate(zip(a, b), 1) if x != y]
if len(a) != len(b) or not a:
    print(f"losses: {len(a)} against {len(b)} steps")
elif diff:
    k = diff[0]
    print(f"losses differ from step {k} ({a[k - 1]!r} against {b[k - 1]!r}, relative {abs(a[k - 1] - b[k - 1]) / abs(a[k - 1]):.1e})")
else:
    print(f"ok {len(a)}")
PY
  )
  case $losses in
    ok*) ;;
    *) echo "$losses"; return ;;
  esac
  if cmp -s "$d/$a/model.bin" "$d/$b/model.bin"; then echo "identical (${losses#ok } losses, model.bin)"
  else echo "same losses, model.bin differs ($(cmp -l "$d/$a/model.bin" "$d/$b/model.bin" 2>/dev/null | wc -l) bytes)"; fi
}

# compute-sanitizer's three tools on the op tests; in rehearsal their emulated
# stand-ins: ASan (memcheck), the random run order (racecheck) and the
# emulator's always-on barrier checks under the reverse order (synccheck).
phase_sanitizer() {
  load_bins
  local filter rc=0 tool
  filter=$(is_quick && echo '*CudaOps*layernorm*:*CudaOps*attention*' || echo '*CudaOps*:*CudaBf16*')
  if is_rehearsal; then
    gtest_metrics memcheck "$MEMCHECK" --gtest_filter="$filter" || rc=1
    GPT2_EMU_ORDER=random gtest_metrics racecheck "$OPS_TEST" --gtest_filter="$filter" || rc=1
    GPT2_EMU_ORDER=reverse gtest_metrics synccheck "$OPS_TEST" --gtest_filter="$filter" || rc=1
    metric sanitizer.tools "emulated stand-ins: ASan build, random and reverse run orders"
    return $rc
  fi
  command -v compute-sanitizer >/dev/null || skip "compute-sanitizer not on PATH"
  for tool in memcheck racecheck synccheck; do
    # racecheck and synccheck are slow: the fp32 ops once each is enough to see shared-memory hazards.
    [ "$tool" != memcheck ] && filter=$(is_quick && echo '*CudaOps*layernorm*' || echo '*CudaOps*')
    compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$OPS_TEST" --gtest_filter="$filter" --gtest_brief=1 > "$work/$tool.log" 2>&1
    local r=$?
    tail -5 "$work/$tool.log"
    metric "sanitizer.$tool" "$([ $r -eq 0 ] && echo clean || echo "exit $r: $(grep -m1 -E 'ERROR SUMMARY|Invalid|hazard' "$work/$tool.log")")"
    [ $r -eq 0 ] || rc=1
    is_quick && [ "$tool" = racecheck ] && break
  done
  return $rc
}

# d12's attention (bf16, B=1, T=1024, C=768, NH=12) with each kernel: cuDNN's fused
# attention, our flash kernels, the classic path. Per element against the reference on
# this GPU (the op tests' CudnnAttention.* and the flash bf16 sweep), then forward and
# backward timed per kernel (metrics attention.KIND.OP_us) for docs/gpu.md, where each
# sits beside dev/roofline/roofline.py's prediction. cudnn_available says whether
# libcudnn.so.9 loaded (without it the cudnn rows are missing and the phase says why).
phase_attention() {
  load_bins
  local rc=0
  gtest_metrics attention_tests "$OPS_TEST" \
    --gtest_filter='CudnnAttention.*:CudaFlashAttention.Bf16MatchesFlashReferencePerElement' || rc=1
  local bench=($BENCH_OPS)
  is_rehearsal && bench+=(--smoke)
  is_rehearsal || bench+=(--budget "$(is_quick && echo 0.05 || echo 0.3)" --no-cpu)
  # one process, one CUDA backend per kernel (rows attention_forward[KIND], ...)
  if ! "${bench[@]}" --bf16 --attention cudnn,flash,classic attention > "$work/attention.txt" 2>&1; then
    cat "$work/attention.txt"
    if grep -q "cuDNN is not installed" "$work/attention.txt"; then
      # the cudnn backend cannot start here: the other two still count
      metric attention.cudnn "not installed on this machine"
      "${bench[@]}" --bf16 --attention flash,classic attention > "$work/attention.txt" 2>&1 || rc=1
    else
      rc=1  # cuDNN refused or failed: a finding, named above
    fi
  fi
  cat "$work/attention.txt"
  awk '$1 ~ /^attention_.*\[/ && $0 ~ /T=1024/ {
         split($1, p, /[][]/); printf "attention.%s.%s_us\t%s\n", p[2], p[1], $(NF-2) }' \
    "$work/attention.txt" >> "$METRICS"
  grep "^attention\." "$METRICS"
  return $rc
}

phase_bench_ops() {
  load_bins
  local budget; budget=$(is_quick && echo 0.02 || echo 0.2)  # seconds of timing per case and backend
  # Emulated timings mean nothing: a rehearsal proves the benchmark runs (its first cases).
  if is_rehearsal; then $BENCH_OPS --smoke; return; fi
  $BENCH_OPS --budget "$budget" || return 1
  is_quick || $BENCH_OPS --budget "$budget" --bf16
}

# A real Hugging Face client, on the CPU: transformers'
# save_pretrained directory loaded by ours (hf_logits, the trainer's loader)
# gives transformers' logits; our --save-hf export of a 2-step fine-tune,
# loaded by GPT2LMHeadModel.from_pretrained, gives ours. Both within
# hf_reference.py's REL_TOL (fp32 against float64). Skipped without transformers.
phase_hf_client() {
  load_bins
  "$PY" -c 'import transformers' 2>/dev/null || skip "transformers is not installed for $PY"
  local d=$work/hf_client ref=$repo/test/e2e/hf_reference.py rc=0
  mkdir -p "$d"
  metric hf_client.transformers "$("$PY" -c 'import transformers; print(transformers.__version__)')"
  "$PY" "$ref" save-pretrained "$d/sp" || return 1
  "$HF_LOGITS" "$d/sp/hf" "$d/sp/tokens.bin" 2 8 "$d/sp/ours.bin" || return 1
  "$PY" "$ref" compare "$d/sp" "$d/sp/ours.bin" || rc=1
  metric hf_client.save_pretrained_into_ours "$([ $rc = 0 ] && echo ok || echo FAIL)"
  "$PY" "$ref" make "$d/mk" > /dev/null || return 1
  "$CPU_TRAINER" --device cpu --model "$d/mk/hf" --train-data "$d/mk/train.bin" -B 2 -T 8 --max-steps 2 \
    --val-every 0 --sample-every 0 --output-dir "$d/run" --save-hf "$d/export" > "$d/train.log" 2>&1 ||
    { tail -5 "$d/train.log"; return 1; }
  tail -2 "$d/train.log"
  "$HF_LOGITS" "$d/export" "$d/mk/tokens.bin" 2 8 "$d/export.ours.bin" || return 1
  local r=0
  "$PY" "$ref" transformers-logits "$d/export" "$d/mk/tokens.bin" 2 8 "$d/export.ours.bin" || r=1
  metric hf_client.save_hf_into_transformers "$([ $r = 0 ] && echo ok || echo FAIL)"
  return $(( rc | r ))
}

# Tokens/s, MFU and peak memory of one d12 bf16 training step: ours, then
# transformers' GPT2LMHeadModel, then the compact torch.compile model, on the
# same config, batch and shard. B: the largest of 64, 32, 16, 8 that ours runs.
phase_throughput() {
  load_bins
  local L=12 NH=12 C=768 T=1024 steps=12 tsteps=10 warm=3 B mem r tps
  local shard=$DATA/tinyshakespeare/tiny_shakespeare_train.bin
  local Bs="64 32 16 8" model_args=(--model d12)
  if is_quick; then steps=6 tsteps=4 warm=2; fi
  if is_rehearsal; then L=2 NH=2 C=64 T=64 Bs=2 steps=4 tsteps=3 warm=1
    model_args=(--model d2 --config "n_embd=$C,n_head=$NH,max_seq=$T"); fi
  metric throughput.config "L=$L NH=$NH C=$C T=$T"
  for B in $Bs; do
    run_watched "$work/mem_ours" "$CUDA_TRAINER" --device cuda --dtype bf16 "${model_args[@]}" -B "$B" -T "$T" \
      --train-data "$shard" --val-data "$shard" --max-steps "$steps" --val-every 0 --sample-every 0 \
      --log-jsonl "$work/ours_$B.jsonl" > "$work/ours_$B.log" 2>&1 && break
    tail -3 "$work/ours_$B.log"; B=""
  done
  [ -n "$B" ] || { echo "ours: no batch size ran"; return 1; }
  tail -3 "$work/ours_$B.log"
  # Median over the steps after the first two (allocation, cuBLASLt heuristics).
  tps=$("$PY" -c 'import json,statistics,sys; r=[json.loads(l) for l in open(sys.argv[1])]
t=[x["tok_per_s"] for x in r if x.get("type")=="train"][2:]; print(statistics.median(t))' "$work/ours_$B.jsonl")
  metric throughput.B "$B"
  metric throughput.ours.tok_per_s "$tps"
  metric throughput.ours.peak_mem_mib "$(cat "$work/mem_ours")"
  local dev=cuda; is_rehearsal && dev=cpu
  for impl in hf compact; do
    if [ "$impl" = hf ] && ! "$PY" -c 'import transformers' 2>/dev/null; then
      metric "throughput.$impl.status" "skipped: transformers is not installed for $PY"; continue
    fi
    r=$(run_watched "$work/mem_$impl" "$PY" dev/gpu/bench_torch_gpt2.py --impl "$impl" --device "$dev" --data "$shard" \
        --L $L --NH $NH --C $C --maxT $T -B "$B" -T $T --steps $tsteps --warmup $warm 2>"$work/$impl.err" | grep '^RESULT')
    if [ -z "$r" ]; then tail -5 "$work/$impl.err"; metric "throughput.$impl.status" "failed: $(tail -1 "$work/$impl.err")"; continue; fi
    echo "$r"
    metric "throughput.$impl.status" ok
    metric "throughput.$impl.tok_per_s" "$(sed -E 's/.*tok_per_s=([^ ]+).*/\1/' <<<"$r")"
    metric "throughput.$impl.peak_mem_mib" "$(cat "$work/mem_$impl")"
    metric "throughput.$impl.detail" "$(cut -d' ' -f6- <<<"$r")"
  done
  return 0
}

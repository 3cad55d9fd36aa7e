#!/usr/bin/env bash
# --dry-run W[,W...]: the memory table of a configuration at several world
# sizes, allocating nothing (train/memory_plan.cpp).
#   1. accurate to the allocator: for a tiny model, the table's params, grads,
#      optimizer and activations equal the "| memory/rank" line that the
#      emulated CUDA trainer prints after really allocating them, under
#      mpirun -np 2 (ZeRO 0/1/2/3, bf16), -np 3 (ZeRO-2/3, fp32) and one rank
#      (ZeRO-3, bf16), and with the optimizer offloaded (its host bytes too);
#   1b. accurate to the device: the table's total (in bytes) equals what the
#      emulated trainer's CUDA backend has allocated after step 1, and
#      cudaMemGetInfo on the emulator's device shows exactly that plus the
#      backend's own workspaces (one rank, so no communicator memory; fp32 and
#      bf16, recompute 0 and 2, two micro-batches per step);
#   2. ZeRO-2 keeps its promise at GPT-2 sizes: d12 (B=64) and d48 (B=4) at 8
#      and 64 ranks, bf16: gradient bytes per rank <= 1/W of the parameters'
#      plus the staging window (two layer buffers and their two receive
#      buffers, which also carry the wte chunks, plus the rest unit wpe+lnf
#      and its receive buffer), and no GPU, data or MPI needed;
#   3. bad lists are refused.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh dry_run "$EMU"
export GPT2_EMU_THREADS=1
unset GPT2_TEST_WTE_CHUNK_ROWS GPT2_ZERO2_SLICE_ELEMS
/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256

common=(--model d4 --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256 -B 2 -T 32
        --device cuda --threads 1)
# plan_line NP ARGS...: the dry run's row for world NP, in the banner's words.
plan_line() {
  local np=$1; shift
  "$EMU" "${common[@]}" --dry-run "$np" "$@" | awk -v w="$np" '$1 == w {
    printf "params %s %s, grads %s %s, optimizer %s %s, activations %s %s", $2, $3, $4, $5, $7, $8, $9, $10
    if (NF > 13) printf "; optimizer on the host %s %s", $14, $15 }'
}
for spec in "2 0 bf16" "2 1 bf16" "2 2 bf16" "3 2 fp32" "2 3 bf16" "3 3 fp32" "1 3 bf16" "2 3 bf16 cpu" "1 0 fp32 cpu"; do
  set -- $spec
  np=$1 z=$2 dt=$3 off=${4:-none}
  got=$(GPT2_EMU_DEVICE_COUNT=$np timeout -k 10 90 mpirun --allow-run-as-root --oversubscribe -x GPT2_EMU_THREADS \
        -x GPT2_EMU_DEVICE_COUNT -np "$np" "$EMU" "${common[@]}" --dtype "$dt" --zero-stage "$z" --max-steps 1 \
        --offload-optimizer "$off" --val-every 0 --sample-every 0 --train-data "$W/train.bin" 2>&1 |
        sed -n 's/^| memory\/rank  //p')
  want=$(plan_line "$np" --dtype "$dt" --zero-stage "$z" --offload-optimizer "$off")
  what="-np $np ZeRO-$z $dt$([ $off = cpu ] && echo ', optimizer offloaded')"
  if [ -n "$got" ] && [ "$got" == "$want" ]; then pass "$what: --dry-run $np = the trainer's allocations: $got"
  else bad "$what: trainer '$got', dry run '$want'"; fi
done

for spec in "fp32 0" "bf16 0" "bf16 2"; do
  set -- $spec
  dt=$1 rc=$2
  flags=(--dtype "$dt" --recompute "$rc" --total-batch-tokens 128)
  line=$("$EMU" "${common[@]}" "${flags[@]}" --max-steps 1 --val-every 0 --sample-every 0 \
         --train-data "$W/train.bin" 2>&1 | grep '^| device mem')
  want=$("$EMU" "${common[@]}" "${flags[@]}" --dry-run 1 | awk '$1 == 1 { print $13 }')
  in_use=$(sed -n 's/.*cudaMemGetInfo, \([0-9]*\) B).*/\1/p' <<<"$line")
  alloc=$(sed -n 's/.*= allocations [^(]*(\([0-9]*\) B).*/\1/p' <<<"$line")
  ws=$(sed -n 's/.*backend workspaces \([0-9]*\) B.*/\1/p' <<<"$line")
  if [ -n "$want" ] && [ "$alloc" == "$want" ] && [ -n "$ws" ] && [ "$in_use" == "$((alloc + ws))" ]; then
    pass "$dt --recompute $rc: --dry-run total $want B = the backend's allocations; cudaMemGetInfo $in_use B = that + $ws B of workspaces"
  else bad "$dt --recompute $rc: dry run '$want' B, trainer: '$line'"; fi
done

# The staging window bound of ZeRO-2, per rank, in elements of the parameters.
check_promise() {  # MODEL L C B
  local model=$1 L=$2 C=$3 B=$4 out
  if ! out=$(timeout 60 "$EMU" --model "$model" --device cuda --dtype bf16 -B "$B" -T 1024 --zero-stage 2 \
             --dry-run 8,64 2>&1); then bad "$model --dry-run 8,64 failed: $out"; return; fi
  echo "$out" | sed 's/^/     /'
  local P=$(echo "$out" | sed -n 's/.*, \([0-9]*\) parameters;.*/\1/p')
  for w in 8 64; do
    local ratio=$(echo "$out" | awk -v w=$w '$1 == w { print $6 }')
    if awk -v r="$ratio" -v w=$w -v P="$P" -v L="$L" -v C="$C" 'BEGIN {
         layer = 12 * C * C + 13 * C; rest = 1024 * C + 2 * C
         bound = 1 / w + (4 * layer + 2 * rest) / P + 1e-3
         exit !(r > 0 && r <= bound && r < 0.5) }'; then
      pass "$model ZeRO-2 bf16 at $w ranks: gradients $ratio of one dense gradient (1/$w + staging window)"
    else bad "$model ZeRO-2 at $w ranks: gradients '$ratio' of a dense gradient, above 1/$w + the staging window"; fi
  done
}
check_promise d12 12 768 64
check_promise d48 48 1600 4

for badlist in "0" "8,,64" "x" "8,-1"; do
  if out=$("$EMU" "${common[@]}" --dry-run "$badlist" 2>&1); then bad "--dry-run '$badlist' accepted"
  elif grep -q -- "--dry-run: invalid value" <<<"$out"; then pass "--dry-run '$badlist' refused: $(echo "$out" | head -n 1)"
  else bad "--dry-run '$badlist': unclear error: $out"; fi
done

[ $fail = 0 ] && echo "dry_run_test: all passed"
exit $fail

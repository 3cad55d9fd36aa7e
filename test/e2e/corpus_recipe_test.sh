#!/usr/bin/env bash
# scripts/prepare_corpus.sh against the GPU sbatch scripts that read its shards:
#   1. the recipe on a generated corpus (a directory of JSONL + text files, one more JSONL file
#      given by name) with its default prefix writes PREFIX_val_000000.bin, PREFIX_train_00000N.bin;
#   2. the globs the sbatch scripts pass to the trainer - taken from the scripts themselves, run
#      with a stand-in `srun` that records its command line - read exactly those shards (every
#      shard read, nothing else), and are the globs the recipe prints;
#   3. ./train_gpt2cu --device cpu trains 2 steps on them with a tiny config: with the recipe's
#      printed flags, and through train_1node_gpus.sbatch -> run_train.sh -> (stand-in) srun;
#   4. GPT2_DATA_PREFIX moves both; a prefix with no shards fails before srun, naming the glob
#      and the recipe; recipe errors (no input, empty dir, --no-shard-index, .gz) exit non-zero.
# test-timeout: 300
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
mkdir -p build/test/e2e
work=$(mktemp -d "$root/build/test/e2e/corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
tiny=(--device cpu --model d2 --config n_embd=32,n_head=2,max_seq=32 -B 2 -T 16 --max-steps 2
      --val-every 0 --sample-every 0)

# A scratch "submit directory": the repository's scripts and binaries, its own data/ and out/.
sub=$work/submit
mkdir -p "$sub/bin" "$sub/data"
ln -s "$root/scripts" "$sub/scripts"
ln -s "$root/train_gpt2cu" "$sub/train_gpt2cu"
ln -s "$root/data/gpt2" "$sub/data/gpt2"
# stand-in srun: record the command line (one argument per line); run it when FAKE_SRUN_EXEC=1
cat > "$sub/bin/srun" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" > "$FAKE_SRUN_LOG"
[ "${FAKE_SRUN_EXEC:-0}" = 1 ] && exec "$@"
exit 0
EOF
chmod +x "$sub/bin/srun"
# run_sbatch SCRIPT [ARGS...]: the batch script as the batch step runs it, from $sub
run_sbatch() {
  local script=$1; shift
  (cd "$sub" && env -u GPT2_TRAIN_ARGS -u GPT2_TRAIN_BIN PATH="$sub/bin:$PATH" FAKE_SRUN_LOG="$work/srun.args" \
    SLURM_JOB_ID=4242 SLURM_JOB_NAME=corpus-test SLURM_JOB_NUM_NODES=1 SLURM_JOB_NODELIST=localhost \
    bash "scripts/slurm/$script" "$@")
}
# last_flag FLAG: the value of the last FLAG in the recorded srun command line
last_flag() { awk -v f="$1" 'prev == f { v = $0 } { prev = $0 } END { print v }' "$work/srun.args"; }

# --- 1. a generated corpus: JSONL (extra fields, unicode, escapes) and text files
corpus=$work/corpus
mkdir -p "$corpus/web" "$corpus/books"
for f in 1 2; do
  for i in $(seq 1 40); do
    printf '{"id": %d, "url": "https://example.com/%d", "text": "Document %d of file %d. The quick brown fox jumps over the lazy dog; caf\\u00e9 \\"quoted\\" line\\nsecond line %d."}\n' \
      "$i" "$i" "$i" "$f" "$i"
  done > "$corpus/web/part_$f.jsonl"
done
for b in a b c; do
  for i in $(seq 1 30); do echo "Book $b, paragraph $i: it was the best of times, it was the worst of times."; done > "$corpus/books/$b.txt"
done
echo "not a corpus file" > "$corpus/README.md"
for i in $(seq 1 20); do printf '{"text": "Extra document %d, given by name."}\n' "$i"; done > "$work/extra.jsonl"

out=$( (cd "$sub" && env -u GPT2_DATA_PREFIX scripts/prepare_corpus.sh --shard-tokens 1000 --val-tokens 300 \
  --min-shard-tokens 100 --progress none "$corpus" "$work/extra.jsonl") 2>"$work/recipe.err")
rc=$?
if [ $rc -ne 0 ]; then fail "recipe exited $rc"; sed 's/^/    /' "$work/recipe.err"; fi
grep -q '^prepare_corpus: 6 input file(s)' "$work/recipe.err" && ok "recipe found 5 files in the directory + 1 by name (README.md skipped)" \
  || fail "recipe input files: $(head -1 "$work/recipe.err")"
written=$(cd "$sub" && find data -name '*.bin' | LC_ALL=C sort)
ntrain=$(grep -c '_train_' <<<"$written")
prefix=data/corpus/corpus
want="$prefix"_train_000001.bin
for i in $(seq 2 "$ntrain"); do want+=$'\n'$(printf '%s_train_%06d.bin' "$prefix" "$i"); done
want+=$'\n'"$prefix"_val_000000.bin
want=$(LC_ALL=C sort <<<"$want")
if [ "$ntrain" -ge 3 ] && [ "$written" = "$want" ]; then ok "recipe wrote $prefix _val_000000 + _train_000001.._$(printf %06d "$ntrain")"
else fail "recipe wrote: $(echo $written)"; fi

# a short last shard is appended to the one before; the tokens are those of one unsharded run
grep -q 'appended the last train shard (13 tokens < --min-shard-tokens 100)' "$work/recipe.err" \
  && ok "recipe appended the 13-token last train shard to the one before" || fail "no tail merge: $(tail -2 "$work/recipe.err")"
sizes_ok=1
for f in $written; do
  n=$(od -An -td4 -j8 -N4 "$sub/$f" | tr -d ' ')
  [ "$(stat -c %s "$sub/$f")" -eq $((1024 + 2 * n)) ] || sizes_ok=0
  case $f in *_train_*) [ "$n" -ge 100 ] || sizes_ok=0 ;; esac
done
[ $sizes_ok = 1 ] && ok "every shard's header count matches its size; every train shard >= 100 tokens" \
  || fail "shard headers/sizes: $(for f in $written; do echo -n "$f $(stat -c %s "$sub/$f") "; done)"
(cd "$sub" && scripts/prepare_corpus.sh --shard-tokens 0 --val-tokens 300 --progress none --out-prefix "$work/one/x" \
  "$corpus" "$work/extra.jsonl") > /dev/null 2>&1 || fail "unsharded recipe run"
payload() { for f in "$@"; do tail -c +1025 "$f"; done | md5sum; }
[ "$(cd "$sub" && payload $(grep _train_ <<<"$written"))" = "$(payload "$work"/one/x_train_000001.bin)" ] && \
  [ "$(cd "$sub" && payload $(grep _val_ <<<"$written"))" = "$(payload "$work"/one/x_val_000000.bin)" ] \
  && ok "the shards hold the tokens of one unsharded run, in order" || fail "sharded tokens differ from the unsharded run"

# --- 2. the globs the sbatch scripts use, from the scripts themselves
printed_train=$(sed -n 's/^trainer flags: --train-data "\([^"]*\)" --val-data "\([^"]*\)"$/\1/p' <<<"$out")
printed_val=$(sed -n 's/^trainer flags: --train-data "\([^"]*\)" --val-data "\([^"]*\)"$/\2/p' <<<"$out")
for script in train_1node_gpus.sbatch train_multinode_gpus.sbatch; do
  rm -f "$work/srun.args"
  if ! (unset GPT2_DATA_PREFIX; run_sbatch "$script") > "$work/sbatch.out" 2>&1 || [ ! -s "$work/srun.args" ]; then
    fail "$script did not reach srun"; sed 's/^/    /' "$work/sbatch.out" | tail -5; continue
  fi
  tglob=$(last_flag --train-data) vglob=$(last_flag --val-data)
  read_train=$(cd "$sub" && compgen -G "$tglob" | LC_ALL=C sort)
  read_val=$(cd "$sub" && compgen -G "$vglob" | LC_ALL=C sort)
  if [ "$read_train" = "$(grep _train_ <<<"$written")" ] && [ "$read_val" = "$(grep _val_ <<<"$written")" ] && \
     [ "$(LC_ALL=C sort <<<"$read_train"$'\n'"$read_val")" = "$written" ]; then
    ok "$script default globs '$tglob' '$vglob' read exactly the recipe's $ntrain train + 1 val shards"
  else
    fail "$script globs '$tglob' '$vglob' read train [$(echo $read_train)] val [$(echo $read_val)]"
  fi
  [ "$tglob" = "$printed_train" ] && [ "$vglob" = "$printed_val" ] && ok "$script globs = the recipe's printed flags" \
    || fail "$script globs '$tglob' '$vglob' differ from the recipe's '$printed_train' '$printed_val'"
done

# --- 3. training on them: the recipe's printed flags, then through the sbatch script
if (cd "$sub" && ./train_gpt2cu "${tiny[@]}" --train-data "$printed_train" --val-data "$printed_val") > "$work/train.out" 2>&1 \
   && grep -q "data  *$ntrain train shard(s)" "$work/train.out" && grep -q '^step *2/2' "$work/train.out"; then
  ok "train_gpt2cu --device cpu: 2 steps on the recipe's $ntrain train shards ($(grep '^step *2/2' "$work/train.out" | cut -d'|' -f2 | xargs))"
else
  fail "train_gpt2cu on the recipe's shards"; tail -5 "$work/train.out" | sed 's/^/    /'
fi
if (unset GPT2_DATA_PREFIX; FAKE_SRUN_EXEC=1 run_sbatch train_1node_gpus.sbatch "${tiny[@]}" \
      --total-batch-tokens 32 --zero-stage 0 --warmup-steps 0 --checkpoint-every 0) > "$work/sbatch_train.out" 2>&1 \
   && grep -q "data  *$ntrain train shard(s)" "$work/sbatch_train.out" && grep -q '^step *2/2' "$work/sbatch_train.out" \
   && [ -s "$sub/out/corpus-test-4242/log.jsonl" ]; then
  ok "train_1node_gpus.sbatch (stand-in srun, tiny CPU overrides): 2 steps, log in out/corpus-test-4242/"
else
  fail "train_1node_gpus.sbatch training run"; tail -8 "$work/sbatch_train.out" | sed 's/^/    /'
fi

# --- 4. GPT2_DATA_PREFIX, a missing corpus, recipe errors
(cd "$sub" && GPT2_DATA_PREFIX=data/web/web scripts/prepare_corpus.sh --shard-tokens 2000 --val-tokens 300 \
  --progress none "$corpus/web") > "$work/web.out" 2>&1 || fail "recipe with GPT2_DATA_PREFIX=data/web/web"
rm -f "$work/srun.args"
GPT2_DATA_PREFIX=data/web/web run_sbatch train_multinode_gpus.sbatch > "$work/sbatch.out" 2>&1
[ "$(last_flag --train-data)" = "data/web/web_train_*.bin" ] && [ "$(last_flag --val-data)" = "data/web/web_val_*.bin" ] && \
  grep -q 'GPT2_DATA_PREFIX=data/web/web sbatch' "$work/web.out" && [ -e "$sub/data/web/web_train_000001.bin" ] \
  && ok "GPT2_DATA_PREFIX=data/web/web: recipe writes and sbatch reads data/web/web_{train,val}_*.bin" \
  || fail "GPT2_DATA_PREFIX: sbatch read '$(last_flag --train-data)'"
for script in train_1node_gpus.sbatch train_multinode_gpus.sbatch; do
  rm -f "$work/srun.args"
  GPT2_DATA_PREFIX=data/nothing/here run_sbatch "$script" > "$work/missing.out" 2>&1; rc=$?
  if [ $rc -ne 0 ] && [ ! -e "$work/srun.args" ] && grep -qF 'no token shard matches data/nothing/here_train_*.bin' "$work/missing.out" \
     && grep -q 'scripts/prepare_corpus.sh' "$work/missing.out"; then
    ok "$script with no shards: exit $rc before srun: $(head -1 "$work/missing.out")"
  else
    fail "$script with no shards: rc=$rc, srun reached: $([ -e "$work/srun.args" ] && echo yes || echo no)"; sed 's/^/    /' "$work/missing.out"
  fi
done
# an override after the script name takes effect, and is what gets checked
rm -f "$work/srun.args"
GPT2_DATA_PREFIX=data/nothing/here run_sbatch train_1node_gpus.sbatch --train-data "data/web/web_train_*.bin" \
  --val-data "data/web/web_val_*.bin" > "$work/override.out" 2>&1 && [ "$(last_flag --train-data)" = "data/web/web_train_*.bin" ] \
  && ok "--train-data/--val-data after the script name override the prefix (and pass the check)" \
  || { fail "override after the script name"; sed 's/^/    /' "$work/override.out"; }

expect_error() {  # expect_error NAME PATTERN -- recipe args...
  local name=$1 pat=$2; shift 3
  (cd "$sub" && scripts/prepare_corpus.sh --progress none --out-prefix "$work/err/x" "$@") > "$work/err.out" 2>&1; local rc=$?
  if [ $rc -ne 0 ] && grep -qE -- "$pat" "$work/err.out"; then ok "recipe $name: exit $rc: $(grep -E -m1 -- "$pat" "$work/err.out" | cut -c1-100)"
  else fail "recipe $name: rc=$rc, output: $(head -3 "$work/err.out")"; fi
}
mkdir -p "$work/empty"; echo x > "$work/x.jsonl.gz"
expect_error "no input" "no INPUT given" --
expect_error "empty directory" "no \*\.jsonl" -- "$work/empty"
expect_error "missing input" "no such file or directory" -- "$work/absent.jsonl"
expect_error "--no-shard-index" "does not read" -- --no-shard-index "$work/extra.jsonl"
expect_error "compressed input" "decompress" -- "$work/x.jsonl.gz"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]

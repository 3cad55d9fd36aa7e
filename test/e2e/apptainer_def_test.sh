#!/usr/bin/env bash
# scripts/apptainer/gpt2cu.def without Apptainer (not installable here): its build steps are the
# repository's own scripts, and they run.
#   1. Bootstrap docker debian:12 (the OS install_deps.sh is written for and CI runs it on);
#   2. the "project build" block of %post: every line is a command of scripts/quickstart.sh, in
#      quickstart's order; each script it calls exists and is executable; install_deps.sh is the
#      script .ci/run calls and README's quick start names;
#   3. %setup runs with APPTAINER_ROOTFS set to a scratch root: the checkout's files, no build/,
#      data/ or out/; then the project block runs in that copy, as %post would (the CUDA apt steps
#      before it are skipped: root, network; install_deps.sh finds its packages present), a clean
#      build from scratch; then the %test section's commands pass on the built programs.
# test-timeout: 900
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
def=scripts/apptainer/gpt2cu.def
mkdir -p build/test/e2e
work=$(mktemp -d "$root/build/test/e2e/apptainer.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
ok() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# section NAME: the body of %NAME (up to the next %section), leading indentation removed
section() { awk -v s="%$1" '/^%[a-z]+/ { on = ($1 == s); next } on' "$def" | sed 's/^    //'; }
# commands FILE: non-comment, non-blank lines, trimmed
commands() { sed 's/^[[:space:]]*//; s/[[:space:]]*$//' "$1" | grep -v '^#' | grep -v '^$'; }

# --- 1. header
grep -qx 'Bootstrap: docker' "$def" && grep -qx 'From: debian:12' "$def" && ok "Bootstrap: docker, From: debian:12" \
  || fail "header: $(grep -E '^(Bootstrap|From):' "$def" | tr '\n' ' ')"
for s in setup post environment runscript test; do
  [ -n "$(section $s)" ] || fail "no %$s section"
done

# --- 2. the project block of %post against quickstart.sh / .ci/run / README
section post > "$work/post.sh"
block=$(sed -n '/^# >>> project build/,/^# <<< project build/p' "$work/post.sh" | grep -v '^#' | grep -v '^$')
[ -n "$block" ] || fail "no '# >>> project build' ... '# <<< project build' block in %post"
commands scripts/quickstart.sh > "$work/quickstart.cmds"
last=0 order_ok=1
while IFS= read -r line; do
  n=$(grep -nxF -- "$line" "$work/quickstart.cmds" | head -1 | cut -d: -f1)
  if [ -z "$n" ]; then fail "%post runs '$line', which scripts/quickstart.sh does not"; order_ok=0; continue; fi
  [ "$n" -gt "$last" ] || { fail "'$line' out of quickstart.sh's order"; order_ok=0; }
  last=$n
  script=${line%% *}
  case $script in scripts/*) [ -x "$script" ] || fail "$script (called by %post) is not an executable file" ;; esac
done <<<"$block"
[ $order_ok = 1 ] && [ -n "$block" ] && ok "%post project block = quickstart.sh's commands, in order: $(echo "$block" | paste -sd';' | sed 's/;/; /g')"
grep -q '^scripts/install_deps.sh' <<<"$block" && grep -q '^scripts/install_deps.sh' .ci/run \
  && grep -q 'scripts/install_deps.sh' README.md && ok "install_deps.sh: the script .ci/run and README's quick start call" \
  || fail "%post, .ci/run and README do not share scripts/install_deps.sh"
grep -q '^make' <<<"$block" && ok "%post builds with make (as .ci/run's make -j2 test and quickstart)" || fail "%post does not run make"
# the lines before the block only install the CUDA toolkit / NCCL (and cd into the copy)
pre=$(sed '/^# >>> project build/q' "$work/post.sh" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | grep -v '^#' | grep -v '^$' | grep -vE '^(set |export |apt-get |curl |dpkg |https://|cd /opt/gpt2cu$)')
[ -z "$pre" ] && ok "the rest of %post is apt/CUDA set-up only" || fail "%post has other steps before the block: $pre"

# --- 3. %setup into a scratch root, then the project block there
if ! git rev-parse --git-dir > /dev/null 2>&1; then
  fail "not a git checkout: %setup (git ls-files) cannot run"
else
  rootfs=$work/rootfs
  mkdir -p "$rootfs"
  section setup > "$work/setup.sh"
  if (cd "$root" && APPTAINER_ROOTFS=$rootfs SINGULARITY_ROOTFS=$rootfs bash -e "$work/setup.sh") > "$work/setup.out" 2>&1; then
    copy=$rootfs/opt/gpt2cu
    if [ -f "$copy/Makefile" ] && [ -x "$copy/scripts/install_deps.sh" ] && [ ! -e "$copy/build" ] && [ ! -e "$copy/data" ] \
       && [ ! -e "$copy/out" ] && [ ! -e "$copy/train_gpt2cu" ]; then
      ok "%setup copied the checkout to /opt/gpt2cu ($(find "$copy" -type f | wc -l) files; no build/, data/, out/, binaries)"
    else
      fail "%setup copy: $(ls "$copy" | tr '\n' ' ')"
    fi
    # as %post: `set -eu`, in the copy; the vocabulary from this checkout instead of the network
    start=$SECONDS
    if (cd "$copy" && env GPT2_VOCAB_SOURCE="$root/data/gpt2" bash -c "set -eu; $block") > "$work/build.out" 2>&1; then
      ok "project block ran in the copy: clean build in $((SECONDS - start)) s: $(grep -m1 '^built:' "$work/build.out" | cut -c1-90)"
    else
      fail "project block failed in the copy"; tail -15 "$work/build.out" | sed 's/^/    /'
    fi
    section test | sed "s#/opt/gpt2cu#$copy#g" > "$work/test.sh"
    (cd "$copy" && bash -e "$work/test.sh") > "$work/test.out" 2>&1 && ok "%test commands pass on the built programs" \
      || { fail "%test commands"; tail -5 "$work/test.out" | sed 's/^/    /'; }
    [ -s "$copy/data/gpt2/encoder.json" ] && ok "the GPT-2 vocabulary is in the image's data/gpt2" || fail "no vocabulary in the copy"
  else
    fail "%setup failed"; sed 's/^/    /' "$work/setup.out"
  fi
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]

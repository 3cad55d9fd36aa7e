#!/usr/bin/env bash
# Runs every GoogleTest binary and shell test named on the command line, each
# under a timeout, and ends with one summary line read by CI:
#   "N passed, N failed"            or, when anything skipped,
#   "N passed, N failed, N skipped"
# preceded by the names of every failed and skipped test.
# Usage: run_tests.sh GTEST_BIN... -- SCRIPT...
#
# GoogleTest binaries: one count per test case, read from the binary's XML
# report (--gtest_output=xml:), or from its stdout when it died before writing
# the report (crash, timeout); the case that was running then is named. A
# binary that exits non-zero with no failed case, writes no report, or runs no
# tests is one named failure of its own.
# Shell tests: one count each; exit 0 passes, 77 is skipped (the automake
# convention), anything else fails.
#
# Timeouts (docs/testing.md): an entry of TEST_TIMEOUTS below (keyed by a
# binary's basename or a script's path as given), else a "# test-timeout: N"
# line in a script's first 20 lines, else DEFAULT_TIMEOUT seconds;
# TEST_TIMEOUT=N replaces all of them, TEST_TIMEOUT_SCALE=F multiplies them. A test past its limit gets SIGTERM, then SIGKILL TEST_KILL_AFTER
# seconds later; every process of its session (mpirun's ranks, nested
# timeouts) is killed, and it is a failure "timed out after N s".
set -u
set +m  # background children stay out of job control, so setsid does not fork

DEFAULT_TIMEOUT=600
declare -A TEST_TIMEOUTS=(
  # These two run an nvcc build for sm_80 + sm_90 when it is not up to date.
  [test/emu/nvcc_compile_test.sh]=1200
  [test/backend_cuda/nvcc_compile_test.sh]=1200
)
KILL_AFTER=${TEST_KILL_AFTER:-10}

passed=0 failed=0 skipped=0
failed_names=() skipped_names=()
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/run_tests.XXXXXX")
test_index=0
current_sid=""

is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }
for v in TEST_TIMEOUT TEST_TIMEOUT_SCALE TEST_KILL_AFTER; do
  if [ -n "${!v:-}" ] && ! is_number "${!v}"; then
    echo "run_tests.sh: $v='${!v}' is not a number" >&2; exit 2
  fi
done

# Kills every process left in a test's session: the session outlives its
# leader, and mpirun ranks or a nested `timeout` sit in process groups of
# their own that the outer timeout's group kill does not reach.
# Reads /proc (no procps needed); the command name in stat may hold spaces, so
# the fields are taken after its closing ")".
kill_session() {
  local stat line fields
  for stat in /proc/[0-9]*/stat; do
    line=$(cat "$stat" 2>/dev/null) || continue
    read -r -a fields <<<"${line##*) }"  # state ppid pgrp session ...
    [ "${fields[3]:-}" = "$1" ] && kill -KILL "$(basename "$(dirname "$stat")")" 2>/dev/null
  done
}

# An interrupted run (Ctrl-C, CI cancelling) takes the running test with it.
on_signal() {
  [ -n "$current_sid" ] && kill_session "$current_sid"
  echo "run_tests.sh: interrupted; logs in $log_dir" >&2
  exit 130
}
trap on_signal INT TERM HUP

# timeout_for BASE_SECONDS: the limit after the environment overrides.
timeout_for() {
  local base=${TEST_TIMEOUT:-$1}
  awk -v t="$base" -v s="${TEST_TIMEOUT_SCALE:-1}" \
    'BEGIN { v = t * s; r = int(v); if (r < v) r++; if (r < 1) r = 1; print r }'
}

script_timeout() {
  local n
  n=$(head -n 20 "$1" | sed -n 's/^# test-timeout: *\([0-9][0-9]*\) *$/\1/p' | head -n 1)
  echo "${TEST_TIMEOUTS[$1]:-${n:-$DEFAULT_TIMEOUT}}"
}

# run_limited LIMIT LOG CMD...: runs CMD in a session of its own under
# timeout; sets rc and timed_out (1 when the limit, not the test, ended it).
run_limited() {
  local limit=$1 log=$2 start; shift 2
  start=$(date +%s)
  setsid timeout --kill-after="$KILL_AFTER" "$limit" "$@" </dev/null >"$log" 2>&1 &
  current_sid=$!
  wait "$current_sid" 2>/dev/null; rc=$?
  timed_out=0
  if { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && [ $(( $(date +%s) - start )) -ge "$limit" ]; then
    timed_out=1
    kill_session "$current_sid"
  fi
  current_sid=""
}

# "exit 3", or "killed by SIGABRT" for a status above 128.
describe_exit() {
  if [ "$1" -gt 128 ] && [ "$1" -lt 160 ]; then echo "killed by SIG$(kill -l "$(( $1 - 128 ))")"
  else echo "exit $1"; fi
}

# One line per test case from a gtest XML report: "P|F|S Suite.Case".
# Failure and skip messages sit in CDATA that may hold any text; gtest ends
# each with "]]></failure>" or "]]></skipped>", which cannot occur inside.
parse_gtest_xml() {
  awk '
    function attr(key,   m) {
      if (!match($0, " " key "=\"[^\"]*\"")) return ""
      m = substr($0, RSTART + length(key) + 3, RLENGTH - length(key) - 4)
      return m
    }
    function emit() { print (failed ? "F" : result) " " name; open = 0 }
    inbody { if ($0 ~ /\]\]><\/(failure|skipped)>/) inbody = 0; next }
    /^ *<testcase / {
      name = attr("classname") "." attr("name"); failed = 0
      result = attr("status") == "notrun" ? "S" : attr("result") == "skipped" ? "S" : "P"
      open = 1
      if ($0 ~ /\/>[[:space:]]*$/) emit()
      next
    }
    open && /^ *<failure / { failed = 1 }
    open && /^ *<(failure|skipped) / && $0 !~ /\]\]><\/(failure|skipped)>[[:space:]]*$/ && $0 ~ /CDATA/ { inbody = 1 }
    open && /^ *<\/testcase>/ { emit() }
  ' "$1"
}

# The same from stdout, for a binary that died before writing its report; a
# case that started and never reported is "U Suite.Case". Only per-case
# result lines end in "(N ms)"; the closing summary repeats names without it.
parse_gtest_stdout() {
  awk '
    function after(marker) { return substr($0, index($0, marker) + length(marker)) }
    function first_word(s) { sub(/[ ,].*/, "", s); return s }
    index($0, "[ RUN      ] ") { running = first_word(after("[ RUN      ] ")); next }
    index($0, "[       OK ] ") && / \([0-9]+ ms\)$/ { print "P " first_word(after("[       OK ] ")); running = ""; next }
    index($0, "[  FAILED  ] ") && / \([0-9]+ ms\)$/ { print "F " first_word(after("[  FAILED  ] ")); running = ""; next }
    index($0, "[  SKIPPED ] ") && / \([0-9]+ ms\)$/ { print "S " first_word(after("[  SKIPPED ] ")); running = ""; next }
    END { if (running != "") print "U " running }
  ' "$1"
}

# Adds "NAME: WHAT" to the failed list.
fail_named() { f=$((f + 1)); failed_names+=("$1"); }

# Runs one gtest binary; sets p, f, s.
run_gtest() {
  local bin=$1 name log xml limit results kind case_name
  name=$(basename "$bin")
  log="$log_dir/$test_index.$name.log"; xml="$log_dir/$test_index.$name.xml"
  limit=$(timeout_for "${TEST_TIMEOUTS[$name]:-$DEFAULT_TIMEOUT}")
  run_limited "$limit" "$log" "$bin" --gtest_color=no "--gtest_output=xml:$xml"
  if [ -s "$xml" ]; then results=$(parse_gtest_xml "$xml"); else results=$(parse_gtest_stdout "$log"); fi
  p=0 f=0 s=0
  while read -r kind case_name; do
    case $kind in
      P) p=$((p + 1)) ;;
      F) fail_named "$name: $case_name" ;;
      S) s=$((s + 1)); skipped_names+=("$name: $case_name") ;;
      U) if [ "$timed_out" = 1 ]; then fail_named "$name: $case_name (timed out after $limit s)"
         else fail_named "$name: $case_name (no result: $(describe_exit "$rc"))"; fi ;;
    esac
  done <<<"$results"
  # Failures no test case carries.
  if [ "$f" -eq 0 ]; then
    if [ "$timed_out" = 1 ]; then fail_named "$name (timed out after $limit s)"
    elif [ "$rc" -ne 0 ]; then fail_named "$name ($(describe_exit "$rc") with no failed test)"
    elif [ ! -s "$xml" ]; then fail_named "$name (exit 0 but no test report)"
    elif [ $((p + s)) -eq 0 ]; then fail_named "$name (ran no tests)"
    fi
  fi
}

# Runs one shell test; sets p, f, s.
run_script() {
  local script=$1 limit log
  log="$log_dir/$test_index.$(basename "$script").log"
  limit=$(timeout_for "$(script_timeout "$script")")
  run_limited "$limit" "$log" bash "$script"
  p=0 f=0 s=0
  if [ "$timed_out" = 1 ]; then fail_named "$script (timed out after $limit s)"
  elif [ "$rc" -eq 0 ]; then p=1
  elif [ "$rc" -eq 77 ]; then s=1; skipped_names+=("$script")
  else fail_named "$script ($(describe_exit "$rc"))"; fi
}

mode=gtest
for t in "$@"; do
  if [ "$t" = "--" ]; then mode=script; continue; fi
  test_index=$((test_index + 1))
  start=$(date +%s)
  if [ "$mode" = gtest ]; then run_gtest "$t"; label=$(basename "$t"); else run_script "$t"; label=$t; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-44s %4d passed %4d failed %4d skipped  (%ds)\n' "$label" "$p" "$f" "$s" $(( $(date +%s) - start ))
  if [ "$f" -gt 0 ]; then
    echo "---- tail of $log_dir/$test_index.$(basename "$t").log ----"
    tail -n 40 "$log_dir/$test_index.$(basename "$t").log"; echo "----"
  fi
done

if [ ${#failed_names[@]} -gt 0 ]; then echo "failed:"; printf '  %s\n' "${failed_names[@]}"; fi
if [ ${#skipped_names[@]} -gt 0 ]; then echo "skipped:"; printf '  %s\n' "${skipped_names[@]}"; fi
summary="$passed passed, $failed failed"
[ "$skipped" -gt 0 ] && summary+=", $skipped skipped"
echo "$summary"
[ "$failed" -eq 0 ]

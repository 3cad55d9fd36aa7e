#!/usr/bin/env bash
# test-timeout: 120
# The test runner's own test: scripts/run_tests.sh on a GoogleTest binary with
# planted results (build/test/runner/runner_fixture: a passing, a failing, a
# skipped case, a parameterised test with two failing parameters, a hanging
# case) and on planted shell tests (test/runner/fixtures/). Checks the closing
# line exactly, that the failed and skipped lists name each case once and
# nothing else, that a hang is a failure "timed out after N s" found through
# each override (TEST_TIMEOUT, "# test-timeout:", TEST_TIMEOUT_SCALE), and that
# the hung test's whole session is killed.
set -u
cd "$(dirname "$0")/../.." || exit 1
RUNNER=${RUNNER:-scripts/run_tests.sh}  # overridable to check the self-test catches a broken runner
FIXTURE=build/test/runner/runner_fixture
FX=test/runner/fixtures
[ -x "$FIXTURE" ] || { echo "FAIL: $FIXTURE not built (make $FIXTURE)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/runner_selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work  # the runner's logs go here and are removed with it
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# run NAME CMD...: runs CMD, keeps its output, status and duration. The limit
# is for a runner that itself hangs on the planted hang.
run() {
  local name=$1 start; shift
  start=$(date +%s)
  timeout -k 5 60 "$@" >"$work/$name.out" 2>&1; echo $? >"$work/$name.rc"
  echo $(( $(date +%s) - start )) >"$work/$name.secs"
}

# The lines of the "failed:" or "skipped:" list of a run, unindented.
list_of() {
  awk -v head="$2:" '$0 == head { on = 1; next } on && /^  / { sub(/^  /, ""); print; next } { on = 0 }' \
    "$work/$1.out"
}

# expect NAME RC LAST_LINE: status and exact closing line.
expect() {
  local got_rc got_last
  got_rc=$(cat "$work/$1.rc"); got_last=$(tail -n 1 "$work/$1.out")
  [ "$got_rc" = "$2" ] || bad "$1: runner exit $got_rc, want $2"
  [ "$got_last" = "$3" ] || bad "$1: closing line '$got_last', want '$3'"
}

# expect_list NAME failed|skipped LINE...: the list holds exactly these lines.
expect_list() {
  local name=$1 which=$2 got want; shift 2
  got=$(list_of "$name" "$which")
  want=$(printf '%s\n' "$@" | sed '/^$/d')
  if [ "$got" != "$want" ]; then
    bad "$name: $which list"; echo "  got:"; printf '    %s\n' "$got"; echo "  want:"; printf '    %s\n' "$want"
  fi
}

# The live (not zombie) processes of session $1, as "PID COMMAND", from /proc.
session_alive() {
  local stat line fields
  for stat in /proc/[0-9]*/stat; do
    line=$(cat "$stat" 2>/dev/null) || continue
    read -r -a fields <<<"${line##*) }"  # state ppid pgrp session ...
    [ "${fields[3]:-}" = "$1" ] && [ "${fields[0]}" != Z ] && echo "${line%%) *})"
  done
}

report() { [ -f "$work/$1.out" ] && { echo "---- $1 ----"; tail -n 12 "$work/$1.out"; }; }

# 1. Every kind of case, from the XML report.
run xml env GTEST_FILTER='-Stall.*' "$RUNNER" "$FIXTURE" --
expect xml 1 "3 passed, 3 failed, 1 skipped"
expect_list xml failed "runner_fixture: Fixture.Fails" "runner_fixture: Params/Param.Even/1" \
  "runner_fixture: Params/Param.Even/3"
expect_list xml skipped "runner_fixture: Fixture.Skipped"

# 2. The same plus the hang: killed at TEST_TIMEOUT, counted from stdout.
run hang env TEST_TIMEOUT=3 "$RUNNER" "$FIXTURE" --
expect hang 1 "3 passed, 4 failed, 1 skipped"
expect_list hang failed "runner_fixture: Fixture.Fails" "runner_fixture: Params/Param.Even/1" \
  "runner_fixture: Params/Param.Even/3" "runner_fixture: Stall.Hangs (timed out after 3 s)"
expect_list hang skipped "runner_fixture: Fixture.Skipped"
[ "$(cat "$work/hang.secs")" -lt 10 ] || bad "hang: took $(cat "$work/hang.secs") s for a 3 s limit"

# 3. A crash names the case that was running.
run crash env RUNNER_FIXTURE_CRASH=1 GTEST_FILTER='Fixture.Passes:Stall.*' "$RUNNER" "$FIXTURE" --
expect crash 1 "1 passed, 1 failed"
expect_list crash failed "runner_fixture: Stall.Hangs (no result: killed by SIGABRT)"

# 4. A non-zero exit with every case passed, and 5. a binary that ran nothing.
run exit env RUNNER_FIXTURE_EXIT=3 GTEST_FILTER='Fixture.Passes' "$RUNNER" "$FIXTURE" --
expect exit 1 "1 passed, 1 failed"
expect_list exit failed "runner_fixture (exit 3 with no failed test)"
run none env GTEST_FILTER='NoSuchSuite.*' "$RUNNER" "$FIXTURE" --
expect none 1 "0 passed, 1 failed"
expect_list none failed "runner_fixture (ran no tests)"

# 6. Shell tests: exit 0, exit 3, exit 77, and a hang limited by its own
# "# test-timeout: 2" line, whose children must all be gone afterwards.
run scripts env RUNNER_FIXTURE_SID="$work/sid" "$RUNNER" -- \
  "$FX/passes.sh" "$FX/fails.sh" "$FX/skips.sh" "$FX/hangs.sh"
expect scripts 1 "1 passed, 2 failed, 1 skipped"
expect_list scripts failed "$FX/fails.sh (exit 3)" "$FX/hangs.sh (timed out after 2 s)"
expect_list scripts skipped "$FX/skips.sh"
sid=$(cat "$work/sid" 2>/dev/null)
if [ -z "$sid" ]; then bad "scripts: hangs.sh did not record its session"
else
  left=$(session_alive "$sid")
  [ -z "$left" ] || { bad "scripts: processes of the hung test survived:"; echo "$left"; }
fi

# 7. TEST_TIMEOUT_SCALE multiplies the script's own limit (2 s x 1.5 = 3 s).
run scale env TEST_TIMEOUT_SCALE=1.5 "$RUNNER" -- "$FX/hangs.sh"
expect scale 1 "0 passed, 1 failed"
expect_list scale failed "$FX/hangs.sh (timed out after 3 s)"

# 8. All passing: the closing line has no skipped count and the status is 0.
run clean env GTEST_FILTER='Fixture.Passes' "$RUNNER" "$FIXTURE" -- "$FX/passes.sh"
expect clean 0 "2 passed, 0 failed"
grep -qE '^(failed|skipped):$' "$work/clean.out" && bad "clean: lists failed or skipped tests"

if [ "$fails" -ne 0 ]; then
  for r in xml hang crash exit none scripts scale clean; do report "$r"; done
  echo "run_tests_selftest: $fails check(s) failed"; exit 1
fi
echo "run_tests_selftest: all 8 runs counted and named as planted"

#!/usr/bin/env bash
# Fresh-clone CI of commits in turns, as reports/cpu/ci-time.md compares them: for each commit given, a fresh clone
# of this repository at it runs `CI=true /usr/bin/time -v bash .ci/run`, and one line says the machine's speed
# before and after (seconds for 10^7 Python additions), the tests' summary, the wall and CPU times and the exit
# status. The machine's speed moves by a third within an hour, so a change is measured against the commit before it
# in alternation (A B A B), never against a figure of another hour.
#   bash benchmarks/ci_in_turns.sh A B A B > turns.log
set -u
repo=$(git rev-parse --show-toplevel)
loop() {
  python3 -c 'import time
t = time.perf_counter()
s = 0
for i in range(10**7): s += i
print(f"loop {time.perf_counter() - t:.2f} s")'
}
for commit in "$@"; do
  work=$(mktemp -d)
  git clone -q "$repo" "$work/clone" && git -C "$work/clone" checkout -q "$commit"
  before=$(loop)
  (cd "$work/clone" && CI=true /usr/bin/time -v bash .ci/run > LOG 2>&1; echo "exit $?" >> LOG)
  after=$(loop)
  echo "$commit $before / $after | $(grep ' passed' "$work/clone/LOG" | tail -1) |" \
    "$(grep -E 'Elapsed|User time|System time' "$work/clone/LOG" | tr -s ' \t' ' ' | tr '\n' ' ')| $(tail -1 "$work/clone/LOG")"
  rm -rf "$work"
done

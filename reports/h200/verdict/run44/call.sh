#!/usr/bin/env bash
# Run 44: which of the Triton warm-up's binaries a cold Triton run launches (benchmarks/warm_up_coverage.py).
# A cold run is CPU-bound on the machine's 16 cores (run 43); a prepared binary that no test launches is CPU taken
# from the tests. (1) The warm-up's jobs in 15 processes, each with Triton's cache in a folder of its own, every job
# timed. (2) The default Triton run, -n 8, with no warm-up and an empty cache: the binaries the tests build.
# (3) The two compared. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run44/call.sh
set -u
R=${OUT:?OUT=folder}/run44
mkdir -p "$R"
begin=$(date +%s)
OUT=$R VERDICT_LIMIT=5 bash benchmarks/h200_verdict.sh bytecode > "$R/runs.log" 2>&1  # the wheel, bytecode compiled
export PYTHONPYCACHEPREFIX="${TMPDIR:-/tmp}/rmsnorm-pycache"
unset PYTHONDONTWRITEBYTECODE
W=/tmp/cov && rm -rf $W ~/.triton/cache && mkdir -p $W
T0=$(date +%s)
for i in $(seq 0 14); do
  (cd "$(mktemp -d)" && TRITON_CACHE_DIR=$W/part$i python3 "$OLDPWD/benchmarks/warm_up_coverage.py" jobs --part $i \
    --parts 15 --out $W/jobs-$i.json) >> "$R/jobs.log" 2>&1 &
done
wait
echo "jobs: $(( $(date +%s) - T0 )) s" >> "$R/runs.log"
TRITON_CACHE_DIR=$W/run RMSNORM_CONFORMANCE_WARM_UP=0 timeout -s INT 200 python3 benchmarks/harness_throughput.py \
  --pyargs --backend=triton --device=cuda --workers=8 --out "$R/triton-no-warm-up.md" >> "$R/runs.log" 2>&1
echo "run: exit $?" >> "$R/runs.log"
python3 benchmarks/warm_up_coverage.py compare --jobs $W/jobs-*.json --run-cache $W/run --out "$R/coverage.md" \
  >> "$R/runs.log" 2>&1
tar czf "$R/jobs.tgz" -C $W $(cd $W && ls jobs-*.json)
ls $W/run > "$R/run-binaries.txt"
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"

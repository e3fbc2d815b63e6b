#!/usr/bin/env bash
# Run 27: is a check's wait on the GPU what makes a test slower under -n 8 than alone? Run 26 timed the bf16
# padding plan alone at 3.1 s (Triton, caches warm, 2^31 elements of budget); run 25's -n 8 run took 9.1 s for it
# with 2^28. In one call: the machine's CPUs, a host-device round trip with 1, 4 and 8 processes on the GPU
# (benchmarks/sync_contention.py), then Triton's bf16 threshold plans with caches warm, under -n 8 and alone.
# From the wheel in an empty folder. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run27-call.sh
set -u
R=${OUT:?OUT=folder}/run27
mkdir -p "$R"
(nproc; lscpu; nvidia-smi --query-gpu=name,compute_mode --format=csv) > "$R/machine.txt" 2>&1
python3 benchmarks/sync_contention.py --workers 8 --loops 3000 > "$R/sync.txt" 2>&1
python3 benchmarks/sync_contention.py --workers 4 --loops 3000 | tail -1 >> "$R/sync.txt" 2>&1
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache && unset PYTHONDONTWRITEBYTECODE
W=$(mktemp -d) && cd "$W" || exit 1
sel=(--pyargs rmsnorm_conformance.suites --backend=triton --device=cuda --dtype=bfloat16 -p no:cacheprovider -q
     -k "_at_thresholds" --max-elements=268435456)  # -n 8's budget on an H200, alone too
timeout 200 python3 -m pytest "${sel[@]}" -n 8 > "$R/warm-up.log" 2>&1
for n in 8 0; do
  TIMEFORMAT="-n $n: wall %R s, user %U s, sys %S s"
  { time timeout 200 python3 -m pytest "${sel[@]}" -n $n --junitxml="$R/thresholds-n$n.junit.xml" --durations=40 \
    > "$R/thresholds-n$n.log" 2>&1; } 2>> "$R/times.txt"
done

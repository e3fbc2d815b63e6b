#!/usr/bin/env bash
# Run 33: the Triton forward's weight mode a runtime argument (the plain, offset and unweighted forwards share a
# binary: run33/weight-mode.patch), with the controller dealing the tests one at a time (the longest first then
# reach every worker) and the Triton backend's prepare in the warm-up. First an A/B of the forward's bandwidth (A:
# this tree with the patch reversed, B: this tree; each from its own wheel in its own site folder, A, B, A, B in
# processes of their own), then Triton cold twice, then the README's RL command (native, Triton, CUDA and
# Liger-Kernel), then the Triton backend's and the warm-up's tests on the GPU with what is left of the call. From
# the tree's root on a fresh GPU machine, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run33-call.sh
set -u
R=${OUT:?OUT=folder}/run33
mkdir -p "$R"
begin=$(date +%s)
ROOT=$(pwd)
for v in A B; do
  rm -rf "/tmp/ab/$v" && mkdir -p "/tmp/ab/$v" && cp -r "$ROOT" "/tmp/ab/$v/tree" && cd "/tmp/ab/$v/tree" || exit 1
  rm -rf build ./*.egg-info
  if [[ $v == A ]]; then patch -R -p1 -s < reports/h200/verdict/run33/weight-mode.patch || exit 1; fi
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "/tmp/ab/$v/whl" . > /dev/null 2>&1 \
    && python3 -m pip install -q --no-deps --target "/tmp/ab/$v/site" /tmp/ab/$v/whl/*.whl || exit 1
done
cd "$ROOT" && python3 -m pip install -q --no-deps /tmp/ab/B/whl/*.whl && mv rmsnorm_conformance /tmp/
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
for n in 1 2; do
  for v in A B; do
    start=$(date +%s)
    (cd /tmp && PYTHONPATH=/tmp/ab/$v/site timeout 120 python3 "$ROOT/reports/h200/verdict/run33/forward_ab.py" \
      "$v" "$R/forward-ab.jsonl") > "$R/forward-ab-$v-$n.log" 2>&1
    echo "forward A/B $v $n: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
  done
done
python3 - "$R/forward-ab.jsonl" > "$R/forward-ab.md" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
keys = sorted({(r["call"], r["dtype"], r["rows"], r["dim"]) for r in rows})
print("| call | dtype | shape | A (constexpr), of copy | B (runtime), of copy | B - A |")
print("|---|---|---|---|---|---|")
for k in keys:
    a = [r["of_copy"] for r in rows if r["tree"] == "A" and (r["call"], r["dtype"], r["rows"], r["dim"]) == k]
    b = [r["of_copy"] for r in rows if r["tree"] == "B" and (r["call"], r["dtype"], r["rows"], r["dim"]) == k]
    if a and b:
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"| {k[0]} | {k[1]} | {k[2]}x{k[3]} | {ma:.3f} ({', '.join(map(str, a))}) | "
              f"{mb:.3f} ({', '.join(map(str, b))}) | {mb - ma:+.3f} |")
PY
for n in 1 2; do
  OUT=$R VERDICT_LIMIT=110 VERDICT_TAG=-$n bash benchmarks/h200_verdict.sh triton-cold 2>&1 | tail -1 >> "$R/runs.log"
done
OUT=$R RL_LIMIT=250 bash benchmarks/h200_verdict.sh rl 2>&1 | tail -1 >> "$R/runs.log"
left=$(( 590 - ($(date +%s) - begin) ))
start=$(date +%s)
timeout -s INT $(( left > 20 ? left : 20 )) python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -n 8 \
  -q -p no:cacheprovider --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"

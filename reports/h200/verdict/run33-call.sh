#!/usr/bin/env bash
# Run 33: the Triton forward's weight mode a runtime argument (the plain, offset and unweighted forwards share a
# binary: run33/weight-mode.patch), with the controller dealing the tests one at a time and the Triton backend's
# prepare in the warm-up, in what was left of the session's GPU time (a first try of a longer call got no machine):
# the Triton backend's tests on the GPU (bitwise equal to native, the planned launch, prepare), an A/B of the
# forward's bandwidth (A: this tree with the patch reversed, B: this tree; each from its own wheel in its own site
# folder, one process each), then Triton cold, and again while time is left. From the tree's root on a fresh GPU
# machine:
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
start=$(date +%s)
timeout -s INT 90 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -n 8 -q -p no:cacheprovider \
  --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
for v in A B; do
  start=$(date +%s)
  (cd /tmp && PYTHONPATH=/tmp/ab/$v/site timeout 60 python3 "$ROOT/reports/h200/verdict/run33/forward_ab.py" \
    "$v" "$R/forward-ab.jsonl") > "$R/forward-ab-$v.log" 2>&1
  echo "forward A/B $v: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
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
  if (( $(date +%s) - begin > 190 )); then echo "triton cold $n: not run, no time left" >> "$R/runs.log"; break; fi
  OUT=$R VERDICT_LIMIT=80 VERDICT_TAG=-$n bash benchmarks/h200_verdict.sh triton-cold 2>&1 | tail -1 >> "$R/runs.log"
done

#!/usr/bin/env bash
# Run 21: the global-state watch widened (autocast, subnormal flushing, torch's functions, mode stacks) against the
# GPU's paths: native, Triton, CUDA and Liger-Kernel under the smoke sweep on the GPU, with the execution modes, from
# the wheel in an empty folder. No backend of these may read as a global-state breach. From the tree's root:
#   OUT=<folder> bash reports/h200/verdict/run21-call.sh
set -u
R=${OUT:?OUT=folder}/run21
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
mv rmsnorm_conformance /tmp/
( cd "$(mktemp -d)" && timeout 170 python3 -m pytest --pyargs rmsnorm_conformance.suites \
  --backend=native,triton,cuda,liger --device=cuda --sweep=smoke --modes=compile,cudagraph -n 8 -q \
  -p no:cacheprovider --report="$R/smoke.md" --report="$R/smoke.json" ) > "$R/smoke.log" 2>&1
echo "exit $?" >> "$R/smoke.log"
python3 - "$R/smoke.json" > "$R/global-state.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = [s for s in r["summaries"] if s["rule"] == "semantics.global_state"]
print("verdict", r["verdict"], "| global_state summaries:", len(rows))
for s in rows:
    print(s["backend"], s["device"], s["dtype"], "checks", s["checks"], "failures", s["failures"], s.get("failing_case", ""))
for n, o in r["outcomes"].items():
    if o.get("rule") == "semantics.global_state":
        print("outcome", n, o.get("outcome"), o.get("reason", "")[:300])
PY

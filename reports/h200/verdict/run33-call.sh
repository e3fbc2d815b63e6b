#!/usr/bin/env bash
# Run 33: the Triton forward's weight mode a runtime argument (the plain, offset and unweighted forwards share a
# binary: run33/weight-mode.patch), in what was left of the session's GPU time after three tries that got no machine:
# the Triton backend's and the warm-up's tests on the GPU (bitwise equal to native for every entry point, the
# planned launch, the weight modes' one binary, prepare), then the forward's bandwidth against a device copy at the
# issue's shapes (run33/forward_ab.py; run 13's bench is the before). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run33-call.sh
set -u
R=${OUT:?OUT=folder}/run33
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . > /dev/null 2>&1 \
  && python3 -m pip install -q --no-deps /tmp/whl/*.whl
ROOT=$(pwd)
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
start=$(date +%s)
timeout -s INT 75 python3 -m pytest tests/test_triton_backend.py tests/test_warm_up.py -n 8 -q -p no:cacheprovider \
  --tb=short -rs --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
start=$(date +%s)
(cd /tmp && timeout 45 python3 "$ROOT/reports/h200/verdict/run33/forward_ab.py" B "$R/forward.jsonl") \
  > "$R/forward.log" 2>&1
echo "forward: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"

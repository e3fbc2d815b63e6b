#!/usr/bin/env bash
# Kernels run 68 (prepared without a GPU): README's RL command on the tree, after a stop that widened what
# semantics.global_state watches (the report's json, file and process functions, pytest's outcomes and Hypothesis'
# in-test functions, saved-tensor hooks, around every call; the harness's own functions at each test's end) and made
# the compiled checks set Dynamo on for their own calls. On a CPU none of this reads as a breach of a shipped
# backend; this run says whether torch.compile (Inductor), CUDA-graph capture and the GPU backends' first calls do on
# a GPU. The wheel of the tree, the CUDA library built once, then the command from an empty folder with its reports
# (native, Triton, CUDA; Liger-Kernel too where its wheel is carried in .whl/). From the tree's root:
#   OUT=<folder> bash reports/h200/kernels/run68/call.sh
set -u
R=${OUT:?OUT=folder}/run68
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl68 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl68/*.whl >> "$R/call.log" 2>&1
backends=native,triton,cuda
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site68 .whl/*.whl \
    >> "$R/call.log" 2>&1 && export PYTHONPATH=/tmp/site68 && backends=$backends,liger
fi
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source68  # the source folder would shadow the installed package
export RMSNORM_CUDA_BUILD_DIR=/tmp/rmsnorm-cuda-build68
( cd "$(mktemp -d)" && timeout -s INT "${RL_LIMIT:-300}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
    --backend=$backends --device=cuda -n 16 -q -p no:cacheprovider \
    --require-parity=triton:cuda --require-parity=native@cpu:native@cuda --modes=compile,cudagraph \
    --deadline=$(( ${RL_LIMIT:-300} - 40 )) --report="$R/rl.md" --report="$R/rl.json" --junitxml="$R/rl.junit.xml" \
  ) > "$R/rl.log" 2>&1
echo "rl ($backends): exit $?, $(( $(date +%s) - begin )) s" >> "$R/call.log"
# Every global_state breach the run recorded, by backend (none is expected of native, Triton or CUDA).
python3 - "$R/rl.json" >> "$R/call.log" 2>&1 <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
found = [(o.get("backend"), o.get("reason", "")[:300]) for o in data["outcomes"].values()
         if "global_state" in o.get("reason", "") or "harness's own functions" in o.get("reason", "")]
print(f"verdict {data['verdict_label']}; global_state outcomes: {len(found)}")
for backend, reason in found[:20]:
    print(f"  {backend}: {reason}")
PY
mv /tmp/rmsnorm_conformance_source68 rmsnorm_conformance
tar czf "$OUT/run68.tgz" -C "$OUT" run68 && rm -rf "$R"  # one file back (the device returns at most eight)

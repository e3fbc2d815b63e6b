#!/usr/bin/env bash
# The engine adapters on a GPU machine with no network: install the engine wheels that travelled with the call
# (in .whl-engines/<group>/, a wheel too large for one call split into NAME.part-N files across groups, with
# NAME.sha256 beside each part), then run the conformance suites against every engine adapter that can run.
#
#   bash benchmarks/engines_on_device.sh stage          # keep this call's wheels and parts for a later call
#   OUT=dir bash benchmarks/engines_on_device.sh run [ADAPTERS]   # join, install, run (default: every engine)
#
# benchmarks/engine_wheels.py downloads the wheels and packs the groups. The run names the project's own
# backends beside the engines (ENGINES_BESIDE, default native,triton,cuda; empty for the engines alone), on
# ENGINES_WORKERS pytest-xdist workers (default 8), under ENGINES_SWEEP (default ci) and in ENGINES_DTYPE (default bfloat16; empty for every
# dtype), so that it ends within ENGINES_TIME_LIMIT seconds (default 420); ENGINES_ARGS adds pytest options
# (--require-parity=native:triton, say).
#
# benchmarks/engine_site.sh stages, joins and installs the wheels (a wheel too large for one call travels in parts).
# Only adapters whose packages import are named with --backend, so the verdict speaks for those; the others are
# listed.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
OUT=${OUT:-reports/engines}
LIMIT=${ENGINES_TIME_LIMIT:-420}   # seconds for the conformance run itself
BESIDE=${ENGINES_BESIDE-native,triton,cuda}
WORKERS=${ENGINES_WORKERS:-8}
DTYPE=${ENGINES_DTYPE-bfloat16}
ENGINES=liger,fla,flashinfer,quack,xformers,vllm,vllm_batch_invariant,sgl_kernel,transformer_engine,unsloth
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
. benchmarks/engine_site.sh
engine_stage
[ "$mode" = stage ] && exit 0
engine_install
OUT=$(cd "$OUT" && pwd)
ROOT=$(pwd)
cd "$(mktemp -d)"

# Which adapters can run here, and how long each engine takes to import (FlashInfer's and quack's kernels
# are compiled at their first call, not here).
nvidia-smi -L
python3 - "${2:-$ENGINES}" <<'EOF' | tee "$OUT/engines-preflight.txt"
import importlib, sys, time
import torch
from rmsnorm_conformance.harness.running.registry import load_backend
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
modules = {"liger": "liger_kernel.ops.rms_norm", "fla": "fla.modules.layernorm",
           "vllm": "vllm._custom_ops", "vllm_batch_invariant": "vllm._custom_ops", "flashinfer": "flashinfer.norm",
           "sgl_kernel": "sgl_kernel", "quack": "quack", "xformers": "xformers.ops.rmsnorm",
           "transformer_engine": "transformer_engine.pytorch", "unsloth": "unsloth.kernels"}
ready = []
for name in sys.argv[1].split(","):
    reason = load_backend(name).unavailable_reason("cuda")
    if reason is None:
        t = time.perf_counter()
        try:
            module = importlib.import_module(modules[name])
        except Exception as exc:  # an engine that does not import is reported, and left out of the run
            reason = f"import {modules[name]} failed: {type(exc).__name__}: {exc}"
        else:
            top = sys.modules[modules[name].split(".")[0]]
            print(f"{name}: import {modules[name]} took {time.perf_counter() - t:.1f} s "
                  f"(version {getattr(top, '__version__', '?')}, from {top.__file__})")
    print(f"{name}: {'ready' if reason is None else 'skipped: ' + reason}")
    if reason is None:
        ready.append(name)
with open("/tmp/engines-ready", "w") as f:
    f.write(",".join(ready))
EOF
ready=$(cat /tmp/engines-ready 2>/dev/null)
[ -n "$ready" ] || { echo "no engine adapter can run here"; exit 5; }

# Bandwidth and latency of each engine that can run and of the project's backends, against a device copy in
# the same run (benchmarks/bench.py, bf16, the issue's shapes; ENGINES_BENCH_LIMIT seconds, 0 for none). Its
# JSON feeds "Pick a kernel" (--bench-json) below, so each engine's row shows its bandwidth beside its verdict.
bench_args=()
if [ "${ENGINES_BENCH_LIMIT:-240}" != 0 ]; then
  start=$(date +%s)
  timeout -s INT "${ENGINES_BENCH_LIMIT:-240}" python3 "$ROOT/benchmarks/bench.py" \
    --backends "$ready${BESIDE:+,$BESIDE}" --dtypes bfloat16 --no-compile --no-parity \
    --out "$OUT/engines-bench.json" 2>&1 | tail -n 40 | tee "$OUT/engines-bench-log.txt"
  echo "bench: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s"
  [ -s "$OUT/engines-bench.json" ] && bench_args=(--bench-json="$OUT/engines-bench.json")
fi

# The suites, the project's backends beside the engines that can run, on xdist workers (a crash ends its
# worker and is reported against the test it died in), SIGINT on timeout so that the report is still written.
backends=$ready${BESIDE:+,$BESIDE}
start=$(date +%s)
timeout -s INT "$LIMIT" python3 -m pytest --pyargs rmsnorm_conformance.suites --backend="$backends" --device=cuda \
  -n "$WORKERS" ${DTYPE:+--dtype="$DTYPE"} -q -p no:cacheprovider --sweep="${ENGINES_SWEEP:-ci}" \
  --report="$OUT/engines.md" --report="$OUT/engines.json" "${bench_args[@]}" ${ENGINES_ARGS:-} 2>&1 | tee "$OUT/engines-log.txt" \
  | tail -n 60
status=${PIPESTATUS[0]}
echo "conformance ($backends, ${DTYPE:-every dtype}, $WORKERS workers): exit $status, $(( $(date +%s) - start )) s"
# One archive of everything in OUT (a device call brings back at most 8 files: a run lost its engines.md and
# engines.json to that limit). ENGINES_PACK=0 leaves the files as they are.
if [ "${ENGINES_PACK:-1}" = 1 ]; then
  (cd "$OUT" && tar czf /tmp/engines-run.tgz . && rm -rf ./* && mv /tmp/engines-run.tgz .) && echo "packed: $OUT/engines-run.tgz"
fi
exit "$status"

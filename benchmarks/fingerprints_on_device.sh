#!/usr/bin/env bash
# The revealed reduction orders on a GPU machine with no network (benchmarks/fingerprints.py): install the engine
# wheels carried in .whl-fp/ (benchmarks/engine_wheels.py lists them; those too large for one call are left out and
# named), install this tree as a wheel, then probe the project's backends and the engines that import.
#
#   OUT=dir bash benchmarks/fingerprints_on_device.sh [BACKENDS] [SECONDS]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu}
BACKENDS=${1:-native,triton,liger,fla,xformers,cuda}
LIMIT=${2:-200}
SITE=/tmp/fp-site
mkdir -p "$OUT"
start=$(date +%s)
if ls .whl-fp/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl-fp/*.whl || echo "wheels: exit $?"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/fp-whl . \
  && python3 -m pip install -q --no-deps --no-index --force-reinstall /tmp/fp-whl/*.whl || echo "harness: exit $?"
echo "install: $(( $(date +%s) - start )) s"
export MAX_JOBS=${MAX_JOBS:-16}
ROOT=$(pwd)
cd "$(mktemp -d)"
python3 "$ROOT/benchmarks/fingerprints.py" --device cuda --backends "$BACKENDS" --time-limit "$LIMIT" \
  --out "$OUT/fingerprints.md" --json "$OUT/fingerprints.json" --window "${WINDOW:-12}" \
  --extra "quack and flashinfer: not probed: their wheels (the CUTLASS DSL's CUDA 13 libraries, 92 MiB; FlashInfer, 101 MiB) do not fit one call's 64 MiB carry" \
  2>&1 | tail -n 60

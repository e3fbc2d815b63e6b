#!/usr/bin/env bash
# The revealed reduction orders on a GPU machine with no network (benchmarks/fingerprints.py): install the engine
# wheels that travelled in .whl-engines/ (benchmarks/engine_wheels.py packs them; benchmarks/engine_site.sh joins a
# wheel that came in parts over several calls), install this tree as a wheel, then probe the project's backends and
# the engines that import.
#
#   bash benchmarks/fingerprints_on_device.sh stage                       # keep this call's wheels for a later call
#   OUT=dir bash benchmarks/fingerprints_on_device.sh run [BACKENDS] [SECONDS]
#
# FP_EXTRA adds a line to the report's notes (an engine left out, and why); WINDOW sets the leaves a tree shows.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
OUT=${OUT:-reports/gpu}
BACKENDS=${2:-native,triton,cuda,liger,fla,xformers,quack,flashinfer}
LIMIT=${3:-240}
mkdir -p "$OUT"
. benchmarks/engine_site.sh
engine_stage
[ "$mode" = stage ] && exit 0
engine_install
export MAX_JOBS=${MAX_JOBS:-16}
ROOT=$(pwd)
cd "$(mktemp -d)"
python3 "$ROOT/benchmarks/fingerprints.py" --device cuda --backends "$BACKENDS" --time-limit "$LIMIT" \
  --out "$OUT/fingerprints.md" --json "$OUT/fingerprints.json" --window "${WINDOW:-12}" ${FP_EXTRA:+--extra "$FP_EXTRA"} \
  --via "WINDOW=${WINDOW:-12} bash benchmarks/fingerprints_on_device.sh run $BACKENDS $LIMIT (the wheels of benchmarks/engine_wheels.py's pins)" 2>&1 | tail -n 60

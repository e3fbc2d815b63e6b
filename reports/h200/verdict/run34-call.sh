#!/usr/bin/env bash
# Run 34: the controller's one-at-a-time deal on the GPU, and the Triton forward's weight mode at run time in an A/B
# within one call. From the installed wheel in an empty folder; A is the tree as committed, W the tree with
# run34/weight-mode.patch (the plain, offset and unweighted forwards share a binary), installed into its own site
# folder and put first on PYTHONPATH. In order, each while the call has time for it:
#   1. Triton cold (as shipped: the warm-up prepares; every cache cleared), its compile log kept whole;
#   2. the README's RL command (one test dealt at a time now; Triton's cache warm from 1, as in runs 30 and 32);
#   3. the forward's bandwidth against a device copy at the issue's shapes, A then W then A (run33/forward_ab.py);
#   4. Triton cold with W, then with A again.
# From the tree's root on a fresh GPU machine, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run34-call.sh
set -u
R=${OUT:?OUT=folder}/run34
mkdir -p "$R"
begin=$(date +%s)
ROOT=$(pwd)
left() { echo $(( 585 - ($(date +%s) - begin) )); }
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . > /dev/null 2>&1 \
  && python3 -m pip install -q --no-deps /tmp/whl/*.whl
rm -rf /tmp/W && cp -r "$ROOT" /tmp/W/ 2>/dev/null || cp -r "$ROOT" /tmp/W
(cd /tmp/W && rm -rf build ./*.egg-info && patch -p1 -s < "$ROOT/reports/h200/verdict/run34/weight-mode.patch" \
  && python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/W/whl . > /dev/null 2>&1 \
  && python3 -m pip install -q --no-deps --target /tmp/W/site /tmp/W/whl/*.whl > /dev/null 2>&1) \
  || echo "W: build failed" >> "$R/runs.log"
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
echo "installed: $(( $(date +%s) - begin )) s" >> "$R/runs.log"
cold() {  # name site-folder-or-"" [extra pytest args]
  local name=$1 site=$2; shift 2
  rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
  local start=$(date +%s.%N)
  PYTHONPATH=$site timeout -s INT 130 python3 benchmarks/harness_throughput.py --pyargs \
    --backend=triton --device=cuda --workers=8 --out "$R/$name.md" -- "$@" > "$R/$name.log" 2>&1
  echo "$name: exit $?, $(python3 -c "import time; print(round(time.time() - $start, 1))") s" >> "$R/runs.log"
}
forward() {  # label site-folder-or-""
  local start=$(date +%s)
  (cd /tmp && PYTHONPATH=$2 timeout 60 python3 "$ROOT/reports/h200/verdict/run33/forward_ab.py" "$1" \
    "$R/forward.jsonl") >> "$R/forward.log" 2>&1
  echo "forward $1: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"
}
RMSNORM_COMPILE_LOG=$R/triton-cold-A-1-compile-log.jsonl cold triton-cold-A-1 "" -p compile_log_plugin
PYTHONPATH=benchmarks python3 benchmarks/compile_log_plugin.py "$R/triton-cold-A-1-compile-log.jsonl" \
  > "$R/triton-cold-A-1-compile-log-summary.md" 2>&1
gzip -f "$R/triton-cold-A-1-compile-log.jsonl"
RL=$(( $(left) - 200 )); (( RL > 240 )) && RL=240
if (( RL >= 150 )); then
  OUT=$R RL_LIMIT=$RL bash benchmarks/h200_verdict.sh rl 2>&1 | tail -2 >> "$R/runs.log"
else
  echo "rl: not run, $(left) s left" >> "$R/runs.log"
fi
(( $(left) > 190 )) && forward A ""
(( $(left) > 150 )) && forward W /tmp/W/site
(( $(left) > 130 )) && forward A ""
(( $(left) > 75 )) && cold triton-cold-W-1 /tmp/W/site
(( $(left) > 75 )) && cold triton-cold-A-2 ""
echo "done: $(( $(date +%s) - begin )) s" >> "$R/runs.log"

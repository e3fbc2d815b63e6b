#!/usr/bin/env bash
# Kernels run 71: why a worker kept 68 GiB of the H200 in run 70's RL command, and README's RL command again on
# the tree, which now gives back what a worker keeps reserved beyond its share after each case
# (device_faults.give_back_surplus). First benchmarks/reserved_growth.py (what one process keeps reserved over
# growing batches and CUDA-graph captures, with and without the give-back), then the RL command from an empty
# folder with its reports, -v with a time on each line, and every process's GPU memory with its pytest-xdist worker
# every 2 s. From the tree's root on a GPU machine (Liger-Kernel's wheel in .whl/, carried):
#   OUT=<folder> [RL_LIMIT=300] [GROWTH=0] bash reports/h200/kernels/run71/call.sh
set -u
R=${OUT:?OUT=folder}/run71
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl71 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl71/*.whl >> "$R/call.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  >> "$R/call.log" 2>&1 && export PYTHONPATH=/tmp/site  # Liger-Kernel
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
if [[ ${GROWTH:-1} != 0 ]]; then  # GROWTH=0 leaves it out (with little device time)
  ( cd /tmp && timeout 120 python3 "$OLDPWD/benchmarks/reserved_growth.py" --out "$R/reserved.json" ) \
    > "$R/reserved.log" 2>&1
  echo "reserved_growth: exit $?, $(( $(date +%s) - begin )) s" >> "$R/call.log"
fi
( while sleep 2; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | while IFS=', ' read -r pid mib; do
      echo "$(date +%s) $pid $mib $(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -m1 '^PYTEST_XDIST_WORKER=')"
    done
  done ) > "$R/memory.log" 2>&1 &
monitor=$!
( cd "$(mktemp -d)" && timeout -s INT "${RL_LIMIT:-300}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
    --backend=native,triton,cuda,liger --device=cuda -n 16 -v -p no:cacheprovider \
    --require-parity=triton:cuda --require-parity=native@cpu:native@cuda --modes=compile,cudagraph \
    --deadline=$(( ${RL_LIMIT:-300} - 40 )) --report="$R/rl.md" --report="$R/rl.json" --junitxml="$R/rl.junit.xml" \
  ) 2>&1 | while IFS= read -r line; do printf '%(%s)T %s\n' -1 "$line"; done > "$R/rl.log"
echo "rl: exit ${PIPESTATUS[0]}, $(( $(date +%s) - begin )) s" >> "$R/call.log"
kill "$monitor" 2>/dev/null
sort -k3 -n -r "$R/memory.log" | head -5 >> "$R/call.log"
nvidia-smi --query-gpu=name,memory.total --format=csv >> "$R/call.log" 2>&1
tar czf "$OUT/run71.tgz" -C "$OUT" run71 && rm -rf "$R"  # one file back

#!/usr/bin/env bash
# Kernels run 70 (second call): README's RL command again on the tree, after the first call's (run63/call.sh) RL
# command read FAIL for native, Triton and CUDA: out of memory (11-320 MiB free of 140 GiB under 16 workers) and one
# "CUDA error: unknown error" in the harness's reference. The tree now tries a case that ran out of memory again
# (three tries, the cache emptied between them). The wheel of the tree, Liger-Kernel's wheel from .whl/ (carried),
# then the command from an empty folder with its reports. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run70/call.sh
set -u
R=${OUT:?OUT=folder}/run70
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl70 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl70/*.whl >> "$R/call.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  >> "$R/call.log" 2>&1 && export PYTHONPATH=/tmp/site  # Liger-Kernel
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
# Who holds the GPU's memory: every 2 s, each process's use with its pytest-xdist worker (the -v log below names
# the tests each worker ran, in order).
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
  ) > "$R/rl.log" 2>&1
echo "rl: exit $?, $(( $(date +%s) - begin )) s" >> "$R/call.log"
kill "$monitor" 2>/dev/null
sort -k3 -n -r "$R/memory.log" | head -5 >> "$R/call.log"
nvidia-smi --query-gpu=name,memory.total --format=csv >> "$R/call.log" 2>&1
tar czf "$OUT/run70.tgz" -C "$OUT" run70 && rm -rf "$R"  # one file back

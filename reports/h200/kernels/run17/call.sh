#!/usr/bin/env bash
# Kernels run 17: the Triton backward's loop over tiles pipelined by Triton (tl.range's num_stages: the next
# tiles' loads staged in shared memory through cp.async) instead of the prefetch in registers, with 8, 16 or 32
# warps at 4096. benchmarks/triton_tuning.py --backward-variants times every variant at 65536x4096 and
# 2097152x128 bf16 against a copy in the same process and checks each one's dx and dw bit for bit against the
# default; then the backend's GPU tests run under two candidates (the pipelined loop at full and partial
# batches, eager, torch.compile and CUDA-graph replay). From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run17/call.sh
set -u
R=${OUT:?OUT=folder}/run17
mkdir -p "$R"
HERE=$(cd "$(dirname "$0")" && pwd)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
start=$(date +%s)
timeout 330 python3 benchmarks/triton_tuning.py --backward-variants --out "$R/variants.json" > "$R/variants.log" 2>&1
echo "sweep exit $? after $(( $(date +%s) - start )) s" >> "$R/variants.log"
i=0
for fields in '{"prefetch": false, "stages": 3, "warp_elems": 256}' '{"prefetch": false, "stages": 3}'; do
  i=$((i + 1))
  left=$(( 560 - ($(date +%s) - start) ))
  (( left > 100 )) && left=100
  (( left < 20 )) && { echo "no time left" > "$R/test_triton_$i.log"; continue; }
  RETUNE_BWD=$fields PYTHONPATH=$HERE timeout "$left" python3 -m pytest -p retune tests/test_triton_backend.py -n 8 -q \
    -p no:cacheprovider --tb=short > "$R/test_triton_$i.log" 2>&1
  echo "tests exit $? under $fields" >> "$R/test_triton_$i.log"
done

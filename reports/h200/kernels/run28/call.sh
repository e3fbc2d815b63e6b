#!/usr/bin/env bash
# Kernels run 28: the tree after run 27 (every 16-bit forward on the row kernel, its lean form where rows are exactly
# the padded width and aligned; the staged forward kernel removed; at most 40 registers for the 16-bit forwards with
# four groups a thread, what bf16 took before). From the tree's wheel: the CUDA build, the CUDA backend's GPU tests
# (bitwise native at every kernel path), the committed benchmark regenerated (Liger-Kernel's wheel in .whl/,
# carried), the parity and modes gate for native, Triton and CUDA; then the forward sweep of the default against two
# groups a thread and 256 threads a block (run 27: faster at 65536x4096, slower at the other shapes). From the tree's
# root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run28/call.sh
set -u
R=${OUT:?OUT=folder}/run28
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/k DEADLINE=${DEADLINE:-300} STAGES="build test_cuda bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "kernels done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
( cd "$(mktemp -d)" && timeout 150 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=native,triton,cuda \
  --device=cuda --modes=compile,cudagraph -k test_bitwise_parity -n 8 -q -p no:cacheprovider \
  --report="$R/parity.md" ) > "$R/parity.log" 2>&1
echo "parity gate exit $?" >> "$R/parity.log"
echo "parity done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
for d in bfloat16 float16; do
  RMSNORM_CUDA_BUILD_DIR=/tmp/rmsnorm-cuda-build timeout 100 python3 benchmarks/kernel_sweep.py --kinds forward \
    --dtype $d --tries "0,0,0,0;2,256,0,0" --out "$R/sweep-$d.json" > "$R/sweep-$d.log" 2>&1
done
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run28.tgz" -C "$OUT" run28 && rm -rf "$R"  # one file back (the device returns at most eight)

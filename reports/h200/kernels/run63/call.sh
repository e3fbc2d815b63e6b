#!/usr/bin/env bash
# Kernels run 63: CUDA's in-place tests, the committed benchmark and README's RL parity and modes gate on one tree,
# then the Triton backward's variants (benchmarks/triton_tuning.py --backward-variants), in one call. PATCHES
# (optional, space-separated patch files, applied in order with patch -p1) are applied to the tree first: the run 62
# patch that is kept, before it is committed. Then the wheel of that tree, the CUDA library built once
# (RMSNORM_CUDA_BUILD_DIR, shared by both stages), benchmarks/bench.py through benchmarks/h200_kernels_run.sh (the
# forward and the fused add in rounds against a copy, backward, latency, the CPU/GPU parity phase; Liger-Kernel's
# wheel in .whl/, carried) and README's RL command (native, Triton, CUDA, Liger-Kernel, --require-parity=triton:cuda
# --require-parity=native@cpu:native@cuda --modes=compile,cudagraph, -n 16) with its reports. From the tree's root on a GPU machine:
#   OUT=<folder> [PATCHES="reports/h200/kernels/run62/bwd-paired-rows.patch"] bash reports/h200/kernels/run63/call.sh
# With little device time: SKIP_RL=1 leaves out the RL command, VARIANTS_BY=0 the Triton variants.
set -u
R=${OUT:?OUT=folder}/run63
mkdir -p "$R"
begin=$(date +%s)
for p in ${PATCHES:-}; do patch -p1 --forward < "$p" >> "$R/call.log" 2>&1 || { echo "patch $p failed" >> "$R/call.log"; exit 1; }; done
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl63 . \
  && python3 -m pip install -q --no-deps --force-reinstall /tmp/whl63/*.whl >> "$R/call.log" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  >> "$R/call.log" 2>&1 && export PYTHONPATH=/tmp/site  # Liger-Kernel, for both stages
mv rmsnorm_conformance /tmp/rmsnorm_conformance_source  # the source folder would shadow the installed package
export RMSNORM_CUDA_BUILD_DIR=/tmp/rmsnorm-cuda-build
# CUDA's in-place fused add first (run 62: its refusal of overlapping x and residual ended the process from the fast
# entry), with the opcheck and torch.compile tests; it builds the library the stages below share.
timeout -s INT 200 python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider \
  -k "in_place or opcheck or compiled" > "$R/tests-cuda.log" 2>&1
echo "cuda tests: exit $?, $(tail -1 "$R/tests-cuda.log"), $(( $(date +%s) - begin )) s" >> "$R/call.log"
OUT=$R/k DEADLINE=${BENCH_DEADLINE:-300} STAGES="build bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh
echo "bench done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
# README's RL command from an empty folder, with its reports (the verdict of each backend; Liger-Kernel, which is
# not batch invariant, fails its own rows and the run's exit status with them).
[[ -n ${SKIP_RL:-} ]] || ( cd "$(mktemp -d)" && timeout -s INT "${RL_LIMIT:-260}" python3 -m pytest --pyargs rmsnorm_conformance.suites \
    --backend=native,triton,cuda,liger --device=cuda -n 16 -q -p no:cacheprovider \
    --require-parity=triton:cuda --require-parity=native@cpu:native@cuda --modes=compile,cudagraph \
    --deadline=$(( ${RL_LIMIT:-260} - 40 )) --report="$R/rl.md" --report="$R/rl.json" --junitxml="$R/rl.junit.xml" \
  ) > "$R/rl.log" 2>&1
echo "rl: exit $?${SKIP_RL:+ (not run: SKIP_RL)}, $(( $(date +%s) - begin )) s" >> "$R/call.log"
# The Triton backward's variants around the new default (benchmarks/triton_tuning.py's BWD_VARIANTS), if time is left.
if (( $(date +%s) - begin < ${VARIANTS_BY:-480} )); then
  ( cd /tmp && timeout 100 python3 "$OLDPWD/benchmarks/triton_tuning.py" --backward-variants \
      --out "$R/triton-variants.json" ) > "$R/triton-variants.log" 2>&1
  echo "triton variants: exit $?, $(( $(date +%s) - begin )) s" >> "$R/call.log"
fi
echo "done: $(( $(date +%s) - begin )) s" >> "$R/call.log"
tar czf "$OUT/run63.tgz" -C "$OUT" run63 && rm -rf "$R"  # one file back (the device returns at most eight)

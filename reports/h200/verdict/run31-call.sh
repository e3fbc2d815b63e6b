#!/usr/bin/env bash
# Run 31: the README's RL command to its end (native, Triton, CUDA and Liger-Kernel, two parity pairs,
# --modes=compile,cudagraph, -n 8) with the parity gate's tests dealt first (run 30 dealt them last: a 93 s tail),
# then the project's own tests that take a CUDA device where one is visible (the guard zones', device faults',
# devices', execution modes' and both kernels' tests), from the installed wheel. From the tree's root on a fresh
# GPU machine, Liger-Kernel's wheel in .whl/ (carried):
#   OUT=<folder> bash reports/h200/verdict/run31-call.sh
set -u
R=${OUT:?OUT=folder}/run31
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
OUT=$R RL_LIMIT=300 bash benchmarks/h200_verdict.sh bytecode rl 2>&1 | tail -2 >> "$R/runs.log"
start=$(date +%s)
timeout -s INT 200 python3 -m pytest tests/test_faults.py tests/test_devices.py tests/test_execution_modes.py \
  tests/test_cuda_backend.py tests/test_triton_backend.py -n 8 -q -p no:cacheprovider --tb=short -rs \
  --junitxml="$R/gpu-tests.junit.xml" > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $?, $(( $(date +%s) - start )) s" >> "$R/runs.log"

#!/usr/bin/env bash
# Kernels run 18, second call: the committed benchmark regenerated with Liger-Kernel's wheel in .whl/ (carried; the
# first call's checkout lacked it, so its bench.md has no Liger-Kernel rows). The same tree as call.sh. From the
# tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run18/bench.sh
set -u
R=${OUT:?OUT=folder}/run18
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/
OUT=$R/b DEADLINE=${DEADLINE:-200} STAGES="build bench" APPLY_PICKS=0 bash benchmarks/h200_kernels_run.sh

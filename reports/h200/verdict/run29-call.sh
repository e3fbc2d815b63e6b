#!/usr/bin/env bash
# Run 29: an A/B in one call of the guard zones', purity's and fresh outputs' conditions read back from the GPU at
# once (run29/read-flags.patch: comparison.read_flags), against one torch.equal (one wait) each. Run 28 found the
# waits 40 % of a Triton run's worker time under -n 8. A is this tree with the patch reversed, B this tree; each
# from its own wheel in its own site folder, Triton's and Inductor's caches shared (the kernels are the same).
# Triton cold with A first (the caches' warm-up), then A, B, A, B with caches warm. From the tree's root on a
# fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run29-call.sh
set -u
R=${OUT:?OUT=folder}/run29
mkdir -p "$R"
ROOT=$(pwd)
for v in A B; do
  rm -rf "/tmp/ab/$v" && mkdir -p "/tmp/ab/$v" && cp -r "$ROOT" "/tmp/ab/$v/tree" && cd "/tmp/ab/$v/tree" || exit 1
  rm -rf build ./*.egg-info
  if [[ $v == A ]]; then patch -R -p1 -s < reports/h200/verdict/run29/read-flags.patch || exit 1; fi
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "/tmp/ab/$v/whl" . > /dev/null 2>&1 \
    && python3 -m pip install -q --no-deps --target "/tmp/ab/$v/site" /tmp/ab/$v/whl/*.whl || exit 1
done
cd "$ROOT" && mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheels
PYTHONPATH=/tmp/ab/A/site OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-A bash benchmarks/h200_verdict.sh bytecode \
  triton-cold 2>&1 | tail -2 >> "$R/runs.log"
for n in 1 2; do
  for v in A B; do
    PYTHONPATH=/tmp/ab/$v/site OUT=$R VERDICT_LIMIT=150 VERDICT_TAG=-$v-$n bash benchmarks/h200_verdict.sh bytecode \
      triton 2>&1 | tail -2 >> "$R/runs.log"
  done
done

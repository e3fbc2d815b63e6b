#!/usr/bin/env bash
# Kernels run 66: run 63 and 65 found CUDA's in-place fused add leaving x's and residual's version counters alone (a
# graph that saved x before the write used it without complaint; the operator has no ADInplaceOrView kernel). Fixed
# in backends/cuda_rmsnorm/__init__.py as Triton's backend does it (torch.autograd.graph.increment_version after the
# write). The CUDA backend's in-place, fused add, opcheck and compile tests on the tree, the package installed
# editable. From the tree's root on a GPU machine:
#   OUT=<folder> bash reports/h200/kernels/run66/call.sh
set -u
R=${OUT:?OUT=folder}/run66
mkdir -p "$R"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/install.log" 2>&1
timeout -s INT "${LIMIT:-200}" python3 -m pytest tests/test_cuda_backend.py -n 8 -q -p no:cacheprovider \
  -k "in_place or fused_add or opcheck or compiled" --junitxml="$R/test_cuda_backend.junit.xml" \
  > "$R/test_cuda_backend.log" 2>&1
echo "cuda: exit $?, $(tail -1 "$R/test_cuda_backend.log")" >> "$R/call.log"
tar czf "$OUT/run66.tgz" -C "$OUT" run66 && rm -rf "$R"  # one file back

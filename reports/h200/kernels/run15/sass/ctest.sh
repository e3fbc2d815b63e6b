#!/bin/bash
# usage: REPO=<the clone with the editable install> ctest.sh <tree>: runs tests/test_cuda_backend.py -k compile against <tree>'s sources (the editable
# install maps rmsnorm_conformance.* to $REPO; this run maps it to <tree> instead)
T=$1
cd $T && python - "$T" "${REPO:?REPO=clone}" <<'PY'
import sys
root, repo = sys.argv[1], sys.argv[2]
import __editable___rmsnorm_conformance_0_1_0_finder as f
for k,v in list(f.MAPPING.items()): f.MAPPING[k]=v.replace(repo, root)
from rmsnorm_conformance.backends.cuda_rmsnorm import _build
print('SOURCE_DIR', _build.SOURCE_DIR)
import pytest
sys.exit(pytest.main(['tests/test_cuda_backend.py','-k','compile','-q','-p','no:cacheprovider']))
PY

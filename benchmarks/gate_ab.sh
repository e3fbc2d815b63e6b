#!/usr/bin/env bash
# A/B of the one-backend gate's time to a verdict: an older tree (in _old/) and this one, each installed from its
# wheel in turn, `pytest --pyargs rmsnorm_conformance.suites --backend=B
# --device=cuda -n 8 -q` from an empty folder, in turns; the first run warms the caches and is not counted.
#   mkdir _old && git archive <rev> -- harness contract suites backends rmsnorm_conformance zoo conftest.py \
#     pyproject.toml README.md LICENSE CONTRACT.md | tar -x -C _old      # the older tree, beside this one
#   OUT=<folder> [BACKENDS="triton cuda"] bash benchmarks/gate_ab.sh
set -u
R=$OUT/ab; mkdir -p $R
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/w_new . > $R/build.log 2>&1
(cd _old && python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/w_old .) >> $R/build.log 2>&1
mv rmsnorm_conformance /tmp/src_shadow
for b in ${BACKENDS:-triton}; do
  for tree in old new old new old; do
    python3 -m pip install -q --no-deps --force-reinstall /tmp/w_$tree/*.whl >> $R/build.log 2>&1
    d=$(mktemp -d); s=$(date +%s.%N)
    (cd $d && python3 -m pytest --pyargs rmsnorm_conformance.suites --backend=$b --device=cuda -n 8 -q -p no:cacheprovider > $R/$b-$tree.log 2>&1); rc=$?
    e=$(date +%s.%N)
    echo "$b $tree rc=$rc $(python3 -c "print(round($e-$s,1))") s $(grep -m1 'RMSNorm conformance:' $R/$b-$tree.log)" | tee -a $R/summary.txt
  done
done
nvidia-smi --query-gpu=name --format=csv,noheader >> $R/summary.txt
tar czf $OUT/ab.tgz -C $OUT ab

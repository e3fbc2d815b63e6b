#!/usr/bin/env bash
# Variants of the kernels side by side on one GPU: each variant is this tree with one patch applied (an empty
# patch: the tree as it is), built into its own site directory and CUDA build directory (all builds at once),
# then measured one after another by the same command. A kernel change is kept only when the variant that
# makes it beats the others in the same run, each against its own copy.
#
#   OUT=dir DEADLINE=seconds VARIANTS="name:patch-file ..." MEASURE='command' bash benchmarks/h200_variants.sh
#
# MEASURE runs once a variant with PYTHONPATH and RMSNORM_CUDA_BUILD_DIR set to that variant's, and $V (its name),
# $VOUT (where its files go: $OUT/$V) and $ROOT (this tree) in the environment; its output goes to $OUT/$V.log.
# A patch path is relative to this tree; "-" for none. reports/h200/kernels/run9 was measured this way.
set -u
OUT=${OUT:?OUT=dir} DEADLINE=${DEADLINE:?DEADLINE=seconds} VARIANTS=${VARIANTS:?VARIANTS=\"name:patch ...\"}
MEASURE=${MEASURE:?MEASURE=command}
START=$(date +%s)
ROOT=$(pwd)
mkdir -p "$OUT"
left() { echo $((DEADLINE - 15 - ($(date +%s) - START))); }

build() {  # name patch: copy, patch, wheel, install into /tmp/variants/NAME/site, build the library
  local name=$1 patch=$2 dir=/tmp/variants/$1
  rm -rf "$dir" && mkdir -p "$dir/site" && cp -r "$ROOT" "$dir/tree" && cd "$dir/tree" || return 1
  rm -rf build ./*.egg-info
  if [[ $patch != - ]]; then patch -p1 -s < "$ROOT/$patch" || return 1; fi
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dir/whl" . >/dev/null 2>&1 || return 1
  python3 -m pip install -q --no-deps --target "$dir/site" "$dir"/whl/*.whl || return 1
  cd /tmp && PYTHONPATH=$dir/site RMSNORM_CUDA_BUILD_DIR=$dir/build timeout "$(left)" python3 -c \
    'from rmsnorm_conformance.backends.cuda_rmsnorm import _build; print(_build.build())'
}

for spec in $VARIANTS; do
  name=${spec%%:*}
  ( build "$name" "${spec#*:}" > "$OUT/$name-build.log" 2>&1; echo "exit $?" >> "$OUT/$name-build.log" ) &
done
wait
for spec in $VARIANTS; do
  name=${spec%%:*}
  if ! tail -1 "$OUT/$name-build.log" | grep -q "exit 0"; then
    echo "$name: build failed (see $name-build.log)" | tee -a "$OUT/summary.log"
    continue
  fi
  [[ $(left) -gt 10 ]] || { echo "$name: not measured, deadline" | tee -a "$OUT/summary.log"; continue; }
  mkdir -p "$OUT/$name"
  ( cd /tmp && V=$name VOUT=$OUT/$name ROOT=$ROOT PYTHONPATH=/tmp/variants/$name/site \
      RMSNORM_CUDA_BUILD_DIR=/tmp/variants/$name/build timeout "$(left)" bash -c "$MEASURE" ) > "$OUT/$name.log" 2>&1
  echo "$name: exit $? after $(($(date +%s) - START)) s" | tee -a "$OUT/summary.log"
done

#!/usr/bin/env bash
# Kernels run 69: the CUDA backward tree's stages and rows a block, in three rounds (run 67 on an H100 read two stages
# at 0.943 / 0.929 of a copy against the default three's 0.923 / 0.903, one measurement each). The tree as it is,
# installed editable, benchmarks/kernel_sweep.py --kinds backward (bf16, each configuration against a copy in the same
# process, spot-checked bitwise against native), the same tries three times in turn. From the tree's root:
#   OUT=<folder> bash reports/h200/kernels/run69/call.sh
set -u
R=${OUT:?OUT=folder}/run69
mkdir -p "$R"
begin=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$R/install.log" 2>&1
TRIES="0,0,0,0;0,0,2,0;0,0,3,0;0,0,4,0;0,0,2,128;0,0,3,128;0,0,2,32"
for round in 1 2 3; do
  python3 benchmarks/kernel_sweep.py --kinds backward --dtype bfloat16 --tries "$TRIES" \
    --out "$R/sweep-$round.json" > "$R/sweep-$round.log" 2>&1
  echo "round $round: exit $?, $(( $(date +%s) - begin )) s" >> "$R/call.log"
done
python3 -c "import torch; print(torch.cuda.get_device_name())" >> "$R/call.log" 2>&1
tar czf "$OUT/run69.tgz" -C "$OUT" run69 && rm -rf "$R"  # one file back

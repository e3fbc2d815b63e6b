#!/usr/bin/env bash
# Run 17: where a machine's first one-backend run spends the 2-3 s more that its controller took (runs 15, 16). The
# wheel installed and site-packages compiled to bytecode as h200_verdict.sh's bytecode stage does, then CUDA cold
# twice, the controller under cProfile and -X importtime each time. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run17-call.sh
set -u
R=${OUT:?OUT=folder}/run17
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
export PYTHONPYCACHEPREFIX=/tmp/rmsnorm-pycache PYTHONUNBUFFERED=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 0 "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null
for i in 1 2; do
  rm -rf ~/.cache/torch_extensions ~/.triton/cache "${TMPDIR:-/tmp}/torchinductor_$(id -un)"
  start=$(date +%s.%N)
  ( cd "$(mktemp -d)" && timeout -s INT 110 python3 -X importtime -m cProfile -o "$R/controller-$i.prof" -m pytest \
      --pyargs rmsnorm_conformance.suites --backend=cuda --device=cuda -n 8 -q -p no:cacheprovider \
      2> "$R/importtime-$i.txt" | tail -3 ) > "$R/run-$i.log"
  echo "run $i: $(python3 -c "import time; print(round(time.time() - $start, 1))") s" | tee -a "$R/run-$i.log"
  python3 -c "import pstats, sys; s = pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(45); \
s.sort_stats('tottime').print_stats(25)" "$R/controller-$i.prof" > "$R/controller-$i.txt" 2>&1
  sort -t'|' -k2 -n -r "$R/importtime-$i.txt" | head -40 > "$R/importtime-top-$i.txt"
done
rm -f "$R"/*.prof "$R"/importtime-[12].txt

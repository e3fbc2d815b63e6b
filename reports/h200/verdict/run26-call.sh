#!/usr/bin/env bash
# Run 26: where a threshold plan's time goes on the GPU, caches warm. The padding plans are the largest share of a
# one-backend run's worker-seconds (run 25: 90 of 439 with caches kept). Each profile is one process (no xdist),
# bf16, the Triton backend, under cProfile: a first run that compiles, then the same run profiled. From the wheel
# in an empty folder. From the tree's root on a fresh GPU machine:
#   OUT=<folder> bash reports/h200/verdict/run26-call.sh
set -u
R=${OUT:?OUT=folder}/run26
mkdir -p "$R"
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/whl . && python3 -m pip install -q --no-deps /tmp/whl/*.whl
mv rmsnorm_conformance /tmp/  # nothing here may shadow the installed wheel
W=$(mktemp -d)
prof() {  # name, pytest -k expression, backend
  (cd "$W" && timeout 200 python3 -m pytest --pyargs rmsnorm_conformance.suites --backend="$3" --device=cuda \
    --dtype=bfloat16 -p no:cacheprovider -q -k "$2" --durations=15 > "$R/$1-first.log" 2>&1)
  (cd "$W" && timeout 200 python3 -m cProfile -o "$R/$1.prof" -m pytest --pyargs rmsnorm_conformance.suites \
    --backend="$3" --device=cuda --dtype=bfloat16 -p no:cacheprovider -q -k "$2" --durations=15 > "$R/$1.log" 2>&1)
  python3 -c "import pstats, sys; s = pstats.Stats(sys.argv[1]); s.sort_stats('cumulative').print_stats(70); \
s.sort_stats('tottime').print_stats(40)" "$R/$1.prof" > "$R/$1-stats.txt"
}
prof padding-triton "test_padding_at_thresholds and not w_float32" triton
prof padding-cuda "test_padding_at_thresholds and not w_float32" cuda
prof fused-add-padding-triton "test_fused_add_padding_at_thresholds and not w_float32" triton
prof first-call-triton "test_first_call and not w_float32 and not unweighted" triton

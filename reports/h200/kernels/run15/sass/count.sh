#!/bin/bash
# usage: count.sh <base tree> <variant-1 tree> <variant-2 tree> <outdir>: the main loop's instructions per element.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
O=$4
"$HERE/sass.sh" "$1" base "$O"; "$HERE/sass.sh" "$2" v1 "$O"; "$HERE/sass.sh" "$3" v2 "$O"
cp "$HERE"/*.py "$HERE"/*.json "$O"/ && cd "$O"
python3 run_base.py
python3 run_v1.py v1_k2.lst
python3 run_v2.py v2_k2.lst 32 && python3 run_v2.py v2_k2.lst 64 2>/dev/null | head -1
python3 opcheck.py run_base.py run_v1.py:v1_k2.lst run_v2.py:v2_k2.lst:32

"""Kernels run 31's variants of the lean row kernel, written as edits of rmsnorm_device.h:
    python variants.py <header> <variant> > <out>
interleave: a compiler barrier after each group's stores, so that they are not sunk to the kernel's end;
w-first: the K weight groups loaded into registers first, then each group's output stored in turn behind the same
barrier."""

import sys
from pathlib import Path

STORE = ("        ys[(m * tpr) * kOutVec + i] = make_uint4(out.u[4 * i], out.u[4 * i + 1], out.u[4 * i + 2], "
         "out.u[4 * i + 3]);\n")
BARRIER = '      asm volatile("" ::: "memory");\n'
W_LOOP = """      Group<T> wg;
      if constexpr (kOut != Mode::kUnweighted) {
#pragma unroll
        for (int i = 0; i < kIn; ++i) {
          const uint4 q = __ldg(ws + (m * tpr) * kIn + i);
          wg.u[4 * i] = q.x;
          wg.u[4 * i + 1] = q.y;
          wg.u[4 * i + 2] = q.z;
          wg.u[4 * i + 3] = q.w;
        }
      }
"""
W_FIRST = """    Group<T> wgs[K];
#pragma unroll
    for (int m = 0; m < K; ++m) {
      if constexpr (kOut != Mode::kUnweighted) {
#pragma unroll
        for (int i = 0; i < kIn; ++i) {
          const uint4 q = __ldg(ws + (m * tpr) * kIn + i);
          wgs[m].u[4 * i] = q.x;
          wgs[m].u[4 * i + 1] = q.y;
          wgs[m].u[4 * i + 2] = q.z;
          wgs[m].u[4 * i + 3] = q.w;
        }
      }
    }
"""


def main() -> None:
    header, variant = sys.argv[1], sys.argv[2]
    text = Path(header).read_text()
    assert text.count(STORE) == 1, "the lean kernel's store line"
    text = text.replace(STORE, STORE + BARRIER)
    if variant == "w-first":
        assert text.count(W_LOOP) == 1, "the lean kernel's weight loads"
        loop_head = "#pragma unroll\n    for (int m = 0; m < K; ++m) {\n" + W_LOOP
        assert text.count(loop_head) == 1
        text = text.replace(loop_head, W_FIRST + "#pragma unroll\n    for (int m = 0; m < K; ++m) {\n"
                            "      const Group<T>& wg = wgs[m];\n")
    elif variant != "interleave":
        raise SystemExit(f"unknown variant {variant}")
    sys.stdout.write(text)


main()

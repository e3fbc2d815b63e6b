"""Kernels run 60's variants of the lean row kernel (16-bit forward), written as edits of rmsnorm_device.h:
    python variants.py <header> <variant> > <out>
l2: x's 16-byte loads ask L2 for 256-byte lines (ld.global.L2::256B), a prefetch hint to the memory system;
l2nc: the same through the non-coherent path with no L1 allocation (ld.global.nc.L1::no_allocate.L2::256B);
stcs: y's 16-byte stores streaming (st.global.cs, evict first) instead of plain.
Loads and stores move the same bytes to the same places: no bit of any output changes."""

import sys
from pathlib import Path

LOAD = "        const uint4 q = valid ? xs[(m * tpr) * kIn + i] : make_uint4(0u, 0u, 0u, 0u);\n"
STORE = ("        ys[(m * tpr) * kOutVec + i] = make_uint4(out.u[4 * i], out.u[4 * i + 1], out.u[4 * i + 2], "
         "out.u[4 * i + 3]);\n")
ANCHOR = "enum class Cache : int { kPlain, kStream, kReadOnly };\n"
HELPER = """
__device__ __forceinline__ uint4 load_x_hinted(const uint4* p) {
  uint4 q;
  asm("%s {%%0, %%1, %%2, %%3}, [%%4];" : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w) : "l"(p));
  return q;
}
"""
OPS = {"l2": "ld.global.L2::256B.v4.u32", "l2nc": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32"}


def main() -> None:
    header, variant = sys.argv[1], sys.argv[2]
    text = Path(header).read_text()
    for line in (LOAD, STORE, ANCHOR):
        assert text.count(line) == 1, line
    if variant in OPS:
        text = text.replace(ANCHOR, ANCHOR + HELPER % OPS[variant])
        text = text.replace(LOAD, LOAD.replace("xs[(m * tpr) * kIn + i]", "load_x_hinted(xs + (m * tpr) * kIn + i)"))
    elif variant == "stcs":
        text = text.replace(STORE, "        __stcs(ys + (m * tpr) * kOutVec + i, make_uint4(out.u[4 * i], "
                                   "out.u[4 * i + 1], out.u[4 * i + 2], out.u[4 * i + 3]));\n")
    else:
        raise SystemExit(f"unknown variant {variant}")
    sys.stdout.write(text)


main()

"""classes.py: per-element instruction classes of the walked main paths (walk.py -v), for the report's table."""

import collections
import os
import re
import subprocess
import sys

PY = sys.executable


def path(f: str, start: str, end: str, dec: str) -> list[str]:
    out = subprocess.run(
        [PY, "walk.py", f, start, end, dec, "-v"], capture_output=True, text=True, cwd=os.getcwd()
    ).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines()[2:]]


def cls(t: str) -> str:  # noqa: C901 (one branch an instruction class)
    op = re.sub(r"^@!?U?P\w+\s+", "", t)
    o = op.split()[0]
    if re.match(r"(BAR|DEPBAR|LDGDEPBAR)", o):
        return "barrier / cp.async wait"
    if re.match(r"(LDG|STG|LDGSTS)", o):
        return "global ld/st (16 B)" if ".128" in o else "global ld/st (2 B)"
    if re.match(r"(LDS|STS)", o):
        return "shared ld/st"
    if re.match(r"(BAR|DEPBAR|LDGDEPBAR)", o):
        return "barrier / cp.async wait"
    if o.startswith("SHFL"):
        return "SHFL"
    if o in ("HADD2.F32",) or o.startswith("F2FP") or o == "PRMT":
        return "cvt (HADD2.F32/F2FP/PRMT)"
    if (o in ("IMAD.U32", "SHF.L.U32") and re.search(r"(0x10000|0x10), RZ", op)) or ("0xffff0000" in op):
        return "cvt (bf16 widen: shift/and)"
    if o in ("FMUL", "FADD") and not re.search(r"UR\d+$", op.rstrip(";").strip()):
        return "FMUL/FADD (element math + tree)"
    if o.startswith(("FFMA", "FCHK", "MUFU", "FMUL.FTZ", "I2FP", "FADD")):
        return "div/sqrt sequence"
    if o.startswith(("BRA", "BRX", "BSSY", "BSYNC", "EXIT", "CALL")):
        return "branch/convergence"
    return "int/address/predicate/const"


rows = {
    "Triton fp16@8192": [(1, "triton_f16.c", "0", "99999", "0c60=t,0d20=t,0e60=t,1100=n,1120=n,1dd0=n,1e30=n")],
    "CUDA staged fp16 K4 @8192": [
        (
            0.25,
            "staged_f16.c",
            "0",
            "2a00",
            "00d0=t,0350=n,03b0=t,06f0=n,07e0=t,0ae0=tn,0c50=n,1410=n,14a0=t,2570=n,25b0=n",
        ),
        (
            0.75,
            "staged_f16.c",
            "2a00",
            "6680",
            "2a60=n,2af0=t,3ad0=n,3b30=3b60,43b0=n,4460=t,4590=t,4d40=n,4d70=n,4da0=n,4dd0=n,4e00=n,4e80=t,4f40=t,5080=t,5100=n,5470=t,5970=t,5ec0=t,6360=t,6670=n",
        ),
        (
            0.25,
            "staged_f16.c",
            "2a00",
            "99999",
            "2a60=t,2af0=t,3ad0=n,3b30=3b60,43b0=n,4460=t,4590=t,4d40=n,4d70=n,4da0=n,4dd0=n,4e00=n,4e80=t,4f40=t,5080=t,5100=n,5470=t,5970=t,5ec0=t,6360=t,6670=n",
        ),
    ],
    "CUDA row fp16 K4 @8192": [
        (
            1,
            "row_f16.c",
            "0",
            "99999",
            "01d0=n,0290=t,06c0=n,07b0=t,0c10=n,0d00=t,1160=n,1250=t,16d0=n,17c0=t,18f0=t,20b0=n,20e0=n,2110=n,2140=n,2170=n,21f0=t,22a0=t,23d0=t,2430=n,24e0=t,2b60=t,2df0=t,33a0=t,3660=t,3c20=t,3ee0=t,4480=t",
        )
    ],
    "Triton bf16@4096": [(1, "triton_bf16.c", "0", "99999", "0c30=t,0cf0=t,0e30=t,10c0=n,10e0=n,1f30=n,1f90=n")],
    "CUDA row bf16 K4 @4096": [
        (
            1,
            "row_bf16.c",
            "0",
            "99999",
            "01d0=n,0290=t,0550=n,0640=t,0930=n,0a20=t,0d30=n,0e20=t,16e0=n,17d0=n,1820=1830,20c0=n,20f0=n,2120=n,2150=n,2180=n,2200=t,22b0=t,23e0=t,2440=n,24f0=t,2b70=t,2e00=t,33b0=t,3670=t,3c30=t,3ef0=t,4490=t",
        )
    ],
}


def main() -> None:
    table = {}
    for name, parts in rows.items():
        c = collections.Counter()
        for w, f, s, e, d in parts:
            for t in path(f, s, e, d):
                c[cls(t)] += w
        table[name] = c
    keys = sorted({k for c in table.values() for k in c}, key=lambda k: -table["CUDA staged fp16 K4 @8192"].get(k, 0))
    names = list(table)
    print(f"{'per element (warp-row count / 32)':<34}" + "".join(f"{n[:16]:>17}" for n in names))
    for k in keys:
        print(f"{k:<34}" + "".join(f"{table[n].get(k, 0) / 32:>17.2f}" for n in names))
    print(f"{'TOTAL per element':<34}" + "".join(f"{sum(table[n].values()) / 32:>17.2f}" for n in names))
    print(f"{'TOTAL per warp-row':<34}" + "".join(f"{sum(table[n].values()):>17.1f}" for n in names))
    if "-raw" in sys.argv:
        for n in names:
            print(n, sorted(((k, v) for k, v in table[n].items()), key=lambda x: -x[1]))


if __name__ == "__main__":
    main()

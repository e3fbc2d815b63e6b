"""walk.py FILE.c START END [DECISIONS]: walk one path through a compact listing (compact.py) from address START until
address END (exclusive) or EXIT, and count opcodes by class. DECISIONS: comma-separated addr=t|n for predicated BRA/EXIT
(t: taken). An undecided predicated branch stops the walk and says so. CALLs are stepped over (slow paths)."""

import collections
import re
import sys
from pathlib import Path

lines = Path(sys.argv[1]).read_text().splitlines()
ins, labels, order = {}, {}, []
pend = []
for line in lines:
    if line.startswith(".L") or line.startswith("$"):
        pend.append(line.rstrip(":").strip())
        continue
    a, rest = line.split("  ", 1)
    a = int(a, 16)
    text = rest[:70].strip()
    ins[a] = text
    order.append(a)
    for p in pend:
        labels[p] = a
    pend = []
nxt = {order[i]: order[i + 1] for i in range(len(order) - 1)}
start, end = int(sys.argv[2], 16), int(sys.argv[3], 16)
dec = {}
dec_addr = {}
if len(sys.argv) > 4 and sys.argv[4]:
    for d in sys.argv[4].split(","):
        k, v = d.split("=")
        if set(v) <= {"t", "n"}:
            dec[int(k, 16)] = [c == "t" for c in v]
        else:
            dec_addr[int(k, 16)] = int(v, 16)
path = []
a = start
steps = 0
while a is not None and a != end and steps < 100000:
    steps += 1
    t = ins[a]
    path.append(a)
    pred = re.match(r"@(!?U?P\w+)\s+", t)
    op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
    if op == "BRX":
        if a not in dec_addr:
            print(f"UNDECIDED BRX {a:04x}")
            break
        a = dec_addr[a]
        continue
    if op.startswith("BRA") or op == "EXIT":
        if pred:
            if a not in dec:
                print(f"UNDECIDED {a:04x}: {t}")
                break
            seq = dec[a]
            taken = seq.pop(0) if len(seq) > 1 else seq[0]
        else:
            taken = True
        if taken:
            if op == "EXIT":
                break
            lab = re.search(r"`\(([^)]+)\)", t).group(1)
            a = labels[lab]
            continue
    a = nxt.get(a)


def cls(t: str) -> str:
    op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
    return op


c = collections.Counter(cls(ins[a]) for a in path)
print(f"{len(path)} instructions on the path")
print(" ".join(f"{k}:{v}" for k, v in c.most_common()))
if "-v" in sys.argv:
    print("\n".join(f"{a:04x} {ins[a]}" for a in path))

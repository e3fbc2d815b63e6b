import re
import sys
from pathlib import Path

# compact.py FILE: one line an instruction, with the source file:line of its //## annotation
cur = ""
for line in Path(sys.argv[1]).read_text().splitlines(keepends=True):
    m = re.search(r'//## File "([^"]+)", line (\d+)', line)
    if m:
        cur = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m:
        print(f"{m.group(1)}  {m.group(2):<70} {cur}")
    elif line.strip().startswith(".L") or line.strip().startswith("$"):
        print(line.strip())

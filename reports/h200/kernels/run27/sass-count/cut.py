import re
import sys
from pathlib import Path

# cut.py ALL.dis NAME > out : the .text.NAME section of an nvdisasm -c -g listing, encodings removed
text = Path(sys.argv[1]).read_text().split("\n")
name = sys.argv[2]
out, on = [], False
for line in text:
    if line.startswith("//--------------------- "):
        on = line.strip("/- ").strip() == ".text." + name
        continue
    if on:
        line = re.sub(r"/\* 0x[0-9a-f]+ \*/", "", line).rstrip()
        if line.strip():
            out.append(line)
print("\n".join(out))

# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import re
import sys

# usage: lines.py file.nvd funcsubstr -> "addr line instr" and labels
src=open(sys.argv[1]).read().split('\n')
name=sys.argv[2]
on=False;line='?';fname=''
for l in src:
    if l.startswith('//----') and '.text.' in l:
        on = name in l; continue
    if not on: continue
    m=re.match(r'\s*//## File "(.*?)", line (\d+)',l)
    if m:
        f=m.group(1).split('/')[-1]; line=(f[:3] if not f.startswith('rmsnorm_device') else '')+m.group(2); continue
    m=re.match(r'\s*/\*([0-9a-f]{4,5})\*/\s+(.*?)\s*;',l)
    if m: print('%05x %5s  %s'%(int(m.group(1),16),line,m.group(2))); continue
    m=re.match(r'^(\.L_x_\d+):',l)
    if m: print(m.group(1)+':')

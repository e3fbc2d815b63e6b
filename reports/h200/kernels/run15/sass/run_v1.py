# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import sys

from loop2 import run

A={"0bbf0":True,"0d1a0":True,"0d380":False,"0d3a0":True,"0dca0":False,"0dd10":True,"0dee0":True,"0ece0":True,
"0f0c0":True,"0f170":True,"0f2b0":True,"0f3a0":True,"0f490":True,"0f750":False,"0fab0":True,"103c0":False,"10420":True,
"10930":True,"11ee0":True,"120c0":False,"120e0":True,"12a70":False,"12ae0":True,"12cd0":True,"13b00":True,
"13f20":True,"13fd0":True,"14110":True,"14210":True,"142f0":True,"144a0":False,"147e0":True,"15220":False,"15280":True}
dwb={"i1":"0ba00","i2":"10760","A":"157b0","B":"158d0","C":"15a20","L":"15c30","P":"15c50","back":"15fc0"}
extra={"0b8c0":lambda i:(i%8)!=0,"0ba40":lambda i:((i+2)%8)!=0,"10790":lambda i:((i+3)%8)!=0}
lst=sys.argv[1] if len(sys.argv)>1 else 'v1_k2.lst'
path=run(lst,'0b890','15fd0',A,dwb,extra,report=('-r' in sys.argv),label='dim4096')
B=dict(A); B.update({"0dca0":True,"0ece0":False,"0ed10":True,"0ed70":True,"0edd0":False,"0ee30":False,"0ee80":False,
"12a70":True,"13b00":False,"13b30":True,"13b90":True,"13bf0":False,"13c50":False,"13ca0":False})
for k in ["0dd10","0dee0","12ae0","12cd0"]: B.pop(k)
run(lst,'0b890','15fd0',B,dwb,extra,report=('-r' in sys.argv),label='dim128')

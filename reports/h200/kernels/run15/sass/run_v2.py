# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import sys

from loop2 import run

A={"0ba20":True,"0cfa0":True,"0d190":False,"0d1b0":True,"0da00":False,"0da70":True,"0dc40":True,"0ea40":True,
"0ee20":True,"0eed0":True,"0f010":True,"0f100":True,"0f200":True,"0f4c0":False,"0f7c0":True,"10080":False,"100f0":True,
"10620":True,"11bc0":True,"11db0":False,"11dd0":True,"126a0":False,"12710":True,"12900":True,"13730":True,
"13b50":True,"13c00":True,"13d40":True,"13e40":True,"13f30":True,"140d0":False,"143c0":True,"14d50":False,"14dd0":True}
dwb={"i1":"0b810","i2":"10430","A":"152f0","B":"15410","C":"15570","L":"157a0","P":"157b0","back":"15b20"}
extra={"0b6f0":lambda i:(i%8)!=0,"0b850":lambda i:((i+2)%8)!=0,"10460":lambda i:((i+3)%8)!=0}
lst=sys.argv[1] if len(sys.argv)>1 else 'v2_k2.lst'
leaves=int(sys.argv[2]) if len(sys.argv)>2 else 64
path=run(lst,'0b6a0','15b30',A,dwb,extra,leaves=leaves,report=('-r' in sys.argv),label='dim4096 leaves=%d'%leaves)
B=dict(A); B.update({"0da00":True,"0ea40":False,"0ea80":True,"0eae0":True,"0eb40":False,"0eb90":False,"0ebe0":False,
"126a0":True,"13730":False,"13770":True,"137d0":True,"13830":False,"13880":False,"138d0":False})
for k in ["0da70","0dc40","12710","12900"]: B.pop(k)
run(lst,'0b6a0','15b30',B,dwb,extra,report=('-r' in sys.argv),label='dim128')

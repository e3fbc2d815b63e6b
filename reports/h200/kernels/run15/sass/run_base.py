# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import json
import sys

from loop2 import run

A={('0'+k):v for k,v in json.load(open('decA.json')).items() if k not in ('1d00','6a70')}
A={k:(('0'+v) if isinstance(v,str) else v) for k,v in A.items()}
B={('0'+k):v for k,v in json.load(open('decB.json')).items() if k not in ('1d00','6a70')}
B={k:(('0'+v) if isinstance(v,str) else v) for k,v in B.items()}
dwb={"i1":"01d00","i2":"06a70","A":"0b900","B":"0ba20","C":"0bbb0","L":"0bdd0","P":"0be00","back":"0c1b0"}
run('base_k2.lst','01cd0','0c1c0',A,dwb,None,report=('-r' in sys.argv),label='dim4096')
run('base_k2.lst','01cd0','0c1c0',B,dwb,None,report=('-r' in sys.argv),label='dim128')

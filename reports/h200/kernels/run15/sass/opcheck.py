# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import collections
import contextlib
import io
import sys

import loop2

for spec in sys.argv[1:]:
    script,*args=spec.split(':')
    paths={}
    orig=loop2.run
    def run(*a,**k):
        p=orig(*a,**k); paths[k.get('label')]=(p,k.get('leaves',64)); return p
    loop2.run=run
    sys.argv=[script]+args
    with contextlib.redirect_stdout(io.StringIO()):
        exec(open(script).read(),{'__name__':'__main__'})
    loop2.run=orig
    for lab,(p,leaves) in paths.items():
        c=collections.Counter()
        for a,ln,t in p:
            op=(t.split()[1] if t.startswith('@') else t.split()[0])
            op=op.split('.')[0] if not op.startswith('LDS') else op
            c[op]+=1
        keys=['LDGSTS','STG','LDS.128','LDS','LDS.64','STS','BAR','SHFL','MUFU','FCHK','F2FP','FMUL','FADD','FFMA','DEPBAR','LDGDEPBAR','FSEL']
        print('%-10s %-18s'%(script,lab),' '.join('%s=%.2f'%(k,c[k]/leaves) for k in keys))

# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import collections
import sys

from walk import walk


def run(lst,start,exit_,dec,dwb,extra=None,leaves=64,elems=16,report=False,label=''):
    d=dict(dec)
    L=collections.defaultdict(list)
    runs=leaves//8
    for i in range(0,leaves,2):
        L[dwb['i1']].append(not (i+2<leaves))
        L[dwb['i2']].append(not (i+3<leaves))
        if extra:
            for k,f in extra.items(): L[k].append(f(i))
        L[dwb['A']].append((i&2)==0)
        if i&2:
            L[dwb['B']].append((i&4)==0)
            if i&4:
                run=i>>3
                L[dwb['C']].append(not(run&1))
                bits=run
                while bits&1:
                    bits>>=1
                    L[dwb['L']].append(bool(bits&1))
                L[dwb['P']].append(not(run+1<runs))
        L[dwb['back']].append(i+2<leaves)
    d.update(L)
    path,why=walk(lst,int(start,16),int(exit_,16),d,maxn=200000)
    if why!='STOP':
        print(why); [print('%05x %5s %s'%x) for x in path[-10:]]; sys.exit(1)
    n=len(path)
    print('%s %s: %d instr over %d leaves -> %.2f per element'%(lst,label,n,leaves,n/(leaves*elems)))
    if report:
        c=collections.Counter(t.split()[0] if not t.startswith('@') else t.split()[1] for a,ln,t in path)
        print(' '.join('%s:%.2f'%(k,v/(leaves*elems)) for k,v in sorted(c.items(),key=lambda kv:-kv[1])))
    return path

def one_iter(path,head,k=3):
    n=0;out=[]
    for a,ln,t in path:
        if a==head: n+=1
        if n==k: out.append((a,ln,t))
    return out

# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import collections
import json
import re
import sys

from cfg import parse


def walk(lst,start,stop,dec,maxn=20000,verbose=False):
    ins,labels=parse(lst)
    idx={a:i for i,(a,l,t) in enumerate(ins)}
    i=idx[start];path=[];seen=collections.Counter()
    while True:
        a,ln,t=ins[i]
        if a==stop and len(path)>0: return path,"STOP"
        path.append((a,ln,t))
        if len(path)>maxn: raise Exception('too long')
        m=re.search(r'\.L_x_\d+',t)
        if re.match(r'(@!?U?P\w+\s+)?EXIT',t) and not t.startswith('@'): return path,'EXIT'
        if 'BRX' in t:
            key='%05x'%a
            if key not in dec: return path,'UNRESOLVED '+key
            i=idx[int(dec[key],16)];continue
        if re.search(r'\bBRA\b',t):
            tgt=labels[m.group(0)]
            cond=t.startswith('@')
            key='%05x'%a
            if cond:
                if key not in dec: return path,'UNRESOLVED '+key
                seen[key]+=1
                take=dec[key]
                if isinstance(take,list): take=take[min(seen[key]-1,len(take)-1)]
            else: take=True
            if take and tgt==stop: return path,'STOP'
            if take: i=idx[tgt]; continue
        i+=1
if __name__=='__main__':
    lst=sys.argv[1]; start=int(sys.argv[2],16); stop=int(sys.argv[3],16); dec=json.loads(open(sys.argv[4]).read())
    path,why=walk(lst,start,stop,dec)
    print(why,len(path))
    if len(sys.argv)>5:
        c=collections.Counter(ln for a,ln,t in path)
        for k,v in sorted(c.items(),key=lambda kv:kv[0]): print(k,v)
    if why.startswith('UNRES'):
        for x in path[-12:]: print('%05x %5s %s'%x)

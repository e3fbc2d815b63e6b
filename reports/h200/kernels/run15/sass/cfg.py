# ruff: noqa  (a throwaway SASS-reading script of run 15, kept as it was run: NOTES.md gives its commands)
import collections
import re
import sys


# parse listing into blocks
def parse(fn):
    ins=[]  # (addr,line,text,label_before)
    labels={}
    pend=[]
    for l in open(fn):
        l=l.rstrip('\n')
        if l.endswith(':') and l.startswith('.L'):
            pend.append(l[:-1]); continue
        a,ln,txt=l[:5],l[6:11].strip(),l[13:]
        a=int(a,16)
        for p in pend: labels[p]=a
        ins.append((a,ln,txt)); pend=[]
    return ins,labels
def blocks(ins,labels):
    leaders=set([ins[0][0]])|set(labels.values())
    for i,(a,ln,t) in enumerate(ins):
        if re.search(r'\b(BRA|EXIT|RET|CALL|BRX|JMP)\b',t) and i+1<len(ins): leaders.add(ins[i+1][0])
    bl=[];cur=[]
    for x in ins:
        if x[0] in leaders and cur: bl.append(cur);cur=[]
        cur.append(x)
    bl.append(cur)
    return bl
if __name__=='__main__':
    ins,labels=parse(sys.argv[1])
    inv={v:k for k,v in labels.items()}
    lo=int(sys.argv[2],16) if len(sys.argv)>2 else 0; hi=int(sys.argv[3],16) if len(sys.argv)>3 else 1<<30
    for b in blocks(ins,labels):
        if b[0][0]<lo or b[0][0]>hi: continue
        lines=collections.Counter(x[1] for x in b)
        last=b[-1][2]
        m=re.search(r'\.L_x_\d+',last)
        tgt=('->%05x'%labels[m.group(0)]) if m and m.group(0) in labels else ''
        print('%05x-%05x n=%3d lines=%s | %s %s'%(b[0][0],b[-1][0],len(b),' '.join('%s:%d'%kv for kv in sorted(lines.items(),key=lambda kv:-kv[1])[:8]),last if re.search(r'BRA|EXIT|RET|CALL|BAR|DEPBAR',last) else '',tgt))

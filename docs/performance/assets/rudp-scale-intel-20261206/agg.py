import sys, subprocess, collections
f=sys.argv[1]; comm=sys.argv[2] if len(sys.argv)>2 else 'keel-shared-0'
out=subprocess.run(['perf','script','-i',f,'-F','comm,ip,sym,dso','-G' if False else '--no-inline'],capture_output=True,text=True).stdout
# perf script with -g prints stacks; take first frame line after header
tot=0; dso=collections.Counter(); sym=collections.Counter()
lines=out.split('\n'); i=0
cur=None
for ln in lines:
    if not ln.strip(): cur=None; continue
    if not ln.startswith((' ','\t')):
        cur=ln.split()[0]; first=True; continue
    if cur is None: continue
    if first:
        first=False
        if cur!=comm: continue
        parts=ln.split(None,1)
        rest=parts[1] if len(parts)>1 else ''
        d=rest[rest.rfind('(')+1:-1] if '(' in rest else '?'
        s=rest[:rest.rfind('(')].strip()
        s=s.split('+0x')[0]
        tot+=1; dso[d.split('/')[-1]]+=1; sym[(d.split('/')[-1],s)]+=1
print('samples',tot)
for d,n in dso.most_common(6): print(f'{100*n/tot:6.2f}% {d}')
for (d,s),n in sym.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 30): print(f'{100*n/tot:6.2f}% {d[:12]:12} {s[:110]}')

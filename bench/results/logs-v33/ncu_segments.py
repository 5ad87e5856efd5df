import csv,collections,sys
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=rows[2:]
ia=hdr.index("Address"); isrc=hdr.index("Source"); iall=hdr.index("Warp Stall Sampling (All Samples)")
b=[int(r[ia],16) for r in data if 'USETMAXREG' in r[isrc]]
role=int(sys.argv[2]) if len(sys.argv)>2 else 2
lo,hi=b[role-1],(b[role] if role<len(b) else 1<<62)
acc=collections.OrderedDict(); cur='start'; tot=0
for r in data:
    a=int(r[ia],16)
    if lo<=a<hi:
        s=r[isrc]
        if any(k in s for k in ('TRYWAIT','DEPBAR','BAR.SYNC','BAR.RED','FENCE','MEMBAR')) :
            cur=hex(a-lo)+' '+s.strip()[:50]
        v=float(r[iall] or 0); acc[cur]=acc.get(cur,0)+v; tot+=v
print('total',tot)
for k,v in acc.items():
    if v>0.01*tot: print(f"{v:6.0f} {100*v/tot:5.1f}% {k}")

import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=rows[2:]
ia=hdr.index("Address"); isrc=hdr.index("Source"); iall=hdr.index("Warp Stall Sampling (All Samples)")
# role boundaries by USETMAXREG
roles=[]; cur='prologue'
out=collections.Counter(); top=[]
for r in data:
    src=r[isrc].strip()
    if 'USETMAXREG' in src:
        if 'TRY_ALLOC' in src: cur='pv'
        elif 'DEALLOC' in src and ('0x68' in src or '0x78' in src or 'e8' in src): cur='softmax'
        else: cur='producer:'+src.split()[-1]
    v=float(r[iall] or 0)
    out[cur]+=v
    top.append((v,cur,r[ia][-5:],src[:70]))
T=sum(out.values())
for k,v in out.most_common(): print(f"{k:30s} {100*v/T:5.1f}%")
top.sort(reverse=True)
for v,c,a,s in top[:25]: print(f"{100*v/T:5.1f}% {c:10s} {a} {s}")

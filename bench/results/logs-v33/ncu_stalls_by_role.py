import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
hdr=rows[1]; data=rows[2:]
ia=hdr.index("Address"); isrc=hdr.index("Source"); iall=hdr.index("Warp Stall Sampling (All Samples)")
stall_cols=[i for i,h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
# role boundaries
bounds=[]
for r in data:
    if "USETMAXREG" in r[isrc]: bounds.append((int(r[ia],16), r[isrc].strip()))
print(bounds)
def role(a):
    # before first boundary: prologue; PV region begins at TRY_ALLOC
    names=['prologue','pv','softmax','producer']
    k=0
    for i,(b,_) in enumerate(bounds):
        if a>=b: k=i+1
    return names[min(k,3)]
tot=collections.Counter(); per=collections.defaultdict(collections.Counter)
for r in data:
    a=int(r[ia],16); ro=role(a)
    for i in stall_cols:
        v=float(r[i] or 0); per[ro][hdr[i]]+=v; tot[ro]+=v
T=sum(tot.values())
for ro in tot:
    print(ro, f"{100*tot[ro]/T:.1f}% of samples")
    for k,v in per[ro].most_common(8): print("   ",k, f"{100*v/tot[ro]:.1f}%")

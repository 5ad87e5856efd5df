# Warp-stall samples and instructions of an ncu source-page CSV (--page source --csv --print-source sass)
# by CUDA source line, from `nvdisasm -g -c` of the same binary (all.sass, built with -lineinfo).
# Usage: python3 sass_by_line.py sass_X.csv.gz [top]
import csv,gzip,re,sys,collections
# offset -> file:line
m={}; cur=None
for l in open('all.sass'):
    g=re.search(r'//## File "([^"]+)", line (\d+)',l)
    if g: cur=(g.group(1).split('/')[-1],int(g.group(2))); continue
    g=re.search(r'/\*([0-9a-f]{4,})\*/\s+(.*)',l)
    if g and cur: m[int(g.group(1),16)]=(cur,g.group(2).strip())
rows=list(csv.reader(gzip.open(sys.argv[1],'rt')))
hdr=rows[1]; data=rows[2:]
ia=hdr.index("Address"); isrc=hdr.index("Source"); iall=hdr.index("Warp Stall Sampling (All Samples)"); iex=hdr.index("Instructions Executed")
base=int(data[0][ia],16)
byline=collections.Counter(); exl=collections.Counter(); miss=0
tot_s=0; tot_e=0
for r in data:
    off=int(r[ia],16)-base
    s=float(r[iall] or 0); e=float(r[iex] or 0)
    tot_s+=s; tot_e+=e
    k=m.get(off)
    if k is None: miss+=1; key=('?',0)
    else:
        key=k[0]
        if k[1].split()[0].lstrip('@!P0123456789 ').split('.')[0] not in r[isrc]: pass
    byline[key]+=s; exl[key]+=e
print('samples',tot_s,'inst',tot_e,'unmapped',miss)
for k,v in byline.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 40):
    print(f"{100*v/tot_s:5.1f}% samp {100*exl[k]/tot_e:5.1f}% inst  {k[0]}:{k[1]}")

import re,sys
lines=open(sys.argv[1]).read().split('\n')
start=int(sys.argv[2],16); end=int(sys.argv[3],16)
insts=[]
i=0
while i < len(lines):
    m=re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/',lines[i])
    if m:
        addr=int(m.group(1),16); txt=m.group(2).strip()
        m2=re.search(r'/\* (0x[0-9a-f]+) \*/',lines[i+1])
        hi=int(m2.group(1),16)
        stall=(hi>>41)&0xf; yld=(hi>>45)&1; wb=(hi>>46)&7; rb=(hi>>49)&7; wm=(hi>>52)&0x3f
        insts.append((addr,txt,stall,wb,rb,wm))
        i+=2
    else: i+=1
tot=0; pipes={}
for a,t,s,wb,rb,wm in insts:
    if start<=a<end:
        tot+=s
        op=t.split()[0] if not t.startswith('@') else t.split()[1]
        op=op.split('.')[0]
        pipes[op]=pipes.get(op,0)+1
        if len(sys.argv)>4: print(hex(a),s,'wb%d'%wb if wb!=7 else '','wm%02x'%wm if wm else '',t[:70])
print('instructions',sum(pipes.values()),'stall sum',tot)
print(sorted(pipes.items(),key=lambda x:-x[1]))

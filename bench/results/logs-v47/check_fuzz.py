import random, subprocess, sys, time
random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
t_end = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 600)
n = fails = 0
while time.time() < t_end:
    B = random.choice([1, 1, 2, 3, 5, 8, 13])
    heads = random.choice([1, 2, 3, 8, 12, 16, 24, 32, 64, 96, 128])
    ql = random.choice([1, 1, 2, 3, 4, 9, 16])
    while heads * ql > 512: ql = max(1, ql // 2)
    L = [random.choice([0, 1, 63, 64, 65, random.randint(0, 3000), random.randint(0, 300)]) for _ in range(B)]
    sms = random.choice([0, 1, 2, 7, 37, 132, 200])
    args = ["/work/main/build/kbmla", "check", "--seqlens", ",".join(map(str, L)), "--heads", str(heads), "--q-len", str(ql),
            "--sms", str(sms), "--seed", str(random.randint(0, 1 << 30))]
    if random.random() < 0.3: args.append("--no-causal")
    if random.random() < 0.3: args += ["--d-qk", "512"]
    if random.random() < 0.2: args += ["--batch-invariant", str(random.choice([1, 2, 5, 16]))]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    n += 1
    out = r.stdout + r.stderr
    if "error: kbmla:" in out and ("must be" in out or "exceed" in out):
        continue
    if r.returncode != 0 or "check: PASS" not in r.stdout:
        fails += 1
        print("FAIL", " ".join(args[1:]), "\n", r.stdout[-600:], r.stderr[-600:], flush=True)
print(f"{n} checks, {fails} failed", flush=True)

"""GPU tests of the binding with torch CUDA tensors: eager decode against a float64
reference computed with torch, CUDA-graph capture and replay (host and device plans),
and torch.compile through the custom op. Skipped without torch or an sm_90 GPU."""
import math

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU", allow_module_level=True)

import kbmla  # noqa: E402
import kbmla.torch_ops as kops  # noqa: E402

HEADS, Q_LEN, PAGE = 16, 2, 64
SCALE = 576 ** -0.5


def make_problem(seqlens, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch = len(seqlens)
    pages = [(L + PAGE - 1) // PAGE for L in seqlens]
    max_pages = max(max(pages), 1)
    num_pages = sum(pages) + 3
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    table = torch.zeros(batch, max_pages, dtype=torch.int32, device="cuda")
    at = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[at:at + n]
        at += n
    cache = (torch.rand(num_pages, PAGE, 576, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    q = (torch.rand(batch, Q_LEN, HEADS, 576, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    return q, cache, table, torch.tensor(seqlens, dtype=torch.int32, device="cuda")


def reference(q, cache, table, seqlens):
    out = torch.zeros(q.shape[0], Q_LEN, HEADS, 512, dtype=torch.float64, device="cuda")
    lse = torch.full((q.shape[0], Q_LEN, HEADS), -math.inf, dtype=torch.float64, device="cuda")
    for b, L in enumerate(seqlens.tolist()):
        if L == 0:
            continue
        n = (L + PAGE - 1) // PAGE
        kv = cache[table[b, :n].long()].reshape(-1, 576)[:L].double()
        for i in range(Q_LEN):
            visible = L - Q_LEN + i + 1
            if visible <= 0:
                continue
            s = q[b, i].double() @ kv[:visible].T * SCALE
            lse[b, i] = torch.logsumexp(s, dim=-1)
            out[b, i] = torch.softmax(s, dim=-1) @ kv[:visible, :512]
    return out, lse


def check(out, lse, ref_out, ref_lse):
    err = (out.double() - ref_out).norm() / ref_out.norm()
    assert err < 1e-2
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.double()), finite)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max() < 1e-3


def buffers(q, plan):
    out = torch.full((q.shape[0], Q_LEN, HEADS, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((q.shape[0], Q_LEN, HEADS), float("nan"), dtype=torch.float32, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    kbmla.init_workspace(ws, torch.cuda.current_stream().cuda_stream)
    return out, lse, ws


SEQLENS = [0, 1, 63, 700, 9000]
CFG = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE)


def test_eager_decode_matches_reference():
    q, cache, table, seqlens = make_problem(SEQLENS)
    plan = kbmla.Plan.create(CFG, SEQLENS)
    kv = kbmla.KvCache(cache)
    out, lse, ws = buffers(q, plan)
    kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, torch.cuda.current_stream().cuda_stream)
    assert kbmla.read_device_errors(ws)[0] == 0
    check(out, lse, *reference(q, cache, table, seqlens))


def test_wrong_tensor_is_a_value_error():
    q, cache, table, seqlens = make_problem(SEQLENS)
    plan = kbmla.Plan.create(CFG, SEQLENS)
    out, lse, ws = buffers(q, plan)
    with pytest.raises(ValueError, match="lse has dtype float16, expected float32"):
        kbmla.decode(plan, kbmla.KvCache(cache), q, table, seqlens, out, lse.half(), ws)


def test_graph_captured_device_plan_replays_with_new_seqlens():
    lengths = [0, 1, 63, 700, 9000]
    q, cache, table, seqlens = make_problem([L + 20 for L in lengths])
    plan = kbmla.Plan.create_device_planned(CFG, len(lengths))
    kv = kbmla.KvCache(cache)
    out, lse, ws = buffers(q, plan)
    dev_seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph, stream=s):
            stream = torch.cuda.current_stream().cuda_stream
            plan.replan(dev_seqlens, stream)
            kbmla.decode(plan, kv, q, table, dev_seqlens, out, lse, ws, stream)
    for step in range(0, 20, 7):
        dev_seqlens.copy_(torch.tensor([L + step for L in lengths], dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        check(out, lse, *reference(q, cache, table, dev_seqlens))
    assert kbmla.read_device_errors(ws)[0] == 0


def test_torch_compile_through_the_custom_op():
    q, cache, table, seqlens = make_problem(SEQLENS)
    plan = kbmla.Plan.create(CFG, SEQLENS)
    kv = kbmla.KvCache(cache)
    out, lse, ws = buffers(q, plan)
    ph, ch = kops.handle(plan), kops.handle(kv)

    @torch.compile(fullgraph=True)
    def step(q, out, lse):
        torch.ops.kbmla.decode(q, table, seqlens, out, lse, ws, ph, ch)
        return out.float().sum()

    total = step(q, out, lse)
    ref_out, ref_lse = reference(q, cache, table, seqlens)
    check(out, lse, ref_out, ref_lse)
    assert torch.isfinite(total)
    kops.release(plan)
    kops.release(kv)

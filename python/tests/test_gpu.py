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


def make_problem(seqlens, seed=0, page=PAGE):
    g = torch.Generator(device="cuda").manual_seed(seed)
    batch = len(seqlens)
    pages = [(L + page - 1) // page for L in seqlens]
    max_pages = max(max(pages), 1)
    num_pages = sum(pages) + 3
    perm = torch.randperm(num_pages, device="cuda", generator=g).to(torch.int32)
    table = torch.zeros(batch, max_pages, dtype=torch.int32, device="cuda")
    at = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[at:at + n]
        at += n
    cache = (torch.rand(num_pages, page, 576, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    q = (torch.rand(batch, Q_LEN, HEADS, 576, device="cuda", generator=g) * 2 - 1).to(torch.bfloat16)
    return q, cache, table, torch.tensor(seqlens, dtype=torch.int32, device="cuda")


def reference(q, cache, table, seqlens):
    out = torch.zeros(q.shape[0], Q_LEN, HEADS, 512, dtype=torch.float64, device="cuda")
    lse = torch.full((q.shape[0], Q_LEN, HEADS), -math.inf, dtype=torch.float64, device="cuda")
    for b, L in enumerate(seqlens.tolist()):
        if L == 0:
            continue
        n = (L + cache.shape[1] - 1) // cache.shape[1]
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


def expect_custom_op_bits(plan, kv, q, table, seqlens, out, lse, **kw):
    """torch.ops.kbmla.decode on fresh buffers gives out and lse bit for bit."""
    out2, lse2, ws2 = buffers(out, plan)
    ph, ch = kops.handle(plan), kops.handle(kv)
    torch.ops.kbmla.decode(q, table, seqlens, out2, lse2, ws2, ph, ch, **kw)
    torch.cuda.synchronize()
    kops.release(plan)
    kops.release(kv)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


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


@pytest.mark.parametrize("page", [1, 16, 256])
def test_other_page_sizes_match_reference(page):
    q, cache, table, seqlens = make_problem(SEQLENS, seed=page, page=page)
    cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, page_size=page)
    plan = kbmla.Plan.create(cfg, SEQLENS)
    kv = kbmla.KvCache(cache)  # the page size comes from the cache's shape
    out, lse, ws = buffers(q, plan)
    kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, torch.cuda.current_stream().cuda_stream)
    assert kbmla.read_device_errors(ws)[0] == 0
    check(out, lse, *reference(q, cache, table, seqlens))


def expect_close_to_reference(out, lse, q, cache, table, seqlens):
    """fp8 caches (Q and P in e4m3): issue 5's bars against the float64 reference on the
    dequantised cache: relative error < 5e-2, LSE within 5e-2, -inf exactly where it is."""
    ref_out, ref_lse = reference(q, cache, table, seqlens)
    err = (out.double() - ref_out).norm() / ref_out.norm()
    assert err < 5e-2
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.double()), finite)
    assert (lse.double()[finite] - ref_lse[finite]).abs().max() < 5e-2


def test_fp8_cache_matches_the_dequantised_reference():
    q, cache, table, seqlens = make_problem(SEQLENS, seed=8)
    scale = 1.0 / 256
    cache8 = (cache.float() / scale).to(torch.float8_e4m3fn)
    dequant = (cache8.float() * scale).to(torch.bfloat16)  # exact in bf16
    cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, kv_dtype="fp8_e4m3")
    plan = kbmla.Plan.create(cfg, SEQLENS)
    kv = kbmla.KvCache(cache8.view(torch.uint8))
    assert kv.kv_dtype == "fp8_e4m3"
    path = kbmla.describe_decode(plan, kv)
    assert path["fp8_products"] and path["p"].startswith("e4m3"), path
    bf16_path = kbmla.describe_decode(kbmla.Plan.create(CFG, SEQLENS), kbmla.KvCache(cache))
    assert not bf16_path["fp8_products"] and bf16_path["p"] == "bf16", bf16_path
    with pytest.raises(ValueError, match="q_dtype"):
        kbmla.describe_decode(kbmla.Plan.create(CFG, SEQLENS), kbmla.KvCache(cache), q_dtype="fp8_e4m3")
    out, lse, ws = buffers(q, plan)
    kv_scale = torch.tensor([scale], dtype=torch.float32, device="cuda")
    kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, torch.cuda.current_stream().cuda_stream,
                 kv_scale=kv_scale)
    assert kbmla.read_device_errors(ws)[0] == 0
    expect_close_to_reference(out, lse, q, dequant, table, seqlens)
    with pytest.raises(Exception, match="kv_scale"):
        kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, torch.cuda.current_stream().cuda_stream)
    # The torch custom op passes the scale through: the same bits.
    expect_custom_op_bits(plan, kv, q, table, seqlens, out, lse, kv_scale=kv_scale)


def e4m3_with_pow2_scale(x):
    """x as e4m3 with one power-of-two scale (amax / 448 rounded up), and that scale."""
    x = x.float()
    scale = 2.0 ** math.ceil(math.log2(x.abs().max().item() / 448))
    return (x / scale).to(torch.float8_e4m3fn), scale


def test_fp8_cache_with_an_e4m3_q():
    q, cache, table, seqlens = make_problem(SEQLENS, seed=9)
    scale = 1.0 / 256
    cache8 = (cache.float() / scale).to(torch.float8_e4m3fn)
    dequant = (cache8.float() * scale).to(torch.bfloat16)
    # Q in e4m3 with one power-of-two scale: e4m3 x scale is exact in bf16 for the reference.
    q8, q_scale = e4m3_with_pow2_scale(q)
    q_deq = (q8.float() * q_scale).to(torch.bfloat16)
    cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, kv_dtype="fp8_e4m3")
    plan = kbmla.Plan.create(cfg, SEQLENS)
    kv = kbmla.KvCache(cache8.view(torch.uint8))
    out, lse, ws = buffers(q, plan)
    kv_scale = torch.tensor([scale], dtype=torch.float32, device="cuda")
    q_scale_t = torch.tensor([q_scale], dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    kbmla.decode(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, ws, stream, kv_scale=kv_scale,
                 q_scale=q_scale_t)
    assert kbmla.read_device_errors(ws)[0] == 0
    expect_close_to_reference(out, lse, q_deq, dequant, table, seqlens)
    with pytest.raises(Exception, match="needs q_scale"):
        kbmla.decode(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, ws, stream, kv_scale=kv_scale)
    with pytest.raises(Exception, match="q_scale is given but q is bfloat16"):
        kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, stream, kv_scale=kv_scale, q_scale=q_scale_t)
    # Through the custom op: the same bits.
    expect_custom_op_bits(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, kv_scale=kv_scale,
                          q_scale=q_scale_t)


def encode_fp8_block(cache):
    """[pages, page_size, 576] bf16 -> [pages, page_size, 656] uint8 tokens of the per-block
    format (512 e4m3 with a power-of-two scale per 128 values, the 4 fp32 scales, 64 bf16
    rope) and the dequantised cache (exact in bf16)."""
    latent = cache[..., :512].float().unflatten(-1, (4, 128))
    amax = latent.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    scales = torch.exp2(torch.ceil(torch.log2(amax / 448)))
    e4m3 = (latent / scales).to(torch.float8_e4m3fn)
    dequant = torch.cat([(e4m3.float() * scales).flatten(-2), cache[..., 512:].float()], -1).to(torch.bfloat16)
    tokens = torch.cat([e4m3.flatten(-2).view(torch.uint8), scales.squeeze(-1).contiguous().view(torch.uint8),
                        cache[..., 512:].contiguous().view(torch.uint8)], -1)
    return tokens.contiguous(), dequant


def test_fp8_block_cache_matches_the_dequantised_reference():
    q, cache, table, seqlens = make_problem(SEQLENS, seed=10)
    tokens, dequant = encode_fp8_block(cache)
    assert tokens.shape[-1] == 656
    cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, kv_dtype="fp8_e4m3_block")
    plan = kbmla.Plan.create(cfg, SEQLENS)
    kv = kbmla.KvCache(tokens)
    assert kv.kv_dtype == "fp8_e4m3_block"
    out, lse, ws = buffers(q, plan)
    stream = torch.cuda.current_stream().cuda_stream
    kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, stream)
    assert kbmla.read_device_errors(ws)[0] == 0
    expect_close_to_reference(out, lse, q, dequant, table, seqlens)
    kv_scale = torch.tensor([1.0], dtype=torch.float32, device="cuda")
    with pytest.raises(Exception, match="its scales are in the cache"):
        kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, stream, kv_scale=kv_scale)
    # Through the custom op: the same bits.
    expect_custom_op_bits(plan, kv, q, table, seqlens, out, lse)


def test_fp8_block_cache_with_an_e4m3_q_latent_and_a_bf16_q_pe():
    q, cache, table, seqlens = make_problem(SEQLENS, seed=11)
    tokens, dequant = encode_fp8_block(cache)
    q8, q_scale = e4m3_with_pow2_scale(q[..., :512])
    q_pe = q[..., 512:]
    q_deq = torch.cat([q8.float() * q_scale, q_pe.float()], -1).to(torch.bfloat16)  # exact in bf16
    cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, kv_dtype="fp8_e4m3_block")
    plan = kbmla.Plan.create(cfg, SEQLENS)
    kv = kbmla.KvCache(tokens)
    q_scale_t = torch.tensor([q_scale], dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    out, lse, ws = buffers(q, plan)
    kbmla.decode(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, ws, stream, q_pe=q_pe,
                 q_scale=q_scale_t)
    assert kbmla.read_device_errors(ws)[0] == 0
    expect_close_to_reference(out, lse, q_deq, dequant, table, seqlens)
    with pytest.raises(Exception, match="q_pe"):
        kbmla.decode(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, ws, stream, q_scale=q_scale_t)
    # Through the custom op: the same bits.
    expect_custom_op_bits(plan, kv, q8.view(torch.uint8), table, seqlens, out, lse, q_scale=q_scale_t, q_pe=q_pe)


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


def test_engine_layouts_match_the_dense_call():
    """q as q_nope + q_pe views, out inside wider rows, lse as vLLM's [heads, tokens] in base 2."""
    q, cache, table, seqlens = make_problem(SEQLENS)
    plan = kbmla.Plan.create(CFG, SEQLENS)
    kv = kbmla.KvCache(cache)
    stream = torch.cuda.current_stream().cuda_stream
    out, lse, ws = buffers(q, plan)
    kbmla.decode(plan, kv, q, table, seqlens, out, lse, ws, stream)
    B, tokens = q.shape[0], q.shape[0] * Q_LEN
    wide = torch.full((B, Q_LEN, HEADS, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse_ht = torch.full((HEADS, tokens), float("nan"), dtype=torch.float32, device="cuda")
    lse_view = lse_ht.t().view(B, Q_LEN, HEADS)
    kbmla.decode(plan, kv, q[..., :512], table, seqlens, wide[..., :512], lse_view, ws, stream,
                 q_pe=q[..., 512:], lse_base="2")
    torch.cuda.synchronize()
    assert kbmla.read_device_errors(ws)[0] == 0
    assert torch.equal(wide[..., :512], out)
    assert torch.isnan(wide[..., 512:]).all()
    finite = torch.isfinite(lse)
    assert torch.equal(torch.isfinite(lse_view), finite)
    assert torch.allclose(lse_view[finite], lse[finite] / math.log(2), rtol=1e-5, atol=1e-5)
    # The custom op under torch.compile takes the same views: the same bits.
    wide2 = torch.full_like(wide, float("nan"))
    lse_ht2 = torch.full_like(lse_ht, float("nan"))
    lse_view2 = lse_ht2.t().view(B, Q_LEN, HEADS)
    ph, ch = kops.handle(plan), kops.handle(kv)

    @torch.compile(fullgraph=True)
    def step(q_nope, q_pe, out, lse):
        torch.ops.kbmla.decode(q_nope, table, seqlens, out, lse, ws, ph, ch, q_pe=q_pe, lse_base="2")

    step(q[..., :512], q[..., 512:], wide2[..., :512], lse_view2)
    torch.cuda.synchronize()
    kops.release(plan)
    kops.release(kv)
    assert torch.equal(wide2[..., :512], wide[..., :512]) and torch.isnan(wide2[..., 512:]).all()
    assert torch.equal(lse_ht2, lse_ht)


def test_context_parallel_halves_merge_to_the_reference():
    """Two contiguous shards of each request decoded as DCP ranks on one GPU, then merged."""
    q, cache, table, seqlens = make_problem(SEQLENS)
    lens = seqlens.tolist()
    B = len(lens)
    part_bytes = kbmla.dcp_partial_bytes(B, Q_LEN, HEADS)
    out_off, lse_off, _ = kbmla.dcp_partial_views(B, Q_LEN, HEADS)
    gathered = torch.empty(2 * part_bytes, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    rows = B * Q_LEN * HEADS
    kv_all = [cache[table[b, :(L + PAGE - 1) // PAGE].long()].reshape(-1, 576)[:L] for b, L in enumerate(lens)]
    for rank in range(2):
        firsts = [L * rank // 2 for L in lens]
        local = [L * (rank + 1) // 2 - f for L, f in zip(lens, firsts)]
        pages = [(n + PAGE - 1) // PAGE for n in local]
        shard = torch.zeros(max(sum(pages), 1), PAGE, 576, dtype=torch.bfloat16, device="cuda")
        shard_table = torch.zeros(B, max(max(pages), 1), dtype=torch.int32, device="cuda")
        at = 0
        for b in range(B):
            flat = shard.view(-1, 576)
            flat[at * PAGE:at * PAGE + local[b]] = kv_all[b][firsts[b]:firsts[b] + local[b]]
            shard_table[b, :pages[b]] = torch.arange(at, at + pages[b], dtype=torch.int32)
            at += pages[b]
        cfg = kbmla.DecodeConfig(heads=HEADS, q_len=Q_LEN, softmax_scale=SCALE, dcp_world=2, dcp_rank=rank)
        plan = kbmla.Plan.create(cfg, local)
        ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
        kbmla.init_workspace(ws, stream)
        part = gathered[rank * part_bytes:(rank + 1) * part_bytes]
        out_p = part[out_off:out_off + rows * 1024].view(torch.bfloat16).view(B, Q_LEN, HEADS, 512)
        lse_p = part[lse_off:lse_off + rows * 4].view(torch.float32).view(B, Q_LEN, HEADS)
        kbmla.decode(plan, kbmla.KvCache(shard), q, shard_table, torch.tensor(local, dtype=torch.int32, device="cuda"),
                     out_p, lse_p, ws, stream, dcp_global_seqlens=seqlens,
                     dcp_kv_offsets=torch.tensor(firsts, dtype=torch.int32, device="cuda"))
        assert kbmla.read_device_errors(ws)[0] == 0
    out = torch.empty(B, Q_LEN, HEADS, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(B, Q_LEN, HEADS, dtype=torch.float32, device="cuda")
    kbmla.dcp_merge(gathered, 2, out, lse, stream)
    torch.cuda.synchronize()
    check(out, lse, *reference(q, cache, table, seqlens))

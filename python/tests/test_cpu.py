"""CPU-side tests of the Python binding: configuration errors, the host planner through
Python, and the tensor checks of decode() (shapes, dtypes, layout, device) with host
arrays. GPU tests of the binding need a CUDA array library and run on the GPU machine."""
import numpy as np
import pytest

import kbmla


def cfg(**kw):
    args = dict(heads=16, q_len=4, softmax_scale=576 ** -0.5)
    args.update(kw)
    return kbmla.DecodeConfig(**args)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("heads", 129, "heads (129) must be in 1..128"),
        ("q_len", 17, "q_len (17) must be in 1..16"),
        ("d_qk", 448, "d_qk (448) is not supported; supported: 576, 512"),
        ("page_size", 48, "page_size (48) is not supported; supported: powers of two 1..256"),
        ("softmax_scale", 0.0, "softmax_scale (0) must be positive and finite"),
    ],
)
def test_config_errors_name_the_value(field, value, message):
    c = cfg(**{field: value})
    with pytest.raises(ValueError, match=r".*" + message.replace("(", r"\(").replace(")", r"\)")):
        c.validate()


def test_kv_dtype_is_checked_by_name():
    assert cfg(kv_dtype="fp8_e4m3").kv_dtype == "fp8_e4m3"
    assert cfg().kv_dtype == "bf16"
    assert cfg(kv_dtype="fp8_e4m3_block").kv_dtype == "fp8_e4m3_block"
    with pytest.raises(ValueError, match="kv_dtype 'fp8' is not one of: bf16, fp8_e4m3"):
        cfg(kv_dtype="fp8")


def covered(plan, b):
    off, ns = plan["bounds_offset"][b], plan["num_splits"][b]
    return plan["bounds"][off : off + ns + 1].tolist() if ns else []


def test_host_plan_covers_every_block_and_balances():
    seqlens = [131072] + [1024] * 127
    plan = kbmla.host_plan(cfg(q_len=1), seqlens, num_ctas=132)
    for b, L in enumerate(seqlens):
        bounds = covered(plan, b)
        assert bounds[0] == 0 and bounds[-1] == (L + 63) // 64
        assert all(x < y for x, y in zip(bounds, bounds[1:]))
    assert plan["num_splits"][0] > 32  # the long request is spread
    # Balanced over the CTAs the plan uses (it may leave a few idle when an item costs more
    # than the blocks it would take over).
    cost = plan["slot_cost_ns"]
    used = cost[cost > 0]
    assert len(used) >= 120
    assert used.max() <= 1.05 * used.mean()


def test_host_plan_zero_fills_requests_without_keys():
    plan = kbmla.host_plan(cfg(), [0, 100], num_ctas=8)
    assert plan["num_splits"][0] == 0
    assert len(plan["zero_fill"]) == 1


def test_batch_invariant_splits_depend_on_the_request_only():
    x = 70000
    a = kbmla.host_plan(cfg(), [x], batch_invariant_split_blocks=32)
    b = kbmla.host_plan(cfg(), [5, 300, x, 0, 90000], num_ctas=40, batch_invariant_split_blocks=32)
    assert covered(a, 0) == covered(b, 2)
    assert covered(a, 0) == list(range(0, 1094, 32)) + [1094]


def test_host_plan_rejects_bad_input():
    with pytest.raises(ValueError, match=r"seqlens\[1\] = -4 must be >= 0"):
        kbmla.host_plan(cfg(), [10, -4])
    with pytest.raises(ValueError, match="seqlens is empty"):
        kbmla.host_plan(cfg(), [])


def args(batch=3, **override):
    c = cfg()
    a = dict(
        q=np.zeros((batch, c.q_len, c.heads, 576), np.uint16),
        block_table=np.zeros((batch, 2), np.int32),
        seqlens=np.zeros(batch, np.int32),
        out=np.zeros((batch, c.q_len, c.heads, 512), np.uint16),
        lse=np.zeros((batch, c.q_len, c.heads), np.float32),
        workspace=np.zeros(4096, np.uint8),
    )
    a.update(override)
    return c, a


def check(c, batch, a, workspace_bytes=256):
    kbmla.check_decode_args(c, batch, a["q"], a["block_table"], a["seqlens"], a["out"], a["lse"], a["workspace"],
                            workspace_bytes)


def test_decode_args_wrong_shape_is_named():
    c, a = args(q=np.zeros((3, 4, 16, 512), np.uint16))
    with pytest.raises(ValueError, match=r"q has shape \(3, 4, 16, 512\), expected \(3, 4, 16, 576\)"):
        check(c, 3, a)


def test_decode_args_wrong_dtype_is_named():
    c, a = args()
    with pytest.raises(ValueError, match="q has dtype uint16, expected bfloat16"):
        check(c, 3, a)


def test_decode_args_e4m3_q_needs_an_fp8_cache_and_its_shape():
    c, a = args(q=np.zeros((3, 4, 16, 576), np.uint8))
    with pytest.raises(ValueError, match=r"q is uint8 \(e4m3 bytes\), which needs an fp8 cache"):
        check(c, 3, a)
    c.kv_dtype = "fp8_e4m3"
    # One tensor of d_qk bytes per row: dtype and shape pass, only the host memory is refused.
    with pytest.raises(ValueError, match="q must be a CUDA tensor"):
        check(c, 3, a)
    a["q"] = np.zeros((3, 4, 16, 512), np.uint8)
    with pytest.raises(ValueError, match=r"q has shape \(3, 4, 16, 512\), expected \(3, 4, 16, 576\)"):
        check(c, 3, a)


def test_decode_args_e4m3_q_of_the_per_block_cache_is_its_latent_part_and_a_bf16_q_pe():
    c, a = args(q=np.zeros((3, 4, 16, 576), np.uint8))
    c.kv_dtype = "fp8_e4m3_block"
    with pytest.raises(ValueError, match=r"for the per-block cache: its latent part \(512 columns\), with the rope "
                                         r"part in q_pe \(bfloat16, 64 columns\), which is missing"):
        check(c, 3, a)
    pe = np.zeros((3, 4, 16, 64), np.uint16)
    with pytest.raises(ValueError, match=r"q has shape \(3, 4, 16, 576\), expected \(3, 4, 16, 512\)"):
        kbmla.check_decode_args(c, 3, a["q"], a["block_table"], a["seqlens"], a["out"], a["lse"], a["workspace"], 256,
                                q_pe=pe)


def test_decode_args_non_contiguous_q_is_rejected():
    c, a = args(q=np.zeros((3, 4, 16, 1152), np.uint16)[..., ::2])
    with pytest.raises(ValueError, match=r"q's last dimension must be dense; stride 2 of dimension 3 should be 1"):
        check(c, 3, a)


def test_host_arrays_are_rejected_as_not_cuda():
    with pytest.raises(ValueError, match="workspace must be a CUDA tensor"):
        kbmla.init_workspace(np.zeros(1024, np.uint8))

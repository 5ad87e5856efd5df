"""kbmla: KV-balanced MLA decode attention for NVIDIA Hopper (sm_90a).

Tensors are passed through DLPack (torch, CuPy, JAX, ...), used in place. A decode step:

    cfg = kbmla.DecodeConfig(heads=16, q_len=4, softmax_scale=576 ** -0.5)
    plan = kbmla.Plan.create(cfg, seqlens_list)            # once per step
    cache = kbmla.KvCache(kv)                              # once per cache: [pages, 64, 576] bf16
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    kbmla.init_workspace(ws)                               # once per workspace
    kbmla.decode(plan, cache, q, block_table, seqlens, out, lse, ws, stream)  # every layer

Errors in arguments raise ValueError naming the value and what is allowed. With torch,
`import kbmla.torch_ops` registers torch.ops.kbmla.decode for torch.compile.
"""
from ._kbmla import (  # noqa: F401
    DecodeConfig,
    KvCache,
    Plan,
    check_decode_args,
    dcp_merge,
    dcp_partial_bytes,
    dcp_partial_views,
    decode,
    describe_decode,
    host_plan,
    init_workspace,
    read_device_errors,
)

__all__ = [
    "DecodeConfig",
    "KvCache",
    "Plan",
    "check_decode_args",
    "dcp_merge",
    "dcp_partial_bytes",
    "dcp_partial_views",
    "decode",
    "describe_decode",
    "host_plan",
    "init_workspace",
    "read_device_errors",
]

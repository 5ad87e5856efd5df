"""torch.library custom ops over kbmla.decode, so torch.compile traces it as one opaque,
mutating op (with a fake implementation for shape propagation) and CUDA-graph capture
records its launches on the current stream.

    import kbmla, kbmla.torch_ops as kops
    plan_h, cache_h = kops.handle(plan), kops.handle(cache)
    torch.ops.kbmla.decode(q, block_table, seqlens, out, lse, workspace, plan_h, cache_h)
    torch.ops.kbmla.decode(q_nope, ..., cache_h, q_pe=q_pe, lse_base="2")  # split Q, base-2 LSE

Plans and caches are C++ objects: they enter the op as integer handles from handle(),
which keeps them alive until release(). The GPU tests (python/tests/test_gpu.py) cover
eager, graph capture and torch.compile.
"""
from typing import Optional

import torch

from . import _kbmla

_objects = {}


def handle(obj) -> int:
    """An integer handle for a kbmla.Plan or kbmla.KvCache, usable inside custom ops."""
    key = id(obj)
    _objects[key] = obj
    return key


def release(obj) -> None:
    _objects.pop(id(obj), None)


@torch.library.custom_op("kbmla::decode", mutates_args=("out", "lse", "workspace"), device_types="cuda")
def decode(q: torch.Tensor, block_table: torch.Tensor, seqlens: torch.Tensor, out: torch.Tensor,
           lse: torch.Tensor, workspace: torch.Tensor, plan: int, cache: int,
           kv_scale: Optional[torch.Tensor] = None, q_scale: Optional[torch.Tensor] = None,
           q_pe: Optional[torch.Tensor] = None, lse_base: str = "e") -> None:
    """kv_scale: the fp32 [1] scale of an fp8 cache (None for bf16). q_scale: with an fp8
    cache, q may be uint8 e4m3 bytes; q_scale is then its fp32 [1] scale. q_pe: the rope
    part (bf16, 64 columns) when q holds only the latent part's 512 columns (an engine's
    q_nope / q_pe views; the per-block cache's e4m3 Q). lse_base: "e" or "2"."""
    stream = torch.cuda.current_stream(q.device).cuda_stream
    _kbmla.decode(_objects[plan], _objects[cache], q, block_table, seqlens, out, lse, workspace, stream,
                  kv_scale=kv_scale, q_scale=q_scale, q_pe=q_pe, lse_base=lse_base)


@decode.register_fake
def _decode_fake(q, block_table, seqlens, out, lse, workspace, plan, cache, kv_scale=None, q_scale=None,
                 q_pe=None, lse_base="e"):
    return None

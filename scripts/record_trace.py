#!/usr/bin/env python3
"""Record a real workload's allocation trace on the CPU, for ``accelrt replay``.

PyTorch is a *tool* here, never a dependency of accelrt: run this script with a Python that
has ``torch`` installed (any build; no GPU needed), then replay the file it writes with
accelrt under any allocator setting::

    python scripts/record_trace.py llama_varlen_train -o trace_llama_varlen_train.json.gz
    python scripts/record_trace.py mypkg.train:one_step --steps 5 -o mine.json.gz
    python scripts/record_trace.py path/to/train.py:one_step -o mine.json.gz
    accelrt replay mine.json.gz --conf expandable_segments:True

How it works: ``torch.profiler.profile(profile_memory=True)`` on the CPU sees every
allocation and free of the CPU allocator with its address, byte count and the operator that
made it. Tensor sizes do not depend on the device, so the sequence of requests is the one a
GPU run of the same model makes, except for what a GPU allocator never sees; those are
filtered out by the operator that made them, and every filter is counted in the trace's
``info["filtered"]`` with its reason:

* ``scalar_wrap``: 8-byte allocations made by an elementwise operator: a Python number wrapped
  as a 0-dim float64/int64 tensor, which lives on the host on a GPU run too.
* ``cpu_scalar_state``: allocations of at most 8 bytes inside ``Optimizer.step``: step
  counters and their bias-correction arithmetic, which PyTorch keeps on the host unless the
  optimizer is ``capturable``/``fused``.
* ``onednn_temporary``: allocations made inside a oneDNN (``mkldnn``) operator and freed
  before it returns: reorder and scratch buffers of the CPU kernel (a GPU kernel has its own,
  different, workspace). The CPU convolution backward calls oneDNN without a dispatched
  ``mkldnn`` operator, so its buffers are the blocks ``aten::convolution_backward`` makes
  (itself or through ``aten::empty``) and frees before it returns; its gradients outlive it.
* ``cpu_batch_norm_temporary``: blocks ``aten::native_batch_norm_backward`` makes and frees
  before it returns: the CPU kernel allocates grad_input twice, a CUDA kernel once.
* ``cpu_dtype_copy``: ``aten::_to_copy``/``aten::to`` results made inside another operator
  (not by the model's own ``.to()``/``.float()`` calls), freed before that operator returns:
  dtype conversions the CPU kernel makes where the CUDA kernel converts in registers.
* ``zero_size``: 0-byte allocations (the CUDA caching allocator makes no block for them).
* frees of addresses allocated before recording began are dropped (``untracked_frees``).

Built-in workloads (models built in plain ``torch.nn`` from a config with random weights; no
downloads): ``unet_train``, ``llama_varlen_train``, ``dlrm_train``, ``speech_varlen_train``,
``det_fpn_varsize_train``, ``lora_varlen_finetune``, ``video_varlen_train``,
``pointcloud_varsize_train``, ``gnn_varsize_train``, ``seq2seq_varlen_train``, ``srgan_train``,
``vlm_caption_train``, ``moe_routing_train``, ``seg_varsize_train``, ``vocoder_varlen_train``
(``WORKLOADS`` holds each one's config and description).
A user workload is ``module:function`` or ``file.py:function``; the function takes the step
number (0, 1, ...) and runs one step; ``--warmup`` steps run before recording starts (so
lazily made state, such as optimizer moments, is either inside or outside the trace as you
choose).

Output: gzipped JSON ``{"info": {...}, "trace": [[action, addr, size, stream], ...]}`` with
actions ``alloc`` and ``free_requested`` on stream 0 (the format of the shared traces);
``info["peak_live_bytes"]`` is the largest sum of requested bytes alive at once.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib
import importlib.util
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

try:
    import torch
    from torch import nn
    from torch.nn import functional as F
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise SystemExit(f"record_trace.py needs PyTorch (any CPU or GPU build), a tool for this "
                     f"script only: run it with a Python that has torch installed, e.g. "
                     f"'python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch' "
                     f"({exc})") from None

# ---------------------------------------------------------------------- filters

_ELEMENTWISE = ("aten::mul", "aten::div", "aten::add", "aten::sub", "aten::rsub", "aten::pow",
                "aten::mul_", "aten::div_", "aten::add_", "aten::sub_", "aten::pow_",
                "aten::lerp_", "aten::addcmul_", "aten::addcdiv_", "aten::clamp",
                "aten::clamp_", "aten::where", "aten::masked_fill", "aten::masked_fill_",
                "aten::fill_", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::eq",
                "aten::ne", "aten::maximum", "aten::minimum", "aten::sqrt", "aten::reciprocal")

#: Operators whose CPU kernel makes temporaries that the CUDA kernel (cuDNN) does not, and the
#: rule they fall under: blocks made by the operator itself or through an allocation factory
#: it calls directly, freed before it returns. The CPU convolution backward calls oneDNN
#: through a dispatch stub (no ``mkldnn`` operator names it); the CPU batch-norm backward
#: allocates grad_input twice and frees the first.
_CPU_KERNEL_TEMPS = {"aten::convolution_backward": "onednn_temporary",
                     "aten::native_batch_norm_backward": "cpu_batch_norm_temporary"}
_FACTORIES = ("aten::empty", "aten::empty_like", "aten::empty_strided")

REASONS = {
    "scalar_wrap": "8-byte allocation by an elementwise operator: a Python number wrapped as a "
                   "0-dim float64/int64 tensor, which stays on the host on a GPU run",
    "cpu_scalar_state": "allocation of at most 8 bytes inside Optimizer.step: step counters "
                        "and their arithmetic, kept on the host unless capturable/fused",
    "onednn_temporary": "made inside a oneDNN (mkldnn) operator, or by the CPU convolution "
                        "backward (which calls oneDNN through a stub), and freed before it "
                        "returns: CPU reorder/scratch buffers; a GPU kernel's workspace differs",
    "cpu_dtype_copy": "aten::_to_copy inside another operator, freed before it returns: a "
                      "dtype conversion the CPU kernel makes and a CUDA kernel does in registers",
    "cpu_batch_norm_temporary": "made inside aten::native_batch_norm_backward and freed "
                                "before it returns: the CPU kernel allocates grad_input "
                                "twice; the CUDA kernels (cuDNN, native) allocate it once",
    "zero_size": "0-byte allocation: the CUDA caching allocator makes no block",
}


def _classify(size: int, stack: tuple[str, ...], freed_inside: int) -> str | None:
    """The filter an allocation falls under (None: keep). ``stack`` holds the names of the
    enclosing operators, outermost first; ``freed_inside`` is the depth (index in ``stack``)
    of the innermost of them still running when the allocation is freed, or -1 (freed after
    they all returned, or never)."""
    if size == 0:
        return "zero_size"
    inner = stack[-1] if stack else ""
    if size <= 8 and any(s.startswith("Optimizer.step") for s in stack):
        return "cpu_scalar_state"
    if size == 8 and inner in _ELEMENTWISE:
        return "scalar_wrap"
    for depth, name in enumerate(stack):
        if "mkldnn" in name or "onednn" in name:
            if freed_inside >= depth:       # freed before the oneDNN operator returned
                return "onednn_temporary"
            break
    owner = len(stack) - 1                  # the operator that made the block
    while owner >= 0 and stack[owner] in _FACTORIES:
        owner -= 1
    if owner >= 0 and stack[owner] in _CPU_KERNEL_TEMPS and freed_inside >= owner:
        return _CPU_KERNEL_TEMPS[stack[owner]]
    if inner in ("aten::_to_copy", "aten::to") and len(stack) >= 2:
        # a conversion the model asked for is made by aten::to/_to_copy directly; one inside
        # a compute operator, freed before that operator returns, is the kernel's own
        parent = len(stack) - 2
        while parent >= 0 and stack[parent] in ("aten::to", "aten::_to_copy"):
            parent -= 1
        if parent >= 0 and stack[parent].startswith("aten::") and freed_inside >= parent:
            return "cpu_dtype_copy"
    return None


# ---------------------------------------------------------------------- recording

def record(step: Callable[[int], Any], steps: int, warmup: int = 0) -> tuple[list[list[Any]],
                                                                             dict[str, Any]]:
    """Run ``step(i)`` for ``warmup`` then ``steps`` steps, profiling the latter; return the
    filtered trace and the filter counts."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    for i in range(warmup):
        step(i)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for i in range(warmup, warmup + steps):
            step(i)
    roots = prof.profiler.kineto_results.experimental_event_tree()

    allocs: list[tuple[int, int, int, tuple[str, ...], tuple[int, ...]]] = []

    def walk(e: Any, names: tuple[str, ...], ends: tuple[int, ...]) -> None:
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            if f.device.type == "cpu":
                allocs.append((e.start_time_ns, int(f.ptr), int(f.alloc_size), names, ends))
            return
        if e.tag == _EventType.TorchOp:
            names = names + (e.name,)
            ends = ends + (e.end_time_ns,)
        for c in e.children:
            walk(c, names, ends)

    for r in roots:
        walk(r, (), ())
    allocs.sort(key=lambda a: a[0])

    # pair each alloc with its free to know inside which operators it was freed
    live: dict[int, int] = {}
    free_time: dict[int, int] = {}
    for k, (t, ptr, size, _, _) in enumerate(allocs):
        if size > 0 or (size == 0 and ptr not in live):
            if size >= 0:
                live[ptr] = k
        else:
            j = live.pop(ptr, None)
            if j is not None:
                free_time[j] = t
    filtered: dict[str, list[int]] = {k: [0, 0] for k in REASONS}
    dropped: set[int] = set()
    trace: list[list[Any]] = []
    open_: dict[int, int] = {}       # ptr -> kept alloc index
    untracked = 0
    for k, (_t, ptr, size, names, ends) in enumerate(allocs):
        if size >= 0:
            ft = free_time.get(k)
            inside = -1            # innermost enclosing operator still running at the free
            if ft is not None:
                for depth, end in enumerate(ends):
                    if ft <= end:
                        inside = depth
            why = _classify(size, names, inside)
            if why is not None:
                filtered[why][0] += 1
                filtered[why][1] += size
                dropped.add(ptr)
                open_.pop(ptr, None)
                continue
            dropped.discard(ptr)
            open_[ptr] = k
            trace.append(["alloc", ptr, size, 0])
        else:
            if ptr in open_:
                del open_[ptr]
                trace.append(["free_requested", ptr, -size, 0])
            elif ptr in dropped:
                dropped.discard(ptr)
            else:
                untracked += 1
    info = {"filtered": {k: {"allocs": v[0], "bytes": v[1], "why": REASONS[k]}
                         for k, v in filtered.items() if v[0]},
            "untracked_frees": untracked}
    return trace, info


def peak_live(trace: list[list[Any]]) -> int:
    """The largest sum of requested bytes alive at once."""
    live: dict[int, int] = {}
    cur = peak = 0
    for action, addr, size, _ in trace:
        if action == "alloc":
            live[addr] = size
            cur += size
            peak = max(peak, cur)
        elif addr in live:
            cur -= live.pop(addr)
    return peak


# ---------------------------------------------------------------------- built-in workloads

class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class _Attn2d(nn.Module):
    def __init__(self, c: int, heads: int) -> None:
        super().__init__()
        self.n, self.heads = nn.GroupNorm(32, c), heads
        self.qkv, self.out = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.n(x)).reshape(b, 3, self.heads, c // self.heads, h * w) \
            .transpose(-1, -2).unbind(1)
        o = F.scaled_dot_product_attention(q, k, v)
        return x + self.out(o.transpose(-1, -2).reshape(b, c, h, w))


class UNet(nn.Module):
    """A diffusion U-Net (DDPM/Stable-Diffusion style: residual blocks with GroupNorm, SiLU
    and a timestep embedding; self-attention at the low resolutions)."""

    def __init__(self, cin: int = 4, ch: tuple[int, ...] = (128, 256, 512), blocks: int = 2,
                 attn_from: int = 1, heads: int = 8) -> None:
        super().__init__()
        temb = ch[0] * 4
        self.ch0 = ch[0]
        self.temb = nn.Sequential(nn.Linear(ch[0], temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(cin, ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        skips, c = [ch[0]], ch[0]
        for lvl, co in enumerate(ch):
            for _ in range(blocks):
                self.down.append(nn.ModuleList([_ResBlock(c, co, temb),
                                                 _Attn2d(co, heads) if lvl >= attn_from
                                                 else nn.Identity()]))
                c = co
                skips.append(c)
            if lvl < len(ch) - 1:
                self.down.append(nn.ModuleList([nn.Conv2d(c, c, 3, stride=2, padding=1)]))
                skips.append(c)
        self.mid = nn.ModuleList([_ResBlock(c, c, temb), _Attn2d(c, heads), _ResBlock(c, c, temb)])
        self.up = nn.ModuleList()
        for lvl, co in reversed(list(enumerate(ch))):
            for _ in range(blocks + 1):
                self.up.append(nn.ModuleList([_ResBlock(c + skips.pop(), co, temb),
                                               _Attn2d(co, heads) if lvl >= attn_from
                                               else nn.Identity()]))
                c = co
            if lvl > 0:
                self.up.append(nn.ModuleList([nn.Upsample(scale_factor=2.0),
                                               nn.Conv2d(c, c, 3, padding=1)]))
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, cin, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        half = self.ch0 // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half) / half)
        e = t[:, None].float() * freqs[None]
        temb = self.temb(torch.cat([e.sin(), e.cos()], 1))
        h = self.inp(x)
        hs = [h]
        for m in self.down:
            if len(m) == 1:
                h = m[0](h)
            else:
                h = m[1](m[0](h, temb))
            hs.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, temb)), temb)
        for m in self.up:
            if isinstance(m[0], nn.Upsample):
                h = m[1](m[0](h))
            else:
                h = m[1](m[0](torch.cat([h, hs.pop()], 1), temb))
        return self.out(h)


def unet_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = UNet(ch=tuple(cfg["channels"]), blocks=cfg["blocks"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    b, r = cfg["batch"], cfg["res"]

    def step(i: int) -> None:
        x0 = torch.randn(b, 4, r, r)
        t = torch.randint(0, 1000, (b,))
        noise = torch.randn_like(x0)
        abar = torch.cos(t.float() / 1000 * math.pi / 2)[:, None, None, None] ** 2
        xt = abar.sqrt() * x0 + (1 - abar).sqrt() * noise
        loss = F.mse_loss(model(xt, t), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _RMSNorm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, -1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class _DecoderLayer(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = _RMSNorm(d), _RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.kvp = nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.h, self.hd).transpose(1, 2)
        k, v = self.kvp(h).view(b, s, 2, self.kv, self.hd).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    """A Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, kv_heads: int,
                 ffn: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(_DecoderLayer(d, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = _RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.hd = d // heads

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.arange(s).float()[:, None] * inv[None]
        cos, sin = ang.cos(), ang.sin()
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))


def llama_varlen_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = Llama(cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["kv_heads"],
                  cfg["ffn"])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    rng = random.Random(1)

    def step(i: int) -> None:
        b = rng.randint(*cfg["batch"])
        s = rng.randint(*cfg["seq"])
        ids = torch.randint(0, cfg["vocab"], (b, s + 1))
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class DLRM(nn.Module):
    """DLRM: a bottom MLP over dense features, sum-pooled embedding bags over multi-hot
    sparse features, pairwise dot interactions, a top MLP."""

    def __init__(self, dense: int, rows: list[int], dim: int, bottom: list[int],
                 top: list[int]) -> None:
        super().__init__()
        self.embs = nn.ModuleList(nn.EmbeddingBag(r, dim, mode="sum") for r in rows)

        def mlp(sizes: list[int]) -> nn.Sequential:
            mods: list[nn.Module] = []
            for a, b in zip(sizes, sizes[1:]):
                mods += [nn.Linear(a, b), nn.ReLU()]
            return nn.Sequential(*mods[:-1])
        self.bottom = mlp([dense, *bottom, dim])
        f = len(rows) + 1
        self.top = mlp([dim + f * (f - 1) // 2, *top, 1])
        self.iu = torch.triu_indices(f, f, 1)

    def forward(self, dense: torch.Tensor, idx: list[tuple[torch.Tensor, torch.Tensor]]
                ) -> torch.Tensor:
        x = self.bottom(dense)
        feats = torch.stack([x] + [e(i, o) for e, (i, o) in zip(self.embs, idx)], 1)
        z = torch.bmm(feats, feats.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, z], 1)).squeeze(1)


def dlrm_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = DLRM(cfg["dense"], cfg["rows"], cfg["dim"], cfg["bottom"], cfg["top"])
    opt = torch.optim.Adagrad(model.parameters(), lr=0.01, foreach=True)
    gen = torch.Generator().manual_seed(2)
    b = cfg["batch"]

    def step(i: int) -> None:
        dense = torch.randn(b, cfg["dense"], generator=gen)
        idx = []
        for r in cfg["rows"]:
            lens = torch.randint(1, cfg["max_hot"] + 1, (b,), generator=gen)
            offsets = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)[:-1]])
            # power-law ids, as in click logs
            u = torch.rand(int(lens.sum()), generator=gen)
            ids = (u.pow(3) * r).long().clamp_(max=r - 1)
            idx.append((ids, offsets))
        y = (torch.rand(b, generator=gen) < 0.25).float()
        loss = F.binary_cross_entropy_with_logits(model(dense, idx), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _ConvModule(nn.Module):
    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.n = nn.LayerNorm(d)
        self.pw1, self.dw = nn.Conv1d(d, 2 * d, 1), nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn, self.pw2 = nn.BatchNorm1d(d), nn.Conv1d(d, d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.glu(self.pw1(self.n(x).transpose(1, 2)), 1)
        return x + self.pw2(F.silu(self.bn(self.dw(h)))).transpose(1, 2)


class _ConformerBlock(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, k: int) -> None:
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ffn), nn.SiLU(), nn.Linear(ffn, d))
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ffn), nn.SiLU(), nn.Linear(ffn, d))
        self.na = nn.LayerNorm(d)
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv = _ConvModule(d, k)
        self.nf = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        x = x + 0.5 * self.ff1(x)
        h = self.na(x)
        x = x + self.att(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        x = self.conv(x)
        return self.nf(x + 0.5 * self.ff2(x))


class Conformer(nn.Module):
    """A Conformer speech encoder: 4x convolutional subsampling of log-mel frames, then
    blocks of feed-forward, self-attention with a padding mask and a convolution module;
    a CTC head over characters."""

    def __init__(self, mels: int, d: int, layers: int, heads: int, ffn: int, k: int,
                 vocab: int) -> None:
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU())
        self.proj = nn.Linear(d * (((mels - 1) // 2 - 1) // 2), d)
        self.blocks = nn.ModuleList(_ConformerBlock(d, heads, ffn, k) for _ in range(layers))
        self.ctc = nn.Linear(d, vocab)

    def forward(self, feats: torch.Tensor, lens: torch.Tensor) -> tuple[torch.Tensor,
                                                                         torch.Tensor]:
        x = self.sub(feats[:, None])                     # (b, d, t', f')
        b, c, t, f = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        olens = ((lens - 1) // 2 - 1) // 2
        pad = torch.arange(t)[None] >= olens[:, None]
        for blk in self.blocks:
            x = blk(x, pad)
        return self.ctc(x).log_softmax(-1), olens


def speech_varlen_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = Conformer(cfg["mels"], cfg["d"], cfg["layers"], cfg["heads"], cfg["ffn"],
                      cfg["kernel"], cfg["vocab"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    rng = random.Random(3)

    def step(i: int) -> None:
        b = rng.randint(*cfg["batch"])
        lens = torch.tensor([rng.randint(*cfg["frames"]) for _ in range(b)])
        feats = torch.randn(b, int(lens.max()), cfg["mels"])
        logp, olens = model(feats, lens)
        tl = torch.clamp(olens // 4, min=1)
        targets = torch.randint(1, cfg["vocab"], (int(tl.sum()),))
        loss = F.ctc_loss(logp.transpose(0, 1), targets, olens, tl, zero_infinity=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _bn_conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(_bn_conv(cin, width, 1), _bn_conv(width, width, 3, stride),
                                  nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def _bottleneck_backbone(blocks: list[int], last_stride: int = 2
                         ) -> tuple[nn.Sequential, nn.ModuleList, int]:
    """A bottleneck ResNet's stem and stages (stage ``i`` of ``blocks[i]`` blocks of width
    ``64 << i``; the first block of every stage after the first has stride 2, of the last stage
    ``last_stride``) and the channels it puts out."""
    stem = nn.Sequential(_bn_conv(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
    stages = nn.ModuleList()
    c = 64
    for i, n in enumerate(blocks):
        w = 64 << i
        layers = []
        for j in range(n):
            first = last_stride if i == len(blocks) - 1 else 2
            layers.append(_Bottleneck(c, w, first if j == 0 and i > 0 else 1))
            c = 4 * w
        stages.append(nn.Sequential(*layers))
    return stem, stages, c


class RetinaNet(nn.Module):
    """A RetinaNet-style one-stage detector: a bottleneck ResNet backbone, a feature pyramid
    (P3-P7, top-down with lateral 1x1 convolutions), and class/box subnets of four 3x3
    convolutions shared over the levels, with A anchors per location."""

    def __init__(self, blocks: list[int], fpn: int, classes: int, anchors: int) -> None:
        super().__init__()
        self.stem, self.stages, _ = _bottleneck_backbone(blocks)
        outs = [256 << i for i in range(len(blocks))][1:]       # C3, C4, C5
        self.lateral = nn.ModuleList(nn.Conv2d(o, fpn, 1) for o in outs)
        self.smooth = nn.ModuleList(nn.Conv2d(fpn, fpn, 3, padding=1) for _ in outs)
        self.p6, self.p7 = nn.Conv2d(outs[-1], fpn, 3, 2, 1), nn.Conv2d(fpn, fpn, 3, 2, 1)

        def subnet(out: int) -> nn.Sequential:
            mods: list[nn.Module] = []
            for _ in range(4):
                mods += [nn.Conv2d(fpn, fpn, 3, padding=1), nn.GroupNorm(32, fpn), nn.ReLU()]
            return nn.Sequential(*mods, nn.Conv2d(fpn, out, 3, padding=1))
        self.cls, self.box = subnet(anchors * classes), subnet(anchors * 4)
        self.classes = classes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.stem(x)
        feats = []
        for s in self.stages:
            x = s(x)
            feats.append(x)
        c3, c4, c5 = feats[1:]
        p5 = self.lateral[2](c5)
        p4 = self.lateral[1](c4) + F.interpolate(p5, size=c4.shape[-2:], mode="nearest")
        p3 = self.lateral[0](c3) + F.interpolate(p4, size=c3.shape[-2:], mode="nearest")
        p6 = self.p6(c5)
        p7 = self.p7(F.relu(p6))
        levels = [self.smooth[0](p3), self.smooth[1](p4), self.smooth[2](p5), p6, p7]
        b = x.shape[0]
        cls = torch.cat([self.cls(p).permute(0, 2, 3, 1).reshape(b, -1, self.classes)
                         for p in levels], 1)
        box = torch.cat([self.box(p).permute(0, 2, 3, 1).reshape(b, -1, 4) for p in levels], 1)
        return cls, box


def det_fpn_varsize_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = RetinaNet(cfg["blocks"], cfg["fpn"], cfg["classes"], cfg["anchors"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                          foreach=True)
    rng = random.Random(4)
    gen = torch.Generator().manual_seed(4)

    def step(i: int) -> None:
        b = rng.randint(*cfg["batch"])
        # images of random aspect ratios resized to a random short side, padded to a multiple
        # of 128 (the stride of P7) as a detection data loader batches them
        sizes = []
        for _ in range(b):
            short, ratio = rng.choice(cfg["short_side"]), rng.uniform(0.6, 1.67)
            h, w = (short, min(int(short * ratio), cfg["max_side"])) if ratio >= 1 else \
                (min(int(short / ratio), cfg["max_side"]), short)
            sizes.append((h, w))
        hp = -(-max(s[0] for s in sizes) // 128) * 128
        wp = -(-max(s[1] for s in sizes) // 128) * 128
        images = torch.zeros(b, 3, hp, wp)
        for k, (h, w) in enumerate(sizes):
            images[k, :, :h, :w] = torch.randn(3, h, w, generator=gen)
        cls, box = model(images)
        # anchor assignment: ~1% of anchors positive with a class, ~10% ignored
        u = torch.rand(cls.shape[:2], generator=gen)
        pos, valid = u < 0.01, u >= 0.01 + 0.1
        valid = valid | pos
        target = torch.zeros_like(cls)
        labels = torch.randint(0, cls.shape[-1], (int(pos.sum()),), generator=gen)
        target[pos] = F.one_hot(labels, cls.shape[-1]).float()
        npos = max(int(pos.sum()), 1)
        loss_cls = _sigmoid_focal_loss(cls[valid], target[valid]) / npos
        box_t = torch.randn(int(pos.sum()), 4, generator=gen)
        loss_box = F.smooth_l1_loss(box[pos], box_t, beta=0.11, reduction="sum") / npos
        (loss_cls + loss_box).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _sigmoid_focal_loss(x: torch.Tensor, t: torch.Tensor, alpha: float = 0.25,
                                   gamma: float = 2.0) -> torch.Tensor:
    """The focal loss of RetinaNet (summed), as detection libraries compute it."""
    p = torch.sigmoid(x)
    ce = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    loss = ce * ((1 - p_t) ** gamma)
    return ((alpha * t + (1 - alpha) * (1 - t)) * loss).sum()


class _LoRALinear(nn.Module):
    """A frozen linear layer plus a trained low-rank update ``B(A(dropout(x))) * alpha / r``
    (LoRA; B starts at zero, as in PEFT)."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Linear(base.in_features, r, bias=False)
        self.b = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.b.weight)
        self.scale, self.drop = alpha / r, nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.b(self.a(self.drop(x))) * self.scale


def lora_varlen_finetune(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = Llama(cfg["vocab"], cfg["d"], cfg["layers"], cfg["heads"], cfg["kv_heads"],
                  cfg["ffn"]).requires_grad_(False)
    for layer in model.layers:
        for name in cfg["targets"]:
            setattr(layer, name, _LoRALinear(getattr(layer, name), cfg["rank"], cfg["alpha"],
                                             0.05))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, foreach=True)
    rng = random.Random(5)

    def step(i: int) -> None:
        b = rng.randint(*cfg["batch"])
        lens = [rng.randint(*cfg["seq"]) for _ in range(b)]
        s = max(lens)
        ids = torch.randint(0, cfg["vocab"], (b, s + 1))
        labels = ids[:, 1:].clone()
        for k, n in enumerate(lens):          # right padding, ignored by the loss
            labels[k, n:] = -100
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _Conv2Plus1d(nn.Sequential):
    """A (2+1)D convolution: a spatial 1xkxk convolution, BatchNorm and ReLU, then a temporal
    kx1x1 one (R(2+1)D, Tran et al. 2018); the middle width keeps the 3D parameter count."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        mid = (cin * cout * 27) // (cin * 9 + 3 * cout)
        super().__init__(nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1),
                                   bias=False),
                         nn.BatchNorm3d(mid), nn.ReLU(inplace=True),
                         nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False))


class _VideoBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Sequential(_Conv2Plus1d(cin, cout, stride), nn.BatchNorm3d(cout),
                                nn.ReLU(inplace=True))
        self.c2 = nn.Sequential(_Conv2Plus1d(cout, cout), nn.BatchNorm3d(cout))
        self.skip = (nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False),
                                   nn.BatchNorm3d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.c2(self.c1(x)) + self.skip(x))


class R2Plus1D(nn.Module):
    """An R(2+1)D-18 video classifier: a (2+1)D stem, four stages of two residual (2+1)D
    blocks (the last three downsample in time and space), global pooling, a linear head."""

    def __init__(self, widths: list[int], classes: int) -> None:
        super().__init__()
        w0 = widths[0]
        self.stem = nn.Sequential(nn.Conv3d(3, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False),
                                  nn.BatchNorm3d(45), nn.ReLU(inplace=True),
                                  nn.Conv3d(45, w0, (3, 1, 1), 1, (1, 0, 0), bias=False),
                                  nn.BatchNorm3d(w0), nn.ReLU(inplace=True))
        layers: list[nn.Module] = []
        c = w0
        for i, w in enumerate(widths):
            layers += [_VideoBlock(c, w, 1 if i == 0 else 2), _VideoBlock(w, w, 1)]
            c = w
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)).mean((2, 3, 4)))


def video_varlen_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = R2Plus1D(cfg["widths"], cfg["classes"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                          foreach=True)
    rng = random.Random(6)
    r = cfg["res"]

    def step(i: int) -> None:
        # clips of a random number of frames per batch (variable-length sampling)
        t = rng.choice(cfg["frames"])
        b = cfg["clips"] // t
        x = torch.randn(b, 3, t, r, r)
        y = torch.randint(0, cfg["classes"], (b,))
        F.cross_entropy(model(x), y, label_smoothing=0.1).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _knn(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (b, n, k) of each point's k nearest neighbours in feature space."""
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = (x ** 2).sum(1, keepdim=True)
    return (-xx - inner - xx.transpose(2, 1)).topk(k, -1)[1]


def _edge_features(x: torch.Tensor, k: int) -> torch.Tensor:
    """EdgeConv inputs (b, 2c, n, k): each neighbour's offset and the point itself."""
    b, c, n = x.shape
    idx = (_knn(x, k) + torch.arange(b)[:, None, None] * n).reshape(-1)
    xt = x.transpose(2, 1).contiguous()
    nb = xt.reshape(b * n, c)[idx].reshape(b, n, k, c)
    xt = xt[:, :, None].expand(-1, -1, k, -1)
    return torch.cat([nb - xt, xt], 3).permute(0, 3, 1, 2).contiguous()


class DGCNN(nn.Module):
    """DGCNN part segmentation (Wang et al. 2019): EdgeConv layers over a k-nearest-neighbour
    graph rebuilt in feature space at every layer, a global feature, per-point MLP head."""

    def __init__(self, k: int, widths: list[int], emb: int, parts: int) -> None:
        super().__init__()
        self.k = k
        self.edge = nn.ModuleList()
        c = 3
        for w in widths:
            self.edge.append(nn.Sequential(nn.Conv2d(2 * c, w, 1, bias=False), nn.BatchNorm2d(w),
                                           nn.LeakyReLU(0.2)))
            c = w
        self.glob = nn.Sequential(nn.Conv1d(sum(widths), emb, 1, bias=False),
                                  nn.BatchNorm1d(emb), nn.LeakyReLU(0.2))
        self.head = nn.Sequential(nn.Conv1d(emb + sum(widths), 256, 1, bias=False),
                                  nn.BatchNorm1d(256), nn.LeakyReLU(0.2), nn.Dropout(0.5),
                                  nn.Conv1d(256, 128, 1, bias=False), nn.BatchNorm1d(128),
                                  nn.LeakyReLU(0.2), nn.Conv1d(128, parts, 1))

    def forward(self, pts: torch.Tensor) -> torch.Tensor:
        x, feats = pts, []
        for e in self.edge:
            x = e(_edge_features(x, self.k)).max(-1)[0]
            feats.append(x)
        f = torch.cat(feats, 1)
        g = self.glob(f).max(-1, keepdim=True)[0].expand(-1, -1, f.shape[-1])
        return self.head(torch.cat([g, f], 1))


def pointcloud_varsize_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = DGCNN(cfg["k"], cfg["widths"], cfg["emb"], cfg["parts"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    rng = random.Random(7)

    def step(i: int) -> None:
        # scans of a random number of points per batch (sampled from the scanned surface)
        n = rng.randint(*cfg["points"])
        b = cfg["batch"]
        pts = torch.randn(b, 3, n)
        pts = pts / pts.norm(dim=1, keepdim=True)
        y = torch.randint(0, cfg["parts"], (b, n))
        F.cross_entropy(model(pts), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _GINELayer(nn.Module):
    """GINE message passing: h_i' = MLP((1 + eps) h_i + sum_j relu(h_j + W e_ij))."""

    def __init__(self, d: int, edge_dim: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.edge = nn.Linear(edge_dim, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.BatchNorm1d(2 * d), nn.ReLU(),
                                 nn.Linear(2 * d, d))
        self.norm = nn.BatchNorm1d(d)

    def forward(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                e: torch.Tensor) -> torch.Tensor:
        msg = F.relu(h[src] + self.edge(e))
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        return h + F.relu(self.norm(self.mlp((1 + self.eps) * h + agg)))


class GINE(nn.Module):
    """A graph-level GNN (GINE, Hu et al. 2020): atom and bond embeddings, residual message
    passing layers, mean pooling per graph with index_add_, an MLP head."""

    def __init__(self, node_types: int, edge_types: int, d: int, layers: int,
                 tasks: int) -> None:
        super().__init__()
        self.node, self.edge = nn.Embedding(node_types, d), nn.Embedding(edge_types, d)
        self.layers = nn.ModuleList(_GINELayer(d, d) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, tasks))

    def forward(self, x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, ea: torch.Tensor,
                graph: torch.Tensor, graphs: int) -> torch.Tensor:
        h, e = self.node(x), self.edge(ea)
        for layer in self.layers:
            h = layer(h, src, dst, e)
        pooled = h.new_zeros(graphs, h.shape[1]).index_add_(0, graph, h)
        count = torch.bincount(graph, minlength=graphs).clamp_(min=1)
        return self.head(pooled / count[:, None])


def gnn_varsize_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = GINE(cfg["node_types"], cfg["edge_types"], cfg["d"], cfg["layers"], cfg["tasks"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    gen = torch.Generator().manual_seed(8)
    rng = random.Random(8)

    def step(i: int) -> None:
        # a batch of graphs of random sizes, concatenated into one disjoint graph
        sizes = [rng.randint(*cfg["nodes"]) for _ in range(cfg["graphs"])]
        n = sum(sizes)
        graph = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        start = torch.tensor([0] + sizes[:-1]).cumsum(0)
        edges = [rng.randint(k, cfg["degree"] * k) for k in sizes]
        eg = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(edges))
        size_e = torch.tensor(sizes)[eg]
        src = start[eg] + (torch.rand(len(eg), generator=gen) * size_e).long()
        dst = start[eg] + (torch.rand(len(eg), generator=gen) * size_e).long()
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])      # undirected
        x = torch.randint(0, cfg["node_types"], (n,), generator=gen)
        ea = torch.randint(0, cfg["edge_types"], (len(src),), generator=gen)
        y = (torch.rand(len(sizes), cfg["tasks"], generator=gen) < 0.3).float()
        out = model(x, src, dst, ea, graph, len(sizes))
        F.binary_cross_entropy_with_logits(out, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def seq2seq_varlen_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    """A Transformer translation model (pre-norm encoder-decoder, shared embeddings tied to the
    output layer), batches built by a token budget as translation toolkits do."""
    torch.manual_seed(0)
    d, v = cfg["d"], cfg["vocab"]
    emb = nn.Embedding(v, d, padding_idx=0)
    tf = nn.Transformer(d, cfg["heads"], cfg["layers"], cfg["layers"], cfg["ffn"], 0.1,
                        batch_first=True, norm_first=True)
    pos = nn.Embedding(cfg["max_len"] + 1, d)
    params = [*emb.parameters(), *tf.parameters(), *pos.parameters()]
    opt = torch.optim.Adam(params, lr=5e-4, betas=(0.9, 0.98), foreach=True)
    rng = random.Random(9)

    def embed(ids: torch.Tensor) -> torch.Tensor:
        return emb(ids) * math.sqrt(d) + pos(torch.arange(ids.shape[1]))[None]

    def step(i: int) -> None:
        # sentences of similar length batched up to a token budget
        base = rng.randint(*cfg["src_len"])
        b = max(1, cfg["tokens"] // base)
        sl = [max(1, min(cfg["max_len"], base + rng.randint(-3, 3))) for _ in range(b)]
        tl = [max(2, min(cfg["max_len"], int(n * rng.uniform(0.8, 1.25)))) for n in sl]
        src = torch.zeros(b, max(sl), dtype=torch.long)
        tgt = torch.zeros(b, max(tl) + 1, dtype=torch.long)
        for k in range(b):
            src[k, :sl[k]] = torch.randint(1, v, (sl[k],))
            tgt[k, :tl[k] + 1] = torch.randint(1, v, (tl[k] + 1,))
        t_in, t_out = tgt[:, :-1], tgt[:, 1:]
        n = t_in.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        h = tf(embed(src), embed(t_in), tgt_mask=causal, src_key_padding_mask=src == 0,
               tgt_key_padding_mask=t_in == 0, memory_key_padding_mask=src == 0)
        logits = F.linear(h, emb.weight)
        loss = F.cross_entropy(logits.reshape(-1, v), t_out.reshape(-1), ignore_index=0,
                               label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _SRResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.PReLU(),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class SRGenerator(nn.Module):
    """SRResNet (Ledig et al. 2017): residual blocks at low resolution, two x2 PixelShuffle
    upsampling stages."""

    def __init__(self, c: int, blocks: int) -> None:
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, c, 9, padding=4), nn.PReLU())
        self.body = nn.Sequential(*(_SRResBlock(c) for _ in range(blocks)),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c))
        self.up = nn.Sequential(nn.Conv2d(c, 4 * c, 3, padding=1), nn.PixelShuffle(2), nn.PReLU(),
                                nn.Conv2d(c, 4 * c, 3, padding=1), nn.PixelShuffle(2), nn.PReLU(),
                                nn.Conv2d(c, 3, 9, padding=4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        return self.up(h + self.body(h))


def _sr_discriminator(widths: list[int], res: int) -> nn.Sequential:
    mods: list[nn.Module] = [nn.Conv2d(3, widths[0], 3, padding=1), nn.LeakyReLU(0.2)]
    c = widths[0]
    for k, w in enumerate(widths):
        for stride in ((2,) if k == 0 else (1, 2)):
            mods += [nn.Conv2d(c, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w),
                     nn.LeakyReLU(0.2)]
            c = w
    side = res >> len(widths)
    return nn.Sequential(*mods, nn.Flatten(), nn.Linear(c * side * side, 1024),
                         nn.LeakyReLU(0.2), nn.Linear(1024, 1))


def srgan_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    gen_net = SRGenerator(cfg["channels"], cfg["blocks"])
    disc = _sr_discriminator(cfg["disc_widths"], cfg["hr"])
    opt_g = torch.optim.Adam(gen_net.parameters(), lr=1e-4, betas=(0.9, 0.999), foreach=True)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.9, 0.999), foreach=True)
    b, hr = cfg["batch"], cfg["hr"]

    def step(i: int) -> None:
        real = torch.rand(b, 3, hr, hr) * 2 - 1
        lr = F.avg_pool2d(real, 4)                   # bicubic in the papers; the size matters
        fake = gen_net(lr)
        # discriminator step on real and detached fake patches
        d_real, d_fake = disc(real), disc(fake.detach())
        loss_d = (F.binary_cross_entropy_with_logits(d_real, torch.ones_like(d_real))
                  + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake)))
        loss_d.backward()
        opt_d.step()
        opt_d.zero_grad(set_to_none=True)
        # generator step: content loss plus adversarial loss through the discriminator
        d_gen = disc(fake)
        loss_g = F.mse_loss(fake, real) + 1e-3 * F.binary_cross_entropy_with_logits(
            d_gen, torch.ones_like(d_gen))
        loss_g.backward()
        opt_g.step()
        opt_g.zero_grad(set_to_none=True)
        disc.zero_grad(set_to_none=True)
    return step


class _CaptionLayer(nn.Module):
    """A decoder layer: causal self-attention, cross-attention to the image tokens, MLP."""

    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.cross = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))

    def forward(self, x: torch.Tensor, img: torch.Tensor, causal: torch.Tensor,
                pad: torch.Tensor) -> torch.Tensor:
        h = self.n1(x)
        x = x + self.self_attn(h, h, h, attn_mask=causal, key_padding_mask=pad,
                               need_weights=False)[0]
        h = self.n2(x)
        x = x + self.cross(h, img, img, need_weights=False)[0]
        return x + self.mlp(self.n3(x))


class CaptionVLM(nn.Module):
    """An image-captioning vision-language model (CoCa/BLIP-style captioner): a ViT image
    encoder over 16x16 patches, projected to a text decoder that cross-attends to the image
    tokens."""

    def __init__(self, img: int, patch: int, vd: int, vlayers: int, vheads: int, td: int,
                 tlayers: int, theads: int, vocab: int, max_len: int) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, vd, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, vd))
        self.vpos = nn.Parameter(torch.zeros(1, (img // patch) ** 2 + 1, vd))
        self.vit = nn.TransformerEncoder(nn.TransformerEncoderLayer(
            vd, vheads, 4 * vd, 0.0, F.gelu, batch_first=True, norm_first=True), vlayers,
            enable_nested_tensor=False)
        self.proj = nn.Sequential(nn.LayerNorm(vd), nn.Linear(vd, td))
        self.tok, self.tpos = nn.Embedding(vocab, td), nn.Embedding(max_len, td)
        self.dec = nn.ModuleList(_CaptionLayer(td, theads, 4 * td) for _ in range(tlayers))
        self.norm, self.head = nn.LayerNorm(td), nn.Linear(td, vocab)

    def forward(self, images: torch.Tensor, ids: torch.Tensor, pad: torch.Tensor
                ) -> torch.Tensor:
        p = self.patch(images).flatten(2).transpose(1, 2)
        v = torch.cat([self.cls.expand(p.shape[0], -1, -1), p], 1) + self.vpos
        img = self.proj(self.vit(v))
        s = ids.shape[1]
        x = self.tok(ids) + self.tpos(torch.arange(s))[None]
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        for layer in self.dec:
            x = layer(x, img, causal, pad)
        return self.head(self.norm(x))


def vlm_caption_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = CaptionVLM(cfg["img"], cfg["patch"], cfg["vd"], cfg["vlayers"], cfg["vheads"],
                       cfg["td"], cfg["tlayers"], cfg["theads"], cfg["vocab"], cfg["max_len"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, foreach=True)
    rng = random.Random(10)
    r = cfg["img"]

    def step(i: int) -> None:
        b = cfg["batch"]
        lens = [rng.randint(*cfg["caption"]) for _ in range(b)]
        s = max(lens)
        ids = torch.randint(1, cfg["vocab"], (b, s + 1))
        for k, n in enumerate(lens):
            ids[k, n + 1:] = 0
        pad = ids[:, :-1] == 0
        logits = model(torch.randn(b, 3, r, r), ids[:, :-1], pad)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                               ignore_index=0, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _MoEFFN(nn.Module):
    """A top-k routed mixture-of-experts feed-forward layer (Switch/Mixtral style): a router
    scores each token, every token goes to its ``top`` best experts (SwiGLU MLPs), each expert
    runs on the tokens routed to it (a batch of a different size every step), and the outputs
    are scattered back weighted by the renormalised router probabilities; plus the load-balancing
    auxiliary loss."""

    def __init__(self, d: int, ffn: int, experts: int, top: int) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.gate_up = nn.ModuleList(nn.Linear(d, 2 * ffn, bias=False) for _ in range(experts))
        self.down = nn.ModuleList(nn.Linear(ffn, d, bias=False) for _ in range(experts))
        self.top = top

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(x), -1)
        w, idx = probs.topk(self.top, -1)
        w = w / w.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(len(self.down)):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            g, u = self.gate_up[e](x[tok]).chunk(2, -1)
            y = self.down[e](F.silu(g) * u) * w[tok, slot, None]
            out = out.index_add(0, tok, y)
        n = len(self.down)
        frac = F.one_hot(idx[:, 0], n).float().mean(0)
        aux = n * (frac * probs.mean(0)).sum()
        return out.reshape(shape), aux


class _MoEBlock(nn.Module):
    def __init__(self, d: int, heads: int, ffn: int, experts: int, top: int) -> None:
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.moe = _MoEFFN(d, ffn, experts, top)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, d = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(b, s, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        y, aux = self.moe(self.n2(x))
        return x + y, aux


def moe_routing_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    d, vocab = cfg["d"], cfg["vocab"]
    emb = nn.Embedding(vocab, d)
    blocks = nn.ModuleList(_MoEBlock(d, cfg["heads"], cfg["ffn"], cfg["experts"], cfg["top"])
                           for _ in range(cfg["layers"]))
    norm, head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
    head.weight = emb.weight
    model = nn.ModuleList([emb, blocks, norm, head])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    rng = random.Random(11)

    def step(i: int) -> None:
        b = rng.randint(*cfg["batch"])
        s = rng.randint(*cfg["seq"])
        ids = torch.randint(0, vocab, (b, s + 1))
        x = emb(ids[:, :-1])
        aux = x.new_zeros(())
        for blk in blocks:
            x, a = blk(x)
            aux = aux + a
        logits = head(norm(x))
        loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        (loss + 0.01 * aux).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _ASPP(nn.Module):
    """DeepLabv3's atrous spatial pyramid pooling: 1x1 and dilated 3x3 branches and the pooled
    image feature, concatenated and projected."""

    def __init__(self, cin: int, c: int, rates: list[int]) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            [_bn_conv(cin, c, 1)] +
            [nn.Sequential(nn.Conv2d(cin, c, 3, padding=r, dilation=r, bias=False),
                           nn.BatchNorm2d(c), nn.ReLU(inplace=True)) for r in rates])
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, c, 1, bias=False),
                                  nn.ReLU())
        self.project = _bn_conv(c * (len(rates) + 2), c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(x).expand(-1, -1, *x.shape[-2:])
        return self.project(torch.cat([br(x) for br in self.branches] + [pooled], 1))


class DeepLabV3Plus(nn.Module):
    """DeepLabv3+ semantic segmentation: a bottleneck ResNet backbone at output stride 16 (the
    last stage keeps stride 1), ASPP, and a decoder that joins the stride-4 features and upsamples
    the class scores to the input size."""

    def __init__(self, blocks: list[int], aspp: int, rates: list[int], classes: int) -> None:
        super().__init__()
        self.stem, self.stages, c = _bottleneck_backbone(blocks, last_stride=1)
        self.aspp = _ASPP(c, aspp, rates)
        self.low = _bn_conv(256, 48, 1)
        self.decoder = nn.Sequential(_bn_conv(aspp + 48, aspp, 3), _bn_conv(aspp, aspp, 3),
                                     nn.Conv2d(aspp, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        x = self.stem(x)
        low = None
        for k, s in enumerate(self.stages):
            x = s(x)
            if k == 0:
                low = x
        assert low is not None
        y = F.interpolate(self.aspp(x), size=low.shape[-2:], mode="bilinear",
                          align_corners=False)
        y = self.decoder(torch.cat([y, self.low(low)], 1))
        return F.interpolate(y, size=size, mode="bilinear", align_corners=False)


def seg_varsize_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    model = DeepLabV3Plus(cfg["blocks"], cfg["aspp"], cfg["rates"], cfg["classes"])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4,
                          foreach=True)
    rng = random.Random(12)
    gen = torch.Generator().manual_seed(12)

    def step(i: int) -> None:
        # random-scale crops: a random crop size (multiple of 32) and batch per step, as
        # multi-scale segmentation training batches them; unlabeled pixels are ignored
        b = rng.randint(*cfg["batch"])
        h, w = rng.choice(cfg["sizes"]), rng.choice(cfg["sizes"])
        images = torch.randn(b, 3, h, w, generator=gen)
        labels = torch.randint(0, cfg["classes"], (b, h, w), generator=gen)
        labels[torch.rand(b, h, w, generator=gen) < 0.05] = 255
        loss = F.cross_entropy(model(images), labels, ignore_index=255)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


class _MRFBlock(nn.Module):
    """HiFi-GAN's multi-receptive-field residual block: dilated 1-D convolutions with leaky
    ReLU and residual connections."""

    def __init__(self, c: int, k: int, dilations: list[int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv1d(c, c, k, padding=d * (k - 1) // 2, dilation=d)
                                   for d in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = x + conv(F.leaky_relu(x, 0.1))
        return x


class HiFiGenerator(nn.Module):
    """A HiFi-GAN vocoder generator: mel frames to waveform through transposed-convolution
    upsampling stages, each followed by the sum of multi-receptive-field blocks."""

    def __init__(self, mels: int, c: int, ups: list[int], kernels: list[int],
                 dilations: list[int]) -> None:
        super().__init__()
        self.pre = nn.Conv1d(mels, c, 7, padding=3)
        self.ups = nn.ModuleList()
        self.mrfs = nn.ModuleList()
        for u in ups:
            self.ups.append(nn.ConvTranspose1d(c, c // 2, 2 * u, u, padding=u // 2))
            c //= 2
            self.mrfs.append(nn.ModuleList(_MRFBlock(c, k, dilations) for k in kernels))
        self.post = nn.Conv1d(c, 1, 7, padding=3)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = self.pre(mel)
        for up, mrf in zip(self.ups, self.mrfs):
            x = up(F.leaky_relu(x, 0.1))
            x = sum(m(x) for m in mrf) / len(mrf)  # type: ignore[assignment]
        return torch.tanh(self.post(F.leaky_relu(x)))


def vocoder_varlen_train(cfg: dict[str, Any]) -> Callable[[int], None]:
    torch.manual_seed(0)
    hop = math.prod(cfg["ups"])
    model = HiFiGenerator(cfg["mels"], cfg["channels"], cfg["ups"], cfg["kernels"],
                          cfg["dilations"])
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.8, 0.99), foreach=True)
    rng = random.Random(13)
    gen = torch.Generator().manual_seed(13)
    window = torch.hann_window(cfg["n_fft"])

    def spec(x: torch.Tensor) -> torch.Tensor:
        return torch.stft(x, cfg["n_fft"], hop, window=window, return_complex=True).abs()

    def step(i: int) -> None:
        # segments of a random number of mel frames per batch (whole utterances, as a TTS
        # fine-tuning run feeds them), loss: L1 between log-magnitude spectrograms
        b = rng.randint(*cfg["batch"])
        frames = rng.randint(*cfg["frames"])
        mel = torch.randn(b, cfg["mels"], frames, generator=gen)
        target = torch.randn(b, frames * hop, generator=gen) * 0.1
        wav = model(mel).squeeze(1)
        loss = F.l1_loss(torch.log(spec(wav) + 1e-5), torch.log(spec(target) + 1e-5))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


#: name -> (factory, config, recorded steps, warm-up steps, description)
WORKLOADS: dict[str, tuple[Callable[[dict[str, Any]], Callable[[int], None]], dict[str, Any],
                           int, int, str]] = {
    "unet_train": (unet_train, {"channels": [128, 256, 512], "blocks": 2, "batch": 4,
                                "res": 32}, 2, 1,
                   ("diffusion U-Net training (channels 128/256/512, 2 res blocks per level, "
                    "attention at 16x16 and 8x8), AdamW foreach, batch 4 of 4x32x32 latents "
                    "(256 px images), 2 steps after 1 warm-up")),
    "llama_varlen_train": (llama_varlen_train, {"vocab": 32000, "d": 512, "layers": 8,
                                                "heads": 8, "kv_heads": 2, "ffn": 1408,
                                                "batch": [1, 8], "seq": [32, 384]}, 8, 1,
                           ("Llama-style decoder training (d512, 8 layers, GQA 8/2 heads, "
                            "SwiGLU 1408, vocab 32000), AdamW foreach, grad clipping, "
                            "batches of random 1-8 sequences x 32-384 tokens, 8 steps after "
                            "1 warm-up")),
    "dlrm_train": (dlrm_train, {"dense": 13, "rows": [1000000, 500000, 200000, 100000, 50000,
                                                      20000, 10000, 1000],
                                "dim": 64, "bottom": [512, 256], "top": [512, 256],
                                "batch": 4096, "max_hot": 20}, 4, 1,
                   ("DLRM training: 8 sum-pooled embedding tables (1M..1K rows x 64, 1.88M "
                    "rows), multi-hot bags of 1-20 power-law ids, bottom MLP 13-512-256-64, "
                    "dot interactions, top MLP 100-512-256-1, Adagrad foreach, batch 4096, "
                    "4 steps after 1 warm-up")),
    "speech_varlen_train": (speech_varlen_train, {"mels": 80, "d": 256, "layers": 8,
                                                  "heads": 4, "ffn": 1024, "kernel": 31,
                                                  "vocab": 32, "batch": [2, 8],
                                                  "frames": [200, 1000]}, 8, 1,
                            ("Conformer speech encoder training with CTC (d256, 8 blocks, "
                             "4 heads, conv kernel 31, 4x conv subsampling of 80 log-mels), "
                             "AdamW foreach, batches of random 2-8 utterances of 2-10 s "
                             "(200-1000 frames), padded, 8 steps after 1 warm-up")),
    "det_fpn_varsize_train": (det_fpn_varsize_train, {"blocks": [2, 2, 2, 2], "fpn": 256,
                                                      "classes": 80, "anchors": 9,
                                                      "batch": [2, 4],
                                                      "short_side": [320, 384, 448, 512],
                                                      "max_side": 640}, 6, 1,
                              ("RetinaNet-style detector training: bottleneck ResNet backbone "
                               "(2/2/2/2 blocks), FPN P3-P7 of 256 channels, class and box "
                               "subnets (4 convs + GroupNorm, 9 anchors, 80 classes), focal and "
                               "smooth-L1 losses, SGD momentum foreach, batches of 2-4 images "
                               "of random short side 320-512 and aspect 0.6-1.67 padded to a "
                               "multiple of 128, 6 steps after 1 warm-up")),
    "lora_varlen_finetune": (lora_varlen_finetune, {"vocab": 32000, "d": 768, "layers": 12,
                                                    "heads": 12, "kv_heads": 4, "ffn": 2048,
                                                    "targets": ["q", "kvp", "o", "gate_up",
                                                                "down"],
                                                    "rank": 16, "alpha": 32,
                                                    "batch": [1, 4], "seq": [64, 512]}, 6, 1,
                             ("LoRA fine-tuning of a frozen Llama-style decoder (d768, 12 "
                              "layers, GQA 12/4 heads, SwiGLU 2048, vocab 32000): rank-16 "
                              "adapters with dropout on every projection, only they are "
                              "trained, AdamW foreach, grad clipping, batches of 1-4 "
                              "sequences of random 64-512 tokens right-padded, ignored labels, "
                              "6 steps after 1 warm-up")),
    "video_varlen_train": (video_varlen_train, {"widths": [64, 128, 256, 512], "classes": 400,
                                                "res": 112, "frames": [8, 12, 16],
                                                "clips": 48}, 8, 1,
                           ("R(2+1)D-18 video classifier training (64-512 channels, 400 "
                            "classes), SGD momentum foreach, label smoothing, "
                            "clips of 112x112 with a random 8, 12 or 16 frames per batch and "
                            "48 frames per batch (6, 4 or 3 clips), 8 steps after 1 warm-up")),
    "pointcloud_varsize_train": (pointcloud_varsize_train, {"k": 20,
                                                            "widths": [64, 64, 128, 256],
                                                            "emb": 1024, "parts": 50,
                                                            "batch": 8,
                                                            "points": [1024, 2048]}, 6, 1,
                                 ("DGCNN part segmentation training (EdgeConv 64/64/128/256 "
                                  "over a k=20 nearest-neighbour graph rebuilt per layer, "
                                  "1024-d global feature, 50 parts), Adam foreach, batches of "
                                  "8 clouds of a random 1024-2048 points, 6 steps after 1 "
                                  "warm-up")),
    "gnn_varsize_train": (gnn_varsize_train, {"node_types": 120, "edge_types": 8, "d": 256,
                                              "layers": 5, "tasks": 128, "graphs": 64,
                                              "nodes": [8, 400], "degree": 4}, 8, 1,
                          ("GINE graph neural network training (molecular-property style: "
                           "atom/bond embeddings, 5 residual message-passing layers of d256 "
                           "with index_add_ aggregation and BatchNorm, mean pooling per graph, "
                           "128 binary tasks), AdamW foreach, batches of 64 graphs of random "
                           "8-400 nodes and 1-4 undirected edges per node, 8 steps after 1 "
                           "warm-up")),
    "seq2seq_varlen_train": (seq2seq_varlen_train, {"d": 512, "heads": 8, "layers": 4,
                                                    "ffn": 2048, "vocab": 16000,
                                                    "tokens": 2048, "src_len": [8, 120],
                                                    "max_len": 160}, 8, 1,
                             ("Transformer translation training (pre-norm encoder-decoder, "
                              "4+4 layers, d512, 8 heads, FFN 2048, shared 16000-token "
                              "vocabulary tied to the output layer), label smoothing, padding "
                              "masks, Adam foreach, grad clipping, batches of ~2048 source "
                              "tokens of similar length 8-120, targets 0.8-1.25x as long, 8 "
                              "steps after 1 warm-up")),
    "srgan_train": (srgan_train, {"channels": 64, "blocks": 16, "batch": 16, "hr": 96,
                                  "disc_widths": [64, 128, 256, 512]}, 6, 1,
                    ("SRGAN x4 super-resolution GAN training: SRResNet generator (16 residual "
                     "blocks of 64 channels, BatchNorm, PReLU, 2 PixelShuffle stages), VGG-"
                     "style discriminator (64-512 channels, strided), a discriminator step "
                     "then a generator step (MSE + adversarial loss), two Adam foreach, "
                     "batch 16 of 96x96 crops from 24x24 inputs, 6 steps after 1 warm-up")),
    "vlm_caption_train": (vlm_caption_train, {"img": 224, "patch": 16, "vd": 384,
                                              "vlayers": 6, "vheads": 6, "td": 512,
                                              "tlayers": 6, "theads": 8, "vocab": 32000,
                                              "max_len": 64, "batch": 16,
                                              "caption": [8, 48]}, 8, 1,
                          ("image-captioning vision-language model training: ViT encoder "
                           "(224 px, 16x16 patches, d384, 6 layers) projected to a text "
                           "decoder (d512, 6 layers of causal self-attention, cross-attention "
                           "to the 197 image tokens and MLP, vocab 32000), label smoothing, "
                           "AdamW foreach, grad clipping, batch 16 with captions of random "
                           "8-48 tokens padded, 8 steps after 1 warm-up")),
    "moe_routing_train": (moe_routing_train, {"vocab": 32000, "d": 512, "layers": 4,
                                              "heads": 8, "ffn": 1024, "experts": 8, "top": 2,
                                              "batch": [1, 8], "seq": [64, 512]}, 8, 1,
                          ("mixture-of-experts decoder training (d512, 4 layers, 8 heads, "
                           "8 SwiGLU experts of 1024 per layer, top-2 token routing with "
                           "renormalised weights and a load-balancing loss, tied 32000-token "
                           "embedding), AdamW foreach, grad clipping, batches of random 1-8 "
                           "sequences x 64-512 tokens (every expert's batch varies), 8 steps "
                           "after 1 warm-up")),
    "seg_varsize_train": (seg_varsize_train, {"blocks": [2, 2, 2, 2], "aspp": 256,
                                              "rates": [6, 12, 18], "classes": 21,
                                              "batch": [2, 4],
                                              "sizes": [256, 320, 384, 448, 512]}, 8, 1,
                          ("DeepLabv3+ semantic segmentation training: bottleneck ResNet "
                           "backbone (2/2/2/2 blocks) at output stride 16 (the last stage keeps "
                           "stride 1), ASPP (rates 6/12/18 and image pooling, 256 channels), "
                           "decoder joining stride-4 features, 21 classes, per-pixel cross "
                           "entropy ignoring 5% unlabeled pixels, SGD momentum foreach, batches "
                           "of 2-4 crops of a random height and width of 256-512 px, 8 steps "
                           "after 1 warm-up")),
    "vocoder_varlen_train": (vocoder_varlen_train, {"mels": 80, "channels": 256,
                                                    "ups": [8, 8, 2, 2], "kernels": [3, 7, 11],
                                                    "dilations": [1, 3, 5], "n_fft": 1024,
                                                    "batch": [4, 16], "frames": [32, 96]},
                             12, 1,
                             ("HiFi-GAN vocoder generator training (80 mels, 256 channels, "
                              "transposed-convolution upsampling 8/8/2/2 to 256 samples per "
                              "frame, multi-receptive-field blocks of kernels 3/7/11 and "
                              "dilations 1/3/5), L1 loss between log STFT magnitudes, AdamW "
                              "foreach, batches of 4-16 segments of a random 32-96 mel frames "
                              "(8,192-24,576 samples), 12 steps after 1 warm-up")),
}


def _load_user(spec: str) -> Callable[[int], Any]:
    mod_name, _, fn = spec.rpartition(":")
    if not mod_name or not fn:
        raise SystemExit(f"record_trace: {spec!r}: expected a built-in workload "
                         f"({', '.join(WORKLOADS)}), module:function or file.py:function")
    if mod_name.endswith(".py") or os.sep in mod_name:
        s = importlib.util.spec_from_file_location("_user_workload", mod_name)
        if s is None or s.loader is None:
            raise SystemExit(f"record_trace: cannot load {mod_name!r}")
        mod = importlib.util.module_from_spec(s)
        sys.modules["_user_workload"] = mod
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(mod_name)
    f = getattr(mod, fn, None)
    if not callable(f):
        raise SystemExit(f"record_trace: {mod_name} has no callable {fn!r}")
    return f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", help=f"one of {', '.join(WORKLOADS)}, or module:function / "
                                     "file.py:function taking the step number")
    ap.add_argument("-o", "--output", help="output .json.gz (default trace_<workload>.json.gz)")
    ap.add_argument("--steps", type=int, help="recorded steps (user workloads: default 3)")
    ap.add_argument("--warmup", type=int, help="steps before recording (user default 1)")
    ap.add_argument("--describe", default="", help="workload description for info")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    info: dict[str, Any] = {}
    if args.workload in WORKLOADS:
        factory, cfg, steps, warmup, desc = WORKLOADS[args.workload]
        step = factory(cfg)
        info["config"] = cfg
        name = args.workload
    else:
        step = _load_user(args.workload)
        steps, warmup, desc = 3, 1, args.describe or args.workload
        name = args.workload.rpartition(":")[2]
    steps = args.steps if args.steps is not None else steps
    warmup = args.warmup if args.warmup is not None else warmup
    t0 = time.time()
    trace, finfo = record(step, steps, warmup)
    actions = collections.Counter(e[0] for e in trace)
    out = args.output or f"trace_{name}.json.gz"
    info = {"workload": desc, **info, "steps": steps, "warmup_steps": warmup,
            "recorded_with": "torch.profiler.profile(activities=[CPU], profile_memory=True), "
                             "scripts/record_trace.py",
            "torch": torch.__version__, "entries": len(trace), "actions": dict(actions),
            "peak_live_bytes": peak_live(trace), **finfo,
            "record_seconds": round(time.time() - t0, 1)}
    with gzip.open(out, "wt", encoding="ascii", compresslevel=9) as f:
        json.dump({"info": info, "trace": trace}, f, separators=(",", ":"))
    print(json.dumps({k: v for k, v in info.items() if k != "config"}, indent=1))
    print(f"wrote {out} ({os.path.getsize(out):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

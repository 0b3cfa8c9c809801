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
  ``mkldnn`` operator, so its buffers are the raw allocations made by
  ``aten::convolution_backward`` itself (not through ``aten::empty``, as its gradients are)
  and freed before it returns.
* ``cpu_dtype_copy``: ``aten::_to_copy``/``aten::to`` results made inside another operator
  (not by the model's own ``.to()``/``.float()`` calls), freed before that operator returns:
  dtype conversions the CPU kernel makes where the CUDA kernel converts in registers.
* ``zero_size``: 0-byte allocations (the CUDA caching allocator makes no block for them).
* frees of addresses allocated before recording began are dropped (``untracked_frees``).

Built-in workloads (models built in plain ``torch.nn`` from a config with random weights; no
downloads): ``unet_train``, ``llama_varlen_train``, ``dlrm_train``, ``speech_varlen_train``.
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

#: Operators whose CPU kernel calls oneDNN through a dispatch stub, not through a dispatched
#: ``mkldnn`` operator that names it: the oneDNN buffers are allocated by the operator itself.
_ONEDNN_STUBS = ("aten::convolution_backward",)

REASONS = {
    "scalar_wrap": "8-byte allocation by an elementwise operator: a Python number wrapped as a "
                   "0-dim float64/int64 tensor, which stays on the host on a GPU run",
    "cpu_scalar_state": "allocation of at most 8 bytes inside Optimizer.step: step counters "
                        "and their arithmetic, kept on the host unless capturable/fused",
    "onednn_temporary": "made inside a oneDNN (mkldnn) operator, or by the CPU convolution "
                        "backward's oneDNN call, and freed before it returns: CPU "
                        "reorder/scratch buffers; a GPU kernel's workspace differs",
    "cpu_dtype_copy": "aten::_to_copy inside another operator, freed before it returns: a "
                      "dtype conversion the CPU kernel makes and a CUDA kernel does in registers",
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
    if inner in _ONEDNN_STUBS and freed_inside >= len(stack) - 1:
        # a raw buffer of the oneDNN kernel the operator calls through a dispatch stub
        # (tensors it makes through aten::empty, its outputs among them, have that inner)
        return "onednn_temporary"
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

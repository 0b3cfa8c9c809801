"""One PyTorch training run under one CUDA allocator, for scripts/gpu_check.py's
``torch-allocator`` phase (each variant needs a process of its own: PyTorch sets its allocator
once per process).

    python scripts/torch_allocator_run.py VARIANT [--steps N] [--json PATH]

VARIANT is ``native`` (PyTorch's caching allocator), ``native_expandable`` (the same with
``expandable_segments:True``), ``accelrt`` (accelrt's caching allocator through
``accelrt.interop.torch.use_accelrt_allocator()``, default settings) or ``accelrt_lowfrag``
(accelrt with ``expandable_segments:True,page_reuse:True``). The loop trains a small
transformer encoder with a variable batch and sequence length (a new shape most steps) and
prints one JSON line: peak reserved and allocated bytes (from PyTorch's statistics for the
native variants, from accelrt's for the accelrt ones: a pluggable allocator leaves PyTorch's
empty), the median and mean step time, and the final loss.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

VARIANTS = ("native", "native_expandable", "accelrt", "accelrt_lowfrag")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", choices=VARIANTS)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    if args.variant == "native_expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch   # after the variable: PyTorch reads it when CUDA starts
    acc = None
    if args.variant.startswith("accelrt"):
        import accelrt as acc
        from accelrt.interop.torch import use_accelrt_allocator
        settings = ("expandable_segments:True,page_reuse:True"
                    if args.variant == "accelrt_lowfrag" else None)
        use_accelrt_allocator(settings=settings)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    d_model, vocab = 256, 4096
    layer = torch.nn.TransformerEncoderLayer(d_model, nhead=8, dim_feedforward=1024,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, d_model),
                                torch.nn.TransformerEncoder(layer, num_layers=4),
                                torch.nn.Linear(d_model, vocab)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    times: list[float] = []
    loss = torch.zeros(())
    for step in range(args.steps):
        batch = int(torch.randint(4, 33, (1,), generator=gen))
        seq = int(torch.randint(16, 257, (1,), generator=gen))
        x = torch.randint(0, vocab, (batch, seq), generator=gen).to(dev)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, vocab), x.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if step >= 5:   # after warm-up
            times.append(time.perf_counter() - t0)
    if acc is not None:
        stats = acc.cuda.memory_stats()
        source = "accelrt"
    else:
        stats = torch.cuda.memory_stats()
        source = "torch"
    result = {
        "variant": args.variant, "steps": args.steps, "stats_from": source,
        "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "median_step_ms": round(statistics.median(times) * 1e3, 3),
        "mean_step_ms": round(statistics.fmean(times) * 1e3, 3),
        "final_loss": round(float(loss), 4),
        "torch": torch.__version__,
    }
    line = json.dumps(result)
    print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

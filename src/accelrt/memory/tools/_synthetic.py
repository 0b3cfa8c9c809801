"""Synthetic allocation workloads for checking allocator policies (not tuned against).

:func:`convnet_inference_ops` makes the allocation pattern of a ResNet-like convolutional network
serving batches whose size varies at random from 1 to 32: weights allocated once, then per batch
an input, one activation per convolution (the block input kept alive for the residual add),
a convolution workspace freed at once, and the logits. Shapes vary with the batch, which is
what fragments a caching allocator. The result feeds :func:`~accelrt.memory.tools._replay.replay_ops`.

Example::

    >>> from accelrt.memory.tools._synthetic import convnet_inference_ops
    >>> ops = convnet_inference_ops(batches=2, seed=0)
    >>> sum(1 for op in ops if op[0]) == sum(1 for op in ops if not op[0]) + 54
    True
"""

from __future__ import annotations

import random

from ._replay import Op

__all__ = ["convnet_inference_ops"]

#: (blocks, channels, spatial size) of the four stages of a ResNet-50-like network.
_STAGES = ((3, 256, 56), (4, 512, 28), (6, 1024, 14), (3, 2048, 7))
_F32 = 4


def convnet_inference_ops(batches: int = 60, seed: int = 0, max_batch: int = 32) -> list[Op]:
    """The replayed operations of ``batches`` inference batches of random size 1..``max_batch``.

    The weights (one tensor per convolution, 54 of them) stay allocated at the end.

    Raises:
        ValueError: ``batches`` is negative or ``max_batch`` is not positive.
    """
    if batches < 0 or max_batch < 1:
        raise ValueError(f"need batches >= 0 and max_batch >= 1, got {batches}, {max_batch}")
    rng = random.Random(seed)
    ops: list[Op] = []
    next_addr = 1

    def alloc(size: int) -> int:
        nonlocal next_addr
        a = next_addr
        next_addr += 1
        ops.append((True, a, size, 0))
        return a

    def free(a: int) -> None:
        ops.append((False, a, 0, 0))

    # weights: stem, then per block three convolutions (1x1, 3x3, 1x1); one downsample each
    alloc(64 * 3 * 7 * 7 * _F32)
    cin = 64
    for blocks, cout, _ in _STAGES:
        mid = cout // 4
        alloc(cout * cin * _F32)                      # projection shortcut
        for b in range(blocks):
            alloc(mid * (cin if b == 0 else cout) * _F32)
            alloc(mid * mid * 9 * _F32)
            alloc(cout * mid * _F32)
        cin = cout
    alloc(1000 * 2048 * _F32)                          # classifier
    for _ in range(batches):
        n = rng.randint(1, max_batch)
        x = alloc(n * 3 * 224 * 224 * _F32)
        stem = alloc(n * 64 * 112 * 112 * _F32)
        free(x)
        x = alloc(n * 64 * 56 * 56 * _F32)             # max pool
        free(stem)
        for blocks, cout, hw in _STAGES:
            mid = cout // 4
            for _b in range(blocks):
                h1 = alloc(n * mid * hw * hw * _F32)
                ws = alloc(n * mid * hw * hw * _F32 // 2 + (1 << 20))   # conv workspace
                h2 = alloc(n * mid * hw * hw * _F32)
                free(ws)
                free(h1)
                h3 = alloc(n * cout * hw * hw * _F32)
                free(h2)
                free(x)                                 # residual add done in place into h3
                x = h3
        pooled = alloc(n * 2048 * _F32)
        free(x)
        logits = alloc(n * 1000 * _F32)
        free(pooled)
        free(logits)
    return ops

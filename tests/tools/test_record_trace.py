"""scripts/record_trace.py's filters, without PyTorch: the script is loaded with a stand-in
``torch`` module (its models are only defined, never built), and ``_classify`` is called with
the operator stacks PyTorch's profiler reports."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parent.parent.parent / "scripts" / "record_trace.py"


@pytest.fixture(scope="module")
def rt() -> Any:
    torch = types.ModuleType("torch")
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")
    nn.Module = nn.Sequential = type("Module", (), {})  # type: ignore[attr-defined]
    nn.functional = functional  # type: ignore[attr-defined]
    torch.nn = nn  # type: ignore[attr-defined]
    stand_ins = {"torch": torch, "torch.nn": nn, "torch.nn.functional": functional}
    saved = {k: sys.modules.get(k) for k in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("_record_trace_under_test", SCRIPT)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


BW = ("autograd::engine::evaluate_function: ConvolutionBackward0", "ConvolutionBackward0",
      "aten::convolution_backward")


def test_convolution_backward_onednn_buffers_are_filtered(rt: Any) -> None:
    """The CPU convolution backward calls oneDNN through a dispatch stub: its reorder buffers
    (of grad_output, input and weight size) are allocated by aten::convolution_backward itself
    and freed before it returns; a GPU's cuDNN backward makes none of them."""
    assert rt._classify(10 << 20, BW, 2) == "onednn_temporary"
    assert rt._classify(147_456, BW, 2) == "onednn_temporary"


def test_convolution_backward_scratch_through_empty_is_filtered(rt: Any) -> None:
    """A strided convolution's CPU backward also makes an input-sized block through
    aten::empty and frees it before returning (its grad_input is a second block)."""
    assert rt._classify(2_408_448, BW + ("aten::empty",), 2) == "onednn_temporary"
    assert rt._classify(2_408_448, BW + ("aten::empty",), 3) == "onednn_temporary"


def test_convolution_backward_gradients_are_kept(rt: Any) -> None:
    """grad_input and grad_weight are made through aten::empty and outlive the operator; a
    raw buffer still alive after it returns is kept too, and so is a contiguous copy the
    operator makes through aten::clone (a GPU makes it as well)."""
    assert rt._classify(10 << 20, BW + ("aten::empty",), -1) is None
    assert rt._classify(10 << 20, BW + ("aten::empty",), 1) is None
    assert rt._classify(10 << 20, BW, 1) is None
    assert rt._classify(10 << 20, BW, -1) is None
    assert rt._classify(5 << 20, BW + ("aten::contiguous", "aten::clone", "aten::empty_like",
                                       "aten::empty"), 2) is None


BN = ("autograd::engine::evaluate_function: NativeBatchNormBackward0",
      "NativeBatchNormBackward0", "aten::native_batch_norm_backward")


def test_batch_norm_backward_first_grad_input_is_filtered(rt: Any) -> None:
    """The CPU batch-norm backward allocates grad_input (input-sized) twice and frees the
    first before it returns; the second, and the per-channel gradients, outlive it."""
    first = BN + ("aten::empty_like", "aten::empty")
    assert rt._classify(16_384, first, 2) == "cpu_batch_norm_temporary"
    assert rt._classify(16_384, first, -1) is None
    assert rt._classify(32, BN + ("aten::empty",), -1) is None
    # not a factory the operator calls directly: an operator of its own, kept
    assert rt._classify(64, BN + ("aten::sum", "aten::empty"), 2) is None


def test_forward_onednn_rule_unchanged(rt: Any) -> None:
    fw = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution")
    assert rt._classify(1 << 20, fw, 3) == "onednn_temporary"
    assert rt._classify(1 << 20, fw + ("aten::empty",), -1) is None
    assert rt._classify(8, ("aten::mul",), -1) == "scalar_wrap"
    assert rt._classify(0, ("aten::empty",), -1) == "zero_size"


def test_every_rule_has_a_reason(rt: Any) -> None:
    assert set(rt.REASONS) == {"scalar_wrap", "cpu_scalar_state", "onednn_temporary",
                               "cpu_dtype_copy", "cpu_batch_norm_temporary", "zero_size"}
    assert set(rt._CPU_KERNEL_TEMPS.values()) <= set(rt.REASONS)
    assert "convolution backward" in rt.REASONS["onednn_temporary"]

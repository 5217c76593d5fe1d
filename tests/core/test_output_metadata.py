"""Where a grad rule's proxies get their metadata without torch's meta kernels
(`prims/missing_meta.py`): the gradient kernels shaped by hand (`_GRADIENTS`), held against
torch's own meta kernels (for each call below, the same shape, dtype, and outputs that are
None, or the entry leaves the call to the meta kernel; kernels torch has no meta for are
checked by the censuses instead), and a rule's re-emitted call, which takes the outputs the
trace recorded."""

from __future__ import annotations

import itertools
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import thunderviz as tv
from thunderviz.core.proxies import TensorProxy
from thunderviz.prims.missing_meta import _GRADIENTS, gradient_kernel

aten = torch.ops.aten
F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16


def _proxy(shape, dtype=F32):
    return TensorProxy(name="t", shape=tuple(shape), dtype=dtype)


def _as_meta(x):
    return x.meta() if isinstance(x, TensorProxy) else x


def _described(out):
    """(shape, dtype) of each output, None for None."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [None if t is None else (tuple(t.shape), t.dtype) for t in outs]


def _batch_norm_calls():
    masks = itertools.cycle(itertools.product((True, False), repeat=3))
    for rank, (dtype, wdtype), has_weight, training in itertools.product(
        (2, 4, 5),
        ((F32, F32), (F64, F64), (BF16, F32), (F16, F16)),
        (True, False),
        (True, False),
    ):
        shape = (3, 5, 4, 2, 3)[:rank]
        c = (shape[1],)
        stats = _proxy(c, wdtype)
        yield (
            _proxy(shape, dtype),
            _proxy(shape, dtype),
            _proxy(c, wdtype) if has_weight else None,
            None if training else stats,
            None if training else stats,
            _proxy(c, F32) if training else None,
            _proxy(c, F32) if training else None,
            training,
            1e-5,
            list(next(masks)),
        )


def _convolution_calls():
    for dims, mask, transposed, dtype in itertools.product(
        (1, 2, 3), itertools.product((True, False), repeat=3), (False, True), (F32, F64)
    ):
        spatial = (7, 6, 5)[:dims]
        x = _proxy((2, 4, *spatial), dtype)
        kernel = [3] * dims
        weight = _proxy((4, 3, *kernel) if transposed else (6, 4, *kernel), dtype)
        out_channels = 3 if transposed else 6
        out_spatial = [s + 2 for s in spatial] if transposed else [s - 2 for s in spatial]
        yield (
            _proxy((2, out_channels, *out_spatial), dtype),
            x,
            weight,
            [out_channels],
            [1] * dims,
            [0] * dims,
            [1] * dims,
            transposed,
            [0] * dims,
            1,
            list(mask),
        )


_POINTWISE_EXTRA = {
    aten.threshold_backward.default: (0.0,),
    aten.gelu_backward.default: (),
    aten.silu_backward.default: (),
    aten.sigmoid_backward.default: (),
    aten.tanh_backward.default: (),
    aten.hardtanh_backward.default: (-1.0, 1.0),
    aten.leaky_relu_backward.default: (0.01, False),
    aten.softplus_backward.default: (1.0, 20.0),
    aten.hardswish_backward.default: (),
    aten.hardsigmoid_backward.default: (),
    aten.mish_backward.default: (),
}


def _calls():
    yield from ((aten.native_batch_norm_backward.default, a) for a in _batch_norm_calls())
    yield from ((aten.convolution_backward.default, a) for a in _convolution_calls())
    for op, extra in _POINTWISE_EXTRA.items():
        for grad, x in (
            ((4, 5), (4, 5)),
            ((2, 3, 4), (2, 3, 4)),
            ((4, 5), (5,)),  # broadcast: left to the meta kernel
        ):
            for gdtype, xdtype in ((F32, F32), (F64, F64), (BF16, BF16), (F32, F64)):
                yield op, (_proxy(grad, gdtype), _proxy(x, xdtype), *extra)
    for reduction, weighted, dtype in itertools.product((0, 1, 2), (True, False), (F32, F64)):
        for shape in ((6, 4), (4,)):  # (N, C) or (C,)
            target = shape[:1] if len(shape) > 1 else ()
            yield (
                aten.nll_loss_backward.default,
                (
                    _proxy(target if reduction == 0 else (), dtype),
                    _proxy(shape, dtype),
                    _proxy(target, torch.int64),
                    _proxy(shape[-1:], dtype) if weighted else None,
                    reduction,
                    -100,
                    _proxy((), dtype),
                ),
            )
    for op in (aten._log_softmax_backward_data.default, aten._softmax_backward_data.default):
        for shape, dim, (gdtype, input_dtype) in itertools.product(
            ((4, 5), (2, 3, 4)), (0, -1), ((F32, F32), (F32, F16), (F64, F64), (F16, F16))
        ):
            yield op, (_proxy(shape, gdtype), _proxy(shape, gdtype), dim, input_dtype)


CALLS = list(_calls())


def test_every_kernel_shaped_by_hand_with_a_meta_kernel_is_checked():
    checked = {op for op, _ in CALLS}
    no_meta = {
        aten._ctc_loss_backward.default,
        aten._ctc_loss_backward.Tensor,
        aten.fractional_max_pool3d_backward.default,
        aten.multilabel_margin_loss_backward.default,
        aten.multi_margin_loss_backward.default,
        aten._standard_gamma_grad.default,
        aten._pack_padded_sequence_backward.default,
        aten._fake_quantize_learnable_per_channel_affine_backward.default,
        aten._fake_quantize_learnable_per_tensor_affine_backward.default,
    }
    assert set(_GRADIENTS) - no_meta == checked


@pytest.mark.parametrize("op", sorted({op for op, _ in CALLS}, key=str), ids=str)
def test_shaped_as_torch_meta_kernel_shapes_them(op):
    by_hand = 0
    for call_op, args in CALLS:
        if call_op is not op:
            continue
        ours = gradient_kernel(op, args)
        if ours is None:  # left to the meta kernel
            continue
        by_hand += 1
        theirs = op(*[_as_meta(a) for a in args])
        assert _described(ours) == _described(theirs), args
    assert by_hand, f"no call of {op} was shaped by hand"


class _MetaCalls(TorchDispatchMode):
    """The ops run on meta tensors while it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in tree_leaves((args, kwargs))):
            self.ops.add(func)
        return func(*args, **(kwargs or {}))


def test_a_rule_re_emitting_its_call_runs_no_meta_kernel_for_it(monkeypatch):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten()
    )
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    trace = tv.trace(model, x)
    # a fresh cache, as in a fresh process: every signature is met for the first time
    monkeypatch.setattr(sys.modules["thunderviz.prims.aten"], "_META_CACHE", {})
    with _MetaCalls() as seen:
        tv.autodiff(trace)
    recorded = {aten.convolution.default, aten.native_batch_norm.default, aten.relu.default}
    shaped_by_hand = {aten.native_batch_norm_backward.default, aten.threshold_backward.default}
    assert not seen.ops & (recorded | shaped_by_hand)
    assert seen.ops, "nothing ran on meta tensors: the check would see nothing"

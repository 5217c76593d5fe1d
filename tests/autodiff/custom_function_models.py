"""Models with user-defined autograd.Functions and checkpointed blocks, and the eager
references the tests compare against (tests/autodiff/test_custom_function.py,
test_checkpoint.py, test_inner_grad.py, tests/executor/test_double_backward.py)."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.autograd.function import Function, once_differentiable
from torch.utils.checkpoint import checkpoint


class ScaleGrad(Function):
    """Identity forward, gradient times `scale` (gradient reversal when negative)."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale, None


class RoundSTE(Function):
    """Quantize to quarters; straight-through gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4) / 4

    @staticmethod
    def backward(ctx, g):
        return g


class WrongGrad(Function):
    """A planted bug: the forward is x * 2, the backward says 7."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 7


NEEDS_LOG: list[tuple[bool, ...]] = []


class SplitScale(Function):
    """Several outputs (one integer, marked non-differentiable), non-tensor arguments, ctx
    attributes, save_for_backward, needs_input_grad, set_materialize_grads(False) (the
    integer output's gradient is None), once_differentiable, and a weight gradient returned
    in the broadcast shape (the engine sums it to the weight's)."""

    @staticmethod
    def forward(ctx, x, w, k, mode):
        ctx.k, ctx.mode = k, mode
        y = x * w
        idx = y.argmax(dim=-1)
        ctx.save_for_backward(x, w)
        ctx.mark_non_differentiable(idx)
        ctx.set_materialize_grads(False)
        return y[..., :k], y[..., k:], idx

    @staticmethod
    @once_differentiable
    def backward(ctx, g1, g2, g_idx):
        NEEDS_LOG.append(tuple(ctx.needs_input_grad))
        assert ctx.mode == "split" and g1.shape[-1] == ctx.k and g_idx is None
        x, w = ctx.saved_tensors
        g = torch.cat([g1, g2], dim=-1)
        gx = g * w if ctx.needs_input_grad[0] else None
        gw = g * x if ctx.needs_input_grad[1] else None  # shape of x: summed to w's by autograd
        return gx, gw, None, None


class Cube(Function):
    """New style: forward without ctx, setup_context, a default argument, a vmap rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, scale=0.5):
        return x**3 * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g * ctx.scale, None


class DoubleInPlace(Function):
    """Writes into its input and says so (ctx.mark_dirty), as in-place activations do."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class FunctionMLP(nn.Module):
    def __init__(self, fns=("scale", "ste", "split", "cube")):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(6, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 16))
        self.fns = fns

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if "scale" in self.fns:
            h = ScaleGrad.apply(h, -0.3)
        if "ste" in self.fns:
            h = RoundSTE.apply(h)
        h = torch.relu(self.fc2(h))
        if "split" in self.fns:
            a, b, idx = SplitScale.apply(h, self.w, 10, "split")
            h = torch.cat([a * 2, b], dim=-1) + idx.unsqueeze(-1).to(h.dtype) * 0.01
        if "cube" in self.fns:
            h = Cube.apply(h)
        if "wrong" in self.fns:
            h = WrongGrad.apply(h)
        return self.fc3(h)


def mse(out):
    return out.square().mean()


class Loss(nn.Module):
    """A model and its loss as one module: a scalar output, parameters named net_*."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, *inputs):
        return mse(self.net(*inputs))


class Block(nn.Module):
    """A pre-norm transformer block whose body runs under torch.utils.checkpoint."""

    def __init__(self, d=8, reentrant=True):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))
        self.reentrant = reentrant

    def body(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=self.reentrant)


class CheckpointedNet(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.embed, self.block, self.head = (
            nn.Linear(4, 8),
            Block(reentrant=reentrant),
            nn.Linear(8, 3),
        )

    def forward(self, x):
        return self.head(self.block(self.embed(x)))

"""What each rank runs for tests/distributed/test_collectives.py (spawned processes import
this module, so every check is a plain module-level function of (rank, world_size)).

References are independent of thunderviz: torch.autograd through torch's functional
collectives (which have autograd of their own), eager torch.distributed for the in-place
calls, and a one-process MLP for the tensor-parallel one.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import check_vjp

WORLD = None  # the default group, resolved by the collectives themselves


def _x(rank: int, *shape: int) -> torch.Tensor:
    return torch.randn(
        *shape, generator=torch.Generator().manual_seed(100 + rank), dtype=torch.float64
    )


# --- the functional collectives: traced, and their VJPs against torch.autograd -------------

# torch 2.13's differentiable *_single collectives; before it, their *_autograd twins (the
# same arguments), which torch.autograd differentiates as the reference needs
_NEW = hasattr(fc, "all_gather_single")
all_gather_single = fc.all_gather_single if _NEW else fc.all_gather_tensor_autograd
reduce_scatter_single = fc.reduce_scatter_single if _NEW else fc.reduce_scatter_tensor_autograd
all_to_all_single = fc.all_to_all_single if _NEW else fc.all_to_all_single_autograd


def all_reduce_sum(x):
    return fc.all_reduce(x.sin(), "sum", dist.group.WORLD) * x


def all_gather(x):
    return all_gather_single(x.exp(), 0, dist.group.WORLD).tanh()


def reduce_scatter(x):
    return reduce_scatter_single(x * x, "sum", 0, dist.group.WORLD).cos()


def all_to_all(x):
    # uneven splits: rank 0 sends 1 row to itself and 3 to rank 1; rank 1 sends 2 and 2
    rank = dist.get_rank()
    send = [1, 3] if rank == 0 else [2, 2]
    receive = [1, 2] if rank == 0 else [3, 2]
    return all_to_all_single(x.sigmoid(), receive, send, dist.group.WORLD) * 3.0


def check_functional_vjps(rank: int, world_size: int) -> str:
    check_vjp(all_reduce_sum, _x(rank, 3, 4), rtol=1e-12, atol=1e-12)
    check_vjp(all_gather, _x(rank, 2, 3), rtol=1e-12, atol=1e-12)
    check_vjp(reduce_scatter, _x(rank, 4, 3), rtol=1e-12, atol=1e-12)
    check_vjp(all_to_all, _x(rank, 4, 2), rtol=1e-12, atol=1e-12)
    return str(tv.trace(all_reduce_sum, _x(rank, 3, 4)))


# avg and broadcast: torch's autograd has no backward for them, so the reference writes the
# same function with sums, which it does differentiate.
def all_reduce_avg(x):
    return fc.all_reduce(x.sin(), "avg", dist.group.WORLD) * x


def all_reduce_avg_as_sum(x):
    return fc.all_reduce(x.sin() / dist.get_world_size(), "sum", dist.group.WORLD) * x


def reduce_scatter_avg(x):
    return reduce_scatter_single(x * x, "avg", 0, dist.group.WORLD).cos()


def reduce_scatter_avg_as_sum(x):
    return reduce_scatter_single(x * x / dist.get_world_size(), "sum", 0, dist.group.WORLD).cos()


def broadcast_from_1(x):
    return fc.broadcast(x.exp(), 1, dist.group.WORLD) * 2.0


def broadcast_as_sum(t, src):
    only_source = 1.0 if dist.get_rank() == src else 0.0
    return fc.all_reduce(t * only_source, "sum", dist.group.WORLD)


def broadcast_from_1_as_sum(x):
    return broadcast_as_sum(x.exp(), 1) * 2.0


def _grads(fn, x, ct, jitted: bool):
    x = x.detach().requires_grad_(True)
    f = tv.jit(fn) if jitted else fn
    out = f(x)
    (out * ct).sum().backward()
    return out.detach(), x.grad


def check_avg_and_broadcast(rank: int, world_size: int) -> None:
    for ours, reference, shape in (
        (all_reduce_avg, all_reduce_avg_as_sum, (3, 4)),
        (reduce_scatter_avg, reduce_scatter_avg_as_sum, (4, 3)),
        (broadcast_from_1, broadcast_from_1_as_sum, (2, 5)),
    ):
        x = _x(rank, *shape)
        ct = _x(rank + 10, *fn_shape(reference, x))
        out, grad = _grads(ours, x, ct, jitted=True)
        ref_out, ref_grad = _grads(reference, x, ct, jitted=False)
        torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


def fn_shape(fn, x):
    with torch.no_grad():
        return tuple(fn(x).shape)


# --- the in-place torch.distributed calls: functionalized --------------------------------


def in_place_calls(x):
    y = x * 2.0
    dist.all_reduce(y, async_op=True).wait()  # y now holds the sum
    row = y[0]
    dist.broadcast(row, src=0)  # a write through a view, into y
    gathered = torch.empty(2 * x.shape[0], x.shape[1], dtype=x.dtype)
    dist.all_gather_single(gathered, y.tanh())
    scattered = torch.empty(x.shape[0] // 2, x.shape[1], dtype=x.dtype)
    dist.reduce_scatter_single(scattered, gathered[: x.shape[0]] * y)
    return y.sin() + scattered.sum(), gathered


def in_place_calls_functional(x):
    """The same program with torch's functional collectives (torch.autograd's reference)."""
    y = fc.all_reduce(x * 2.0, "sum", dist.group.WORLD)
    row = broadcast_as_sum(y[0], 0)
    y = torch.cat([row[None], y[1:]])
    gathered = all_gather_single(y.tanh(), 0, dist.group.WORLD)
    scattered = reduce_scatter_single(gathered[: x.shape[0]] * y, "sum", 0, dist.group.WORLD)
    return y.sin() + scattered.sum(), gathered


def check_in_place_calls(rank: int, world_size: int) -> str:
    x = _x(rank, 4, 3)
    with torch.no_grad():
        eager = in_place_calls(x.clone())  # eager torch.distributed, really in place
    check_vjp(in_place_calls_functional, x, rtol=1e-12, atol=1e-12)
    traced = tv.trace(in_place_calls, x)
    ours = traced.python_callable()(x)
    for a, b in zip(ours, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # gradients of the in-place program = torch.autograd's through the functional one
    cts = [_x(rank + 20, 4, 3), _x(rank + 30, 8, 3)]
    grads = tv.vjp(in_place_calls)((x,), cts)[1]
    x_ref = x.detach().requires_grad_(True)
    outs = in_place_calls_functional(x_ref)
    ref = torch.autograd.grad(outs, [x_ref], cts)
    torch.testing.assert_close(grads[0], ref[0], rtol=1e-12, atol=1e-12)
    return str(traced)


# --- a tensor-parallel MLP (Megatron: column-parallel, then row-parallel) ------------------

D_IN, HIDDEN, D_OUT, STEPS, LR = 6, 8, 5, 3, 0.1


def full_mlp_parameters() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {
        "w1": torch.randn(HIDDEN, D_IN, generator=g),
        "b1": torch.randn(HIDDEN, generator=g),
        "w2": torch.randn(D_OUT, HIDDEN, generator=g),
        "b2": torch.randn(D_OUT, generator=g),
    }


def mlp_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(8)
    return torch.randn(10, D_IN, generator=g), torch.randn(10, D_OUT, generator=g)


class ColumnRowParallelMLP(torch.nn.Module):
    """This rank's shard: rows [r*h, (r+1)*h) of fc1 (column-parallel: its slice of the
    hidden units, no communication), the matching columns of fc2 (row-parallel: a partial
    sum), then the all-reduce that completes it; the bias after it is replicated."""

    def __init__(self, rank: int, world_size: int) -> None:
        super().__init__()
        full = full_mlp_parameters()
        shard = slice(rank * HIDDEN // world_size, (rank + 1) * HIDDEN // world_size)
        self.w1 = torch.nn.Parameter(full["w1"][shard].clone())
        self.b1 = torch.nn.Parameter(full["b1"][shard].clone())
        self.w2 = torch.nn.Parameter(full["w2"][:, shard].clone())
        self.b2 = torch.nn.Parameter(full["b2"].clone())

    def forward(self, x):
        h = F.gelu(F.linear(x, self.w1, self.b1))
        partial = F.linear(h, self.w2)
        return fc.all_reduce(partial, "sum", dist.group.WORLD) + self.b2


def single_process_mlp(x, p):
    return F.linear(F.gelu(F.linear(x, p["w1"], p["b1"])), p["w2"], p["b2"])


def train_tensor_parallel(rank: int, world_size: int, device: str = "cpu") -> dict[str, object]:
    """3 SGD steps through thunderviz.jit. Each rank's loss is 1/world_size of the total: the
    gradients of functional collectives are those of the sum of the ranks' losses. The
    replicated bias's gradient is summed over ranks, as for any replicated parameter."""
    model = ColumnRowParallelMLP(rank, world_size).to(device)
    jm = tv.jit(model)
    x, target = (t.to(device) for t in mlp_batch())
    losses = []
    for _ in range(STEPS):
        model.zero_grad()
        loss = F.mse_loss(jm(x), target) / world_size
        loss.backward()
        dist.all_reduce(model.b2.grad)
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
        losses.append(loss.detach() * world_size)
    backward = str(tv.last_backward_traces(jm)[0])
    return {
        "losses": torch.stack(losses).cpu(),
        "state": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "backward": backward,
    }


def train_tensor_parallel_cuda(rank: int, world_size: int) -> dict[str, object]:
    """The same training on this rank's GPU, the collectives through NCCL."""
    return train_tensor_parallel(rank, world_size, device=f"cuda:{rank}")


def train_single_process() -> dict[str, object]:
    p = {k: v.clone().requires_grad_(True) for k, v in full_mlp_parameters().items()}
    x, target = mlp_batch()
    losses = []
    for _ in range(STEPS):
        loss = F.mse_loss(single_process_mlp(x, p), target)
        grads = torch.autograd.grad(loss, list(p.values()))
        with torch.no_grad():
            for v, g in zip(p.values(), grads, strict=True):
                v -= LR * g
        losses.append(loss.detach())
    return {"losses": torch.stack(losses), "state": {k: v.detach() for k, v in p.items()}}


# --- what is refused, by name ---------------------------------------------------------------


def max_all_reduce(x):
    return fc.all_reduce(x * 2.0, "max", dist.group.WORLD).sum()


def legacy_reduce(x):
    y = x * 2.0
    dist.reduce(y, dst=0)  # no functional collective: c10d.reduce_ underneath
    return y


def refusals(rank: int, world_size: int) -> dict[str, str]:
    messages = {}
    x = _x(rank, 3).requires_grad_(True)
    with torch.no_grad():  # the forward of a max all-reduce traces and runs
        torch.testing.assert_close(
            tv.trace(max_all_reduce, x).python_callable()(x), max_all_reduce(x)
        )
    for name, fn, error in (
        ("max", max_all_reduce, tv.AutodiffError),
        ("legacy", legacy_reduce, tv.CaptureError),
    ):
        try:
            tv.vjp(fn)((x,), [torch.ones(())] if name == "max" else [torch.ones(3)])
        except error as e:
            messages[name] = str(e)
    return messages


def run_all(rank: int, world_size: int) -> dict[str, object]:
    """Every check above in one spawn (starting ranks is the slow part)."""
    return {
        "functional_trace": check_functional_vjps(rank, world_size),
        "avg_and_broadcast": check_avg_and_broadcast(rank, world_size),
        "in_place_trace": check_in_place_calls(rank, world_size),
        "tensor_parallel": train_tensor_parallel(rank, world_size),
        "refusals": refusals(rank, world_size),
    }

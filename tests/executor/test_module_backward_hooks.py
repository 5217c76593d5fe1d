"""Full backward hooks and pre-hooks of submodules (`register_full_backward_hook`,
`register_full_backward_pre_hook`) under `jit` and in the debugger: each hook sees the
`grad_input` and `grad_output` eager's sees, in eager's order, on every backward, and what it
returns replaces them as in eager. Before, `jit` refused them and a Session failed inside
torch's hook setup. Every case against eager in float64, over three calls."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import transformers
from torch import nn

import thunderviz as tv

F64 = dict(dtype=torch.float64)


def _shapes_and_values(grads):
    return tuple(None if g is None else g.detach().clone() for g in grads)


def _recording(log: list, name: str, scale: float | None = None):
    """A hook that logs what it saw, and scales grad_input where `scale` is given."""

    def hook(module, grad_input, grad_output):
        log.append((name, _shapes_and_values(grad_input), _shapes_and_values(grad_output)))
        if scale is None:
            return None
        return tuple(None if g is None else g * scale for g in grad_input)

    return hook


def _pre_recording(log: list, name: str, scale: float | None = None):
    def pre_hook(module, grad_output):
        log.append((name, _shapes_and_values(grad_output)))
        if scale is None:
            return None
        return tuple(None if g is None else g * scale for g in grad_output)

    return pre_hook


class Residual(nn.Module):
    """A hooked block inside a residual, a two-input module (one input without gradient),
    a module called twice and one returning a tuple of which the loss reads one part."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4, **F64)
        self.block = nn.Sequential(nn.Linear(4, 8, **F64), nn.GELU(), nn.Linear(8, 4, **F64))
        self.gate = Gate()
        self.twice = nn.Linear(4, 4, **F64)
        self.split = Split()

    def forward(self, x, mask):
        h = x + self.block(self.norm(x))
        h = self.gate(h, mask)
        h = self.twice(torch.tanh(self.twice(h)))
        used, _unused = self.split(h)
        return used.pow(2).sum()


class Gate(nn.Module):
    def forward(self, h, mask):
        return h * mask


class Split(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 8, **F64)

    def forward(self, h):
        a, b = self.lin(h).chunk(2, dim=-1)
        return a, b


HOOKS = {
    "observe": lambda log: {
        "block": _recording(log, "block"),
        "gate": _recording(log, "gate"),
        "twice": _recording(log, "twice"),
        "split": _recording(log, "split"),
    },
    "scale grad_input": lambda log: {
        "block": _recording(log, "block", 3.0),
        "twice": _recording(log, "twice", 0.5),
    },
    "pre-hooks scale grad_output": lambda log: {
        ("pre", "block"): _pre_recording(log, "block", 2.0),
        ("pre", "split"): _pre_recording(log, "split", -1.0),
        "block": _recording(log, "block"),
    },
}


def _hooked(model: nn.Module, hooks: dict) -> nn.Module:
    for where, fn in hooks.items():
        if isinstance(where, tuple):
            model.get_submodule(where[1]).register_full_backward_pre_hook(fn)
        else:
            model.get_submodule(where).register_full_backward_hook(fn)
    return model


def _assert_logs_equal(ours: list, eager: list) -> None:
    assert [entry[0] for entry in ours] == [entry[0] for entry in eager]
    for got, want in zip(ours, eager, strict=True):
        for g_part, w_part in zip(got[1:], want[1:], strict=True):
            assert len(g_part) == len(w_part), got[0]
            for g, w in zip(g_part, w_part, strict=True):
                assert (g is None) == (w is None), got[0]
                if w is not None:
                    torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hooks", HOOKS)
def test_submodule_backward_hooks_under_jit_see_and_change_what_eagers_do(hooks):
    torch.manual_seed(0)
    base = Residual()
    eager_log: list = []
    jit_log: list = []
    eager = _hooked(copy.deepcopy(base), HOOKS[hooks](eager_log))
    ours = _hooked(copy.deepcopy(base), HOOKS[hooks](jit_log))
    jitted = tv.jit(ours)
    mask = torch.tensor([1.0, 0.0, 1.0, 1.0], **F64)
    for step in range(3):
        x = torch.randn(3, 4, **F64, generator=torch.Generator().manual_seed(step))
        xe, xo = x.clone().requires_grad_(), x.clone().requires_grad_()
        eager(xe, mask).backward()
        jitted(xo, mask).backward()
        torch.testing.assert_close(xo.grad, xe.grad, rtol=1e-12, atol=1e-12)
        for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
        _assert_logs_equal(jit_log, eager_log)  # every backward, in eager's order
        eager.zero_grad()
        ours.zero_grad()
    assert jitted.cache_misses == 1


def test_a_hook_on_a_module_whose_inputs_need_no_gradient_fires_with_none():
    """Eager calls it when the outputs' gradients are known, with None for grad_input."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 4, **F64), nn.Tanh(), nn.Linear(4, 1, **F64))
    logs: dict[str, list] = {"eager": [], "jit": []}
    models = {}
    for side in logs:
        models[side] = copy.deepcopy(base)
        models[side][0].register_full_backward_hook(_recording(logs[side], "first"))
    x = torch.randn(2, 4, **F64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own warning about exactly this case
        models["eager"](x).sum().backward()
        tv.jit(models["jit"])(x).sum().backward()
    assert logs["eager"][0][1] == (None,)
    _assert_logs_equal(logs["jit"], logs["eager"])


def test_removing_a_hook_retraces_and_it_runs_no_more():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4, **F64), nn.Tanh(), nn.Linear(4, 1, **F64))
    log: list = []
    handle = model[2].register_full_backward_hook(_recording(log, "last"))
    jitted = tv.jit(model)
    x = torch.randn(2, 4, **F64, requires_grad=True)
    jitted(x).sum().backward()
    handle.remove()
    jitted(x).sum().backward()
    assert len(log) == 1 and jitted.cache_misses == 2
    assert not model[2]._backward_hooks  # the user's dict as they left it


def test_the_debugger_runs_submodule_backward_hooks_as_eager_does():
    torch.manual_seed(0)
    base = Residual()
    eager_log: list = []
    session_log: list = []
    eager = _hooked(copy.deepcopy(base), HOOKS["scale grad_input"](eager_log))
    traced = _hooked(copy.deepcopy(base), HOOKS["scale grad_input"](session_log))
    x = torch.randn(3, 4, **F64, requires_grad=True)
    mask = torch.ones(4, **F64)
    eager(x, mask).backward()
    grads = tv.Session(traced, x, mask).grads()
    torch.testing.assert_close(grads["x"], x.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads["block_0_weight"], eager.block[0].weight.grad)
    assert [e[0] for e in session_log[-len(eager_log) :]] == [e[0] for e in eager_log]


def test_hooks_on_every_block_of_a_hugging_face_gpt2_record_eagers_gradient_norms():
    config = transformers.GPT2Config(
        vocab_size=50, n_embd=16, n_layer=2, n_head=2, n_positions=16, bos_token_id=0,
        eos_token_id=0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    base = transformers.GPT2LMHeadModel(config).double().eval()
    norms: dict[str, list] = {"eager": [], "jit": []}
    models = {}
    for side, seen in norms.items():
        models[side] = copy.deepcopy(base)
        for i, block in enumerate(models[side].transformer.h):
            block.mlp.register_full_backward_hook(
                lambda m, gi, go, i=i, seen=seen: seen.append((i, go[0].norm().item()))
            )
    ids = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(0))
    models["eager"](ids, labels=ids).loss.backward()
    tv.jit(models["jit"])(ids, labels=ids).loss.backward()
    assert [i for i, _ in norms["jit"]] == [i for i, _ in norms["eager"]] == [1, 0]
    for (_, ours), (_, theirs) in zip(norms["jit"], norms["eager"], strict=True):
        assert ours == pytest.approx(theirs, rel=1e-10)


class AuxHead(nn.Module):
    """Returns (main, aux): the loss reads main only, so aux's own layer gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Linear(4, 4, **F64)
        self.aux = nn.Linear(4, 4, **F64)

    def forward(self, h):
        return self.main(h), self.aux(h)


def test_an_output_the_loss_does_not_read_gives_its_layer_none_as_in_eager():
    """None, not zeros: AdamW's weight decay moves a zero gradient and skips a None one."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 4, **F64), AuxHead())
    x = torch.randn(3, 4, **F64)
    for side in ("eager", "jit"):
        model = copy.deepcopy(base)
        model[1].register_full_backward_hook(lambda m, gi, go: None)
        run = model if side == "eager" else tv.jit(model)
        run(x)[0].pow(2).sum().backward()
        assert model[1].aux.weight.grad is None, side
        assert model[1].main.weight.grad is not None, side

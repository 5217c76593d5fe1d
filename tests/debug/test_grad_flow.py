"""Gradient flow: statuses for each kind of forward tensor, and the gradients of
intermediate forward tensors against torch.autograd's (`retain_grad` on a replay)."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import thunderviz as tv
from tests.debug.models import FlowZoo, ResidualMLP
from thunderviz.core.proxies import Proxy
from thunderviz.debug import BackwardStepper, Session, cotangent_map, grad_flow, trace_arg_values
from thunderviz.models import GPT, GPTConfig


def _autograd_intermediate_grads(forward, values):
    """Replay the forward trace's top-level calls eagerly under torch.autograd (the torch
    functions themselves, no thunderviz rules) and return every tensor's .grad by name."""
    env = {}
    for p, v in zip(forward.flat_args, values, strict=True):
        if isinstance(v, torch.Tensor) and v.is_floating_point() and p.requires_grad:
            v = v.detach().clone().requires_grad_(True)
        env[p.name] = v
    env.update(forward.constants)

    def bind(pattern, value):
        if isinstance(pattern, Proxy):
            env[pattern.name] = value
        elif isinstance(pattern, (tuple, list)):
            for p, v in zip(pattern, value, strict=True):
                bind(p, v)

    def run(bsym):
        if bsym.executes_subsymbols:
            for sub in bsym.subsymbols:
                run(sub)
            return
        read = lambda x: env[x.name] if isinstance(x, Proxy) else x  # noqa: E731
        out = bsym.sym.fn(*pytree.tree_map(read, bsym.args), **pytree.tree_map(read, bsym.kwargs))
        bind(bsym.output, out)

    with torch.enable_grad():
        for b in forward.bound_symbols:
            run(b)
        for v in env.values():
            if isinstance(v, torch.Tensor) and v.requires_grad and not v.is_leaf:
                v.retain_grad()
        (loss,) = [env[p.name] for p in forward.flat_outputs]
        loss.backward()
    return {n: v.grad for n, v in env.items() if isinstance(v, torch.Tensor) and v.requires_grad}


@pytest.mark.parametrize("which", ["residual_mlp", "gpt"])
def test_cotangent_of_every_forward_tensor_matches_autograd(which):
    torch.manual_seed(0)
    if which == "residual_mlp":
        m = ResidualMLP().double()
        args = (torch.randn(5, 8, dtype=torch.float64, requires_grad=True),)
    else:
        m = GPT(GPTConfig(vocab_size=30, block_size=8, n_layer=2, n_head=2, d_model=16)).double()
        idx = torch.randint(0, 30, (2, 8))
        args = (idx, idx)
    forward = tv.trace(m, *args)
    result = tv.autodiff(forward)
    values = trace_arg_values(forward, m, args)
    stepper = BackwardStepper(result, values)
    stepper.finish()
    mapping = cotangent_map(result)
    reference = _autograd_intermediate_grads(forward, values)
    checked = 0
    for name, ref in reference.items():
        if ref is None:
            continue
        assert name in mapping, f"no cotangent found for {name}"
        torch.testing.assert_close(
            stepper.value(mapping[name]),
            ref,
            rtol=1e-9,
            atol=1e-12,
            msg=lambda msg, n=name: f"gradient of {n}: {msg}",
        )
        checked += 1
    assert checked > len(forward.flat_args)  # intermediates too, not just parameters
    flow = grad_flow(result, stepper)
    for name, ref in reference.items():
        if ref is not None and torch.any(ref != 0):
            assert flow[name]["status"] == "ok"
            assert flow[name]["norm"] == pytest.approx(float(ref.norm()), rel=1e-9)


@pytest.fixture(scope="module")
def zoo():
    torch.manual_seed(0)
    m = FlowZoo()
    session = Session(m, torch.randn(3, 4), torch.tensor([0, 2]), record_transforms=False)
    session.record_backward()
    return session, session.grad_flow()


def _produced_by(session, sym_id):
    for b in session.forward.bound_symbols:
        if b.sym.id == sym_id:
            return [p.name for p in b.flat_tensor_outs]
    raise AssertionError(f"no {sym_id} in the forward trace")


def test_statuses_of_parameters_and_inputs(zoo):
    session, flow = zoo
    assert flow["frozen_weight"]["status"] == "no_grad"  # requires_grad=False
    assert flow["frozen_bias"]["status"] == "no_grad"
    assert flow["unused_weight"]["status"] == "unused"  # never called
    assert flow["unused_bias"]["status"] == "unused"
    assert flow["idx"]["status"] == "integer"
    assert flow["x"]["status"] == "no_grad"  # an input passed without requires_grad
    assert flow["a_weight"]["status"] == "ok" and flow["a_weight"]["norm"] > 0
    # sqrt(0) * 0: torch.autograd gives NaN as well
    assert flow["scale"]["status"] == "nan" and flow["scale"]["norm"] == "nan"
    ref = session.autograd_reference()
    assert torch.isnan(ref["scale"]).all()
    assert ref["unused_weight"] is None and ref["frozen_weight"] is None


def test_statuses_of_detached_and_no_grad_branches(zoo):
    session, flow = zoo
    (detached,) = _produced_by(session, "torch.Tensor.detach")
    assert flow[detached]["status"] == "detached"
    (times_two,) = _produced_by(session, "torch.Tensor.mul")  # h.detach() * 2
    assert flow[times_two]["status"] == "detached"
    no_grad_linear = next(b for b in session.forward.bound_symbols if b.module_path == "nograd")
    assert flow[no_grad_linear.output.name]["status"] == "detached"
    (sqrt_out,) = _produced_by(session, "torch.sqrt")
    assert flow[sqrt_out]["status"] == "zero"  # multiplied by 0.0 afterwards
    statuses = {e["status"] for e in flow.values()}
    assert statuses <= {"ok", "zero", "nan", "inf", "no_grad", "unused", "detached", "integer"}


def test_grad_flow_from_given_gradients_and_inf():
    torch.manual_seed(0)
    m = ResidualMLP()
    result = tv.autodiff(tv.trace(m, torch.randn(2, 8)))
    flow = grad_flow(
        result, {"fc1_weight": torch.full((16, 8), float("inf")), "fc2_weight": torch.zeros(16, 16)}
    )
    assert flow["fc1_weight"] == {"norm": "inf", "status": "inf"}
    assert flow["fc2_weight"] == {"norm": 0.0, "status": "zero"}
    assert flow["head_weight"]["status"] == "unused"  # nothing given for it

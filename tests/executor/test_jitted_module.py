"""`tv.jit(module)` is itself a module that can stand where the module stood
(`model.encoder = tv.jit(model.encoder)`): the model keeps the encoder's parameters for its
optimizer, its state-dict keys for checkpoints, and train()/eval()/to() reach it. Training
is compared step by step with the untouched eager model (float64, to 1e-12)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

import thunderviz as tv

F64 = dict(dtype=torch.float64)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Tanh())
        self.head = nn.Linear(8, 2)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        return (self.head(self.encoder(x)) * self.scale).sum()


def test_a_jitted_submodule_trains_in_its_model_as_the_eager_one():
    torch.manual_seed(0)
    eager = Net().double()
    model = copy.deepcopy(eager)
    keys = list(model.state_dict())
    model.encoder = tv.jit(model.encoder)
    assert isinstance(model.encoder, nn.Module)
    assert list(model.state_dict()) == keys  # a checkpoint's keys, as before
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, eager)]
    for step in range(4):
        if step == 2:
            model.eval(), eager.eval()  # dropout off, in the jitted encoder too
        x = torch.randn(3, 4, **F64)
        for m, opt in zip((model, eager), opts, strict=True):
            torch.manual_seed(step)
            m(x).backward()
            opt.step()
            opt.zero_grad()
        for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-12, msg=name)
    assert not model.encoder.module.training
    model.load_state_dict(eager.state_dict())  # and a checkpoint loads into it
    model.float()  # moved as the rest of the model
    assert model.encoder.module[0].weight.dtype == torch.float32


def test_hooks_on_the_jitted_module_run_as_on_any_module():
    torch.manual_seed(0)
    jitted = tv.jit(nn.Linear(3, 3).double())
    seen = []
    jitted.register_forward_hook(lambda mod, args, out: seen.append(out.detach().clone()))
    x = torch.randn(2, 3, **F64)
    out = jitted(x)
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], out.detach(), rtol=0, atol=0)


def test_a_global_forward_hook_sees_one_call_of_the_module_as_in_eager():
    torch.manual_seed(0)
    module = nn.Linear(3, 3).double()
    jitted = tv.jit(module)
    seen = []
    handle = nn.modules.module.register_module_forward_hook(lambda mod, args, out: seen.append(mod))
    try:
        jitted(torch.randn(2, 3, **F64))
    finally:
        handle.remove()
    assert seen == [module]


def test_a_model_holding_a_jitted_submodule_can_be_copied_and_saved(tmp_path):
    """An EMA copy (`copy.deepcopy`) and `torch.save` of the whole model: the copy has its
    own tensors, computes what the original does, and traces again on its first call."""
    torch.manual_seed(0)
    model = Net().double()
    model.encoder = tv.jit(model.encoder)
    model.eval()
    x = torch.randn(3, 4, **F64)
    for _ in range(3):
        model(x).backward()  # compiled, with the repeated-call check in place
    twin = copy.deepcopy(model)
    torch.testing.assert_close(twin(x), model(x), rtol=0, atol=0)
    assert twin.encoder.module is not model.encoder.module
    with torch.no_grad():
        twin.encoder.module[0].weight.add_(1.0)
    assert not torch.equal(twin(x), model(x))
    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)

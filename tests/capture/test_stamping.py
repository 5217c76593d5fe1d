"""Block stamping (capture/stamping.py): a trace (fake tensors, or real ones as jit traces)
with repeated blocks written out from a proven recording is identical to the one recorded
block by block: the printed program, every bound symbol at every level, module paths and
source lines. Blocks that could record differently are recorded for real. Every test runs
with fake and with real tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import transformers

import thunderviz as tv
from tests.helpers import assert_same_state, fingerprint, jitted_twin, program_text
from thunderviz.capture import stamping
from thunderviz.capture.repeated_blocks import repeated_blocks
from thunderviz.models import GPT, GPTConfig

FAKE: list[bool] = []  # the mode of the test running


@pytest.fixture(autouse=True, params=[True, False], ids=["fake", "real"])
def fake(request):
    FAKE[:] = [request.param]
    yield request.param
    FAKE.clear()


def stamped_and_recorded(monkeypatch, fn, *args, **kwargs) -> tuple[list[str], tv.Trace, tv.Trace]:
    """(paths of the blocks stamped, the stamped trace, the trace recorded block by block)."""
    stamped: list[str] = []
    stamp = stamping._Stamper._stamp

    def counting(self, recording, call, run):
        out = stamp(self, recording, call, run)
        if out is not stamping._MISMATCH:
            stamped.append(call.path)
        return out

    with monkeypatch.context() as m:
        m.setattr(stamping._Stamper, "_stamp", counting)
        torch.manual_seed(0)
        fast = tv.trace(fn, *args, fake=FAKE[0], **kwargs)
    with monkeypatch.context() as m:
        m.setattr(stamping, "repeated_blocks", lambda root: [])
        torch.manual_seed(0)
        full = tv.trace(fn, *args, fake=FAKE[0], **kwargs)
    assert program_text(fast) == program_text(full)
    assert fingerprint(fast) == fingerprint(full)
    assert fast.output_spec == full.output_spec
    assert repr(fast.output) == repr(full.output)
    return stamped, fast, full


def ids(vocab=100):
    return torch.randint(0, vocab, (2, 16))


def hf_gpt2(use_cache):
    cfg = transformers.GPT2Config(
        n_layer=5, n_embd=32, n_head=4, vocab_size=100, n_positions=16, use_cache=use_cache
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def hf_llama():
    cfg = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(cfg)


def hf_bert(training):
    cfg = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=5,
        num_attention_heads=4,
    )
    return transformers.BertModel(cfg).train(training)


@pytest.mark.parametrize(
    "make, prefix",
    [
        (lambda: hf_gpt2(False), "transformer.h."),
        (hf_llama, "model.layers."),
        (lambda: hf_bert(False), "encoder.layer."),
        (lambda: hf_bert(True), "encoder.layer."),  # dropout: random ops, training mode
    ],
    ids=["gpt2", "llama", "bert_eval", "bert_train"],
)
def test_hf_models_stamped_identically(monkeypatch, make, prefix):
    torch.manual_seed(0)
    model = make()
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, ids())
    # blocks 0-1 recorded (the first, which filled the decomposition cache, proves the
    # second without the names it drew for it), the rest written out, though each attention
    # holds its own layer index (unread without a KV cache)
    assert stamped == [f"{prefix}2", f"{prefix}3", f"{prefix}4"]
    assert any(getattr(m, "layer_idx", None) == 4 for m in model.modules())


@pytest.mark.parametrize("training, dropout", [(False, 0.0), (True, 0.0), (True, 0.1)])
def test_our_gpt_stamped_identically(monkeypatch, training, dropout):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=100, block_size=16, n_layer=6, n_head=4, d_model=32, dropout=dropout)
    ).train(training)
    idx = ids()
    stamped, trace, _ = stamped_and_recorded(monkeypatch, model, idx, idx)
    assert stamped == ["blocks.2", "blocks.3", "blocks.4", "blocks.5"]
    assert {
        b.module_path.split(".")[1] for b in trace.walk() if b.module_path.startswith("blocks.")
    } == {str(i) for i in range(6)}


def test_a_kv_cache_argument_is_not_stamped(monkeypatch):
    stamped, _, _ = stamped_and_recorded(monkeypatch, hf_gpt2(True), ids())
    assert stamped == []


class Block(nn.Module):
    def __init__(self, width: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(torch.tanh(self.fc(x))) + x


class Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class Wide(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + x


def test_blocks_that_differ_are_recorded(monkeypatch):
    # blocks 0-2 are recorded (block 2 proves the recording), the odd block 3 is recorded
    # (another signature), the rest are written out
    model = Stack([Block(8), Block(8), Block(8), Block(8, dropout=0.5), Block(8), Block(8)]).train()
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.4", "blocks.5"]  # Dropout's p is part of the signature
    model = Stack([Wide(8, 16), Wide(8, 16), Wide(8, 16), Wide(8, 32), Wide(8, 16)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.4"]  # block 3's parameters have other shapes
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 3, 8))
    assert stamped == ["blocks.4"]
    model = Stack([Block(8), Block(8), Block(8), Block(8)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3"]


def test_blocks_shaped_like_no_other_are_left_alone(monkeypatch):
    """A ResNet's stages share a class but not their parameters' shapes: no call signature
    of one can be another's, so none is shadowed and recorded for stamping (which costs
    each block call); blocks shaped alike still are, and the trace is the unstamped one."""
    model = Stack([Wide(8, 16), Wide(8, 32), Wide(8, 16), Wide(8, 64)])
    assert repeated_blocks(model) == [model.blocks[0], model.blocks[2]]
    shadowed: list[str] = []
    record = stamping._Stamper._record

    def recording(self, key, call, *rest):
        shadowed.append(call.path)
        return record(self, key, call, *rest)

    monkeypatch.setattr(stamping._Stamper, "_record", recording)
    stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert shadowed == ["blocks.0", "blocks.2"]


def test_a_block_with_a_hook_is_recorded(monkeypatch):
    model = Stack([Block(8) for _ in range(5)])
    model.blocks[4].fc.register_forward_hook(lambda m, i, o: o * 2)
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3"]


SCALE = torch.ones(8)


class ReadsGlobal(Block):
    def forward(self, x):
        return self.fc(x) * SCALE


class MutatesInput(Block):
    def forward(self, x):
        x.mul_(2)
        return self.fc(x)


class Scaled(Block):
    def __init__(self, width: int, scale: float) -> None:
        super().__init__(width)
        self.scale = scale
        self.unread = scale

    def forward(self, x):
        return self.fc(x) * self.scale


class SetsAttribute(Block):
    def forward(self, x):
        self.seen = x.shape[0]
        return self.fc(x)


def test_attributes_read_must_agree_unread_ones_may_differ(monkeypatch):
    model = Stack([Scaled(8, 1.0), Scaled(8, 1.0), Scaled(8, 1.0), Scaled(8, 2.0), Scaled(8, 1.0)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.4"]
    model = Stack([Scaled(8, 1.0) for _ in range(5)])
    for i, block in enumerate(model.blocks):
        block.unread = i
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3", "blocks.4"]


def test_a_block_setting_an_attribute_is_recorded(monkeypatch):
    model = Stack([SetsAttribute(8) for _ in range(5)])
    stamped, trace, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == []
    # each block's write is in the trace (jit makes it after every run); tracing left the
    # modules as they were
    assert trace.meta["attribute_values"] == [(f"blocks.{i}", "seen", 2) for i in range(5)]
    assert not any(hasattr(block, "seen") for block in model.blocks)


FLAG = False
CALLS = 0


class ReadsFlag(Block):
    def forward(self, x):
        return self.fc(x) * 2 if FLAG else self.fc(x)


class FlipsFlag(Stack):
    def forward(self, x):
        global FLAG
        for i, block in enumerate(self.blocks):
            FLAG = i == 4
            x = block(x)
        FLAG = False
        return x


class CountsCalls(Block):
    def forward(self, x):
        global CALLS
        CALLS += 1
        return self.fc(x)


def test_globals_read_and_written(monkeypatch):
    model = FlipsFlag([ReadsFlag(8) for _ in range(6)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3", "blocks.5"]  # block 4 ran with the flag set: recorded
    model = Stack([CountsCalls(8) for _ in range(5)])
    calls = CALLS
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == [] and CALLS == calls + 10


FLAGS = {"double": False}


class ReadsFlagDict(Block):
    def forward(self, x):
        return self.fc(x) * 2 if FLAGS["double"] else self.fc(x)


class FlipsFlagDict(Stack):
    def forward(self, x):
        for i, block in enumerate(self.blocks):
            FLAGS["double"] = i == 4
            x = block(x)
        FLAGS["double"] = False
        return x


def test_a_flag_dict_changed_between_blocks_is_seen(monkeypatch):
    # a flat dict is read by value: block 4 ran with the flag set, so it is recorded (its
    # ops differ, with the same output shapes a replay would have accepted)
    model = FlipsFlagDict([ReadsFlagDict(8) for _ in range(6)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3", "blocks.5"]


class KernelFunc(nn.Module):
    """Holds nothing of its own (transformers' per-attention `_kernel_funcs` modules)."""

    def forward(self, x):
        return torch.tanh(x)


class ReadsKernelFuncs(Block):
    def __init__(self, width: int) -> None:
        super().__init__(width)
        self._kernel_funcs = {"act": KernelFunc()}

    def forward(self, x):
        return self._kernel_funcs["act"](self.fc(x)) + x


class ScaledKernelFunc(KernelFunc):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x) * self.scale


def test_a_dict_of_stateless_modules_per_block_does_not_tell_blocks_apart(monkeypatch):
    model = Stack([ReadsKernelFuncs(8) for _ in range(5)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3", "blocks.4"]
    # a module with an attribute of its own is read by identity: nothing is stamped
    for block in model.blocks:
        block._kernel_funcs = {"act": ScaledKernelFunc(1.0)}
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == []


class ReturnsView(Block):
    def forward(self, x):
        return self.fc(x)[:, :4].expand(2, 4)


@pytest.mark.parametrize("cls", [ReadsGlobal, MutatesInput])
def test_blocks_touching_outside_state_are_recorded(monkeypatch, cls):
    model = Stack([cls(8) for _ in range(5)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == []


def test_a_block_returning_a_view_is_recorded(monkeypatch):
    model = nn.ModuleList([ReturnsView(8) for _ in range(5)])

    def run(x):
        return [block(x) for block in model]

    stamped, _, _ = stamped_and_recorded(monkeypatch, run, torch.randn(2, 8))
    assert stamped == []  # a function, not a module: nothing is stamped
    wrapper = Stack([ReturnsView(4) for _ in range(4)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, wrapper, torch.randn(2, 4))
    assert stamped == []


def test_forward_is_restored(monkeypatch):
    model = Stack([Block(8) for _ in range(5)])
    stamped, _, _ = stamped_and_recorded(monkeypatch, model, torch.randn(2, 8))
    assert stamped == ["blocks.3", "blocks.4"]
    assert all("forward" not in b.__dict__ for b in model.blocks)
    with pytest.raises(tv.CaptureError):
        tv.trace(model, torch.randn(2, 3), fake=FAKE[0])
    assert all("forward" not in b.__dict__ for b in model.blocks)


class _Calls:
    n = 0


CALLED = _Calls()  # an object: read by identity, its count is no change stamping can see


class ReturnsFlag(Block):
    """Returns a Python value the recordings saw equal, the fourth call another (the object
    the forward counts in is one object: not a change stamping can see before the run)."""

    def forward(self, x):
        CALLED.n += 1
        return self.fc(x) + x, CALLED.n >= 4


class UnpacksFlags(Stack):
    def forward(self, x):
        flags = []
        for block in self.blocks:
            x, flag = block(x)
            flags.append(flag)
        return x, flags


def test_a_replay_returning_otherwise_is_recorded(monkeypatch, fake):
    if fake:
        pytest.skip("blocks run eagerly only in real traces")
    model = UnpacksFlags([ReturnsFlag(8) for _ in range(5)])
    x = torch.randn(2, 8)
    outcomes: list[tuple[str, bool]] = []
    stamp = stamping._Stamper._stamp

    def counting(self, recording, call, run):
        out = stamp(self, recording, call, run)
        outcomes.append((call.path, out is not stamping._MISMATCH))
        return out

    with monkeypatch.context() as m:
        m.setattr(stamping._Stamper, "_stamp", counting)
        CALLED.n = 0
        trace = tv.trace(model, x)
        calls = CALLED.n
    with monkeypatch.context() as m:
        m.setattr(stamping, "repeated_blocks", lambda root: [])
        CALLED.n = 0
        full = tv.trace(model, x)
    # blocks 3 and 4 return True when run eagerly, not the proof's False: undone and
    # recorded (a second call each); a block before them may be written out
    assert outcomes[-2:] == [("blocks.3", False), ("blocks.4", False)]
    assert all(ok for _, ok in outcomes[:-2])
    assert calls == 5 + 2
    assert trace.output[1] == full.output[1] == [False, False, False, True, True]
    assert program_text(trace) == program_text(full)
    assert fingerprint(trace) == fingerprint(full)


class SharedStack(nn.Module):
    """A ModuleList holding block objects at the positions `order` names (one block may be
    at several: a block applied twice)."""

    def __init__(self, order: list[int]) -> None:
        super().__init__()
        made = [nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU()) for _ in range(3)]
        self.blocks = nn.ModuleList([made[i] for i in order])
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x).sum()


@pytest.mark.parametrize("order", [[0, 0], [0, 1, 0], [0, 1, 2, 1, 0, 2]])
def test_a_block_at_several_positions_trains_as_eager(order):
    """The same block object at two positions: traced, stamped or not, its gradients are the
    sum of its applications' as in eager (they were None: tracing left the model holding its
    stand-ins, core/module_state.py)."""
    eager, ours, jitted = jitted_twin(lambda: SharedStack(order))
    for step in range(2):
        x = torch.randn(4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(step))
        eager.zero_grad(set_to_none=True)
        ours.zero_grad(set_to_none=True)
        eager(x).backward()
        jitted(x).backward()
        assert_same_state(ours, eager)

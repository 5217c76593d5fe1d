"""Forward traces of real models run to exactly eager's outputs, and tracing changes nothing."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from thunderviz.core import BsymTag
from thunderviz.models import CNN, GPT, MLP, GPTConfig
from thunderviz.prims import is_core_aten


def run_trace(trace: tv.Trace, module: nn.Module, *inputs, **kw):
    return trace.python_callable()(*inputs, *module.parameters(), *module.buffers(), **kw)


def leaves_are_core(trace: tv.Trace) -> list[str]:
    """Ids of leaf subsymbols that are neither Core ATen nor marked as non-core."""
    bad = []
    for top in trace.bound_symbols:
        for b in top.walk():
            if b is top or b.subsymbols:
                continue
            op = b.sym.fn
            if (
                isinstance(op, torch._ops.OpOverload)
                and not is_core_aten(op)
                and BsymTag.NON_CORE not in b.tags
            ):
                bad.append(b.sym.id)
    return bad


def test_mlp_forward_is_bit_exact_and_prints_runnable_python():
    torch.manual_seed(0)
    m = MLP()
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 2, 3])
    tr = tv.trace(m, x, y)
    assert torch.equal(run_trace(tr, m, x, y), m(x, y))
    # str(trace) is a module of valid Python that defines a runnable `forward`
    namespace: dict = {}
    exec(compile(str(tr), "<trace>", "exec"), namespace)
    assert torch.equal(namespace["forward"](x, y, *m.parameters()), m(x, y))
    assert [p.name for p in tr.args] == [
        "x",
        "target",
        "fc1_weight",
        "fc1_bias",
        "fc2_weight",
        "fc2_bias",
        "head_weight",
        "head_bias",
    ]
    linear = tr.bound_symbols[0]
    assert linear.sym.id == "torch.nn.functional.linear"
    assert linear.module_path == "fc1"
    assert linear.source.filename.endswith("thunderviz/models.py")
    assert "self.fc1(x)" in linear.source.code
    assert {s.sym.id for s in linear.subsymbols} >= {"aten.addmm.default"}
    assert not leaves_are_core(tr)


def test_print_depth_controls_nested_subsymbol_comments():
    m = MLP()
    tr = tv.trace(m, torch.randn(2, 8))
    shallow, deep = tr.python(print_depth=0), tr.python(print_depth=2)
    assert "aten.addmm" not in shallow and "# t" in deep and "aten.addmm" in deep
    assert "cpu f32[2, 16]" in shallow  # a shape comment on every line


@pytest.mark.parametrize("training", [True, False])
def test_cnn_with_batchnorm_matches_eager_including_running_stats(training):
    torch.manual_seed(0)
    model = CNN().train(training)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([1, 2, 3, 4])
    tr = tv.trace(model, x, y)
    eager = copy.deepcopy(model)
    ref = eager(x, y)
    got = run_trace(tr, model, x, y)  # runs on `model`'s own buffers, as eager would
    assert torch.equal(got, ref)
    for (name, b_ours), (_, b_ref) in zip(
        model.named_buffers(), eager.named_buffers(), strict=True
    ):
        assert torch.equal(b_ours, b_ref), name
    ops = {b.sym.id for b in tr.walk()}
    assert {
        "torch.nn.functional.max_pool2d",
        "torch.nn.functional.avg_pool2d",
        "torch.nn.functional.conv2d",
    } <= ops
    assert not leaves_are_core(tr)


def test_gpt_with_sdpa_and_causal_mask_is_bit_exact():
    torch.manual_seed(0)
    g = GPT(GPTConfig(n_layer=2, d_model=64, n_head=4, vocab_size=100, block_size=32))
    idx = torch.randint(0, 100, (2, 16))
    tr = tv.trace(g, idx, idx)
    assert torch.equal(run_trace(tr, g, idx, idx), g(idx, idx))
    ids = [b.sym.id for b in tr.bound_symbols]
    assert ids.count("torch.nn.functional.scaled_dot_product_attention") == 2
    attn = next(b for b in tr.bound_symbols if "scaled_dot" in b.sym.id)
    assert attn.module_path == "blocks.0.attn"
    # weight tying: the tied head reads the embedding's proxy, which appears once in args
    assert [p.name for p in tr.args].count("wte_weight") == 1
    assert not leaves_are_core(tr)


def _hf_models():
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    )
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32,
        )
    )
    bert = transformers.BertForMaskedLM(
        transformers.BertConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
        )
    )
    return {"gpt2": gpt2, "llama": llama, "bert": bert}


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_hugging_face_models_with_labels_are_bit_exact(name):
    torch.manual_seed(0)
    model = _hf_models()[name].eval()
    ids = torch.randint(0, 100, (2, 8))
    kw = {"input_ids": ids, "labels": ids}
    tr = tv.trace(model, **kw)
    ref = model(**kw)
    got = run_trace(tr, model, **kw)
    assert type(got) is type(ref)
    assert torch.equal(got.loss, ref.loss) and torch.equal(got.logits, ref.logits)
    assert any("cross_entropy" in b.sym.id for b in tr.walk())
    assert not leaves_are_core(tr)


def test_tracing_has_no_side_effects():
    torch.manual_seed(0)
    model = CNN().train()
    model.conv1.weight.requires_grad_(False)  # a frozen parameter stays frozen
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 1])
    model(x, y).backward()
    before = copy.deepcopy(model.state_dict())
    grads = {
        n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()
    }
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    rng = torch.random.get_rng_state()
    x_before = x.clone()
    for fake in (False, True):
        tv.trace(model, x, y, fake=fake)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} changed"
    for n, p in model.named_parameters():
        assert p.requires_grad == flags[n]
        assert (p.grad is None) == (grads[n] is None)
        if p.grad is not None:
            assert torch.equal(p.grad, grads[n])
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert torch.equal(x, x_before)


def test_in_place_ops_and_mutation_are_functional_and_equal_eager():
    def f(x, y):
        z = x.clone()
        z.add_(y)
        z = F.relu(z, inplace=True)
        z[:, 0] = 1.0  # write through a view
        row = z[1]
        row.mul_(3)  # and through another
        w = z.masked_fill(z > 2, 0.5)
        w.masked_fill_(w < 0.1, -1.0)
        d = F.dropout(w, 0.5, training=True)  # bernoulli_ inside
        return z * 2 + w + d

    x, y = torch.randn(3, 4), torch.randn(3, 4)
    tr = tv.trace(f, x, y)
    torch.manual_seed(5)
    ref = f(x, y)
    torch.manual_seed(5)
    assert torch.equal(tr.python_callable()(x, y), ref)
    for b in tr.walk():  # the recording holds no mutating ATen op
        op = b.sym.fn
        if isinstance(op, torch._ops.OpOverload):
            assert not op._schema.is_mutable, b.sym.id
    ids = {b.sym.id for b in tr.walk()}
    assert {"aten.select_scatter.default", "aten.bernoulli.p"} <= ids


def test_mutated_inputs_are_written_back_when_the_trace_runs():
    def f(x):
        x.add_(1)
        return x * 2

    x = torch.zeros(3)
    tr = tv.trace(f, x)
    assert torch.equal(x, torch.zeros(3))  # tracing did not touch it
    out = tr.python_callable()(x)
    assert torch.equal(x, torch.ones(3)) and torch.equal(out, torch.full((3,), 2.0))
    assert tr.bound_symbols[-1].tags == {BsymTag.MUTATION_EPILOGUE}


def test_fake_tracing_a_gpt2_small_sized_model_computes_nothing():
    cfg = GPTConfig(vocab_size=50304, block_size=256, n_layer=12, n_head=12, d_model=768)
    model = GPT(cfg)
    idx = torch.randint(0, 50304, (4, 256))
    tr = tv.trace(model, idx, idx, fake=True)
    out = tr.flat_outputs[0]
    assert out.shape == () and out.dtype == torch.float32
    assert sum(1 for b in tr.bound_symbols if "scaled_dot" in b.sym.id) == 12
    assert tr.meta["fake"] is True


def test_fake_tracing_names_the_data_dependent_line():
    def f(x):
        if x.sum() > 0:  # needs a value
            return x * 2
        return x

    with pytest.raises(tv.CaptureError) as info:
        tv.trace(f, torch.randn(3), fake=True)
    msg = str(info.value)
    assert "test_capture_models.py" in msg and "if x.sum() > 0" in msg and "fake=False" in msg
    # with real tensors the same program traces (specialized on the value it saw)
    tr = tv.trace(f, torch.ones(3))
    assert any(BsymTag.DATA_DEPENDENT in b.tags for b in tr.bound_symbols)


def test_cuda_forward_is_exact_when_available():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    torch.manual_seed(0)
    g = GPT(GPTConfig(n_layer=2, d_model=64, n_head=4, vocab_size=100)).cuda()
    idx = torch.randint(0, 100, (2, 16), device="cuda")
    tr = tv.trace(g, idx, idx)
    assert tr.flat_outputs[0].device.type == "cuda"
    assert torch.equal(run_trace(tr, g, idx, idx), g(idx, idx))

"""Random draws through thunderviz.jit equal eager's under the same seed (same numbers, same
order, the backward using the mask the forward drew), and attention dropout trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.idioms_training import train_like_eager
from thunderviz.capture.rng import _draws_in_place
from thunderviz.core.builder import TraceBuilder
from thunderviz.core.proxies import NameGenerator, TensorProxy
from thunderviz.core.trace import Trace
from thunderviz.prims import aten


class _AttentionBlock(nn.Module):
    """Dropout inside multi_head_attention_forward, then nn.Dropout on a transposed tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, dropout=0.1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):  # x: (batch, seq, feature)
        h = x.transpose(0, 1)
        return self.drop(self.attn(h, h, h, need_weights=False)[0].transpose(0, 1))


def _loss(out):
    return (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum()


def test_attention_block_with_two_dropouts_trains_like_eager():
    # float64: in float32 the trace's matmul runs as bmm where eager's (with grad) runs mm,
    # so the gradients differ by rounding (~1e-5) though the masks are equal
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    train_like_eager(
        _AttentionBlock().double(), lambda step: ((x,), {}), _loss, dtype=torch.float64
    )


@pytest.mark.parametrize(
    "draw",
    [
        "bernoulli_",
        "uniform_",
        "normal_",
        "exponential_",
        "geometric_",
        "log_normal_",
        "cauchy_",
        "random_",
    ],
)
@pytest.mark.parametrize("shape", [(6, 4), (6, 40)], ids=["small", "vectorized"])
def test_in_place_draws_into_a_transposed_tensor_equal_eager(draw, shape):
    """The draw fills memory order; the trace must put each number where eager put it
    (normal_ fills tensors of 16+ elements by a vectorized path when contiguous)."""
    args = (0.3,) if draw in ("bernoulli_", "geometric_") else ()

    def fn(x):
        noise = getattr(torch.empty_like(x.t()), draw)(*args)
        return x.t() * noise

    x = torch.randn(*shape, requires_grad=True)
    jitted = tv.jit(fn)
    torch.manual_seed(7)
    eager = fn(x)
    torch.manual_seed(7)
    out = jitted(x)
    assert torch.equal(out, eager)
    g = torch.randn_like(out)
    (grad_e,) = torch.autograd.grad(eager, x, g)
    (grad_j,) = torch.autograd.grad(out, x, g)
    assert torch.equal(grad_j, grad_e)


@pytest.mark.skipif(not hasattr(torch.Tag, "inplace"), reason="torch has no Tag.inplace")
def test_the_in_place_draws_are_those_torch_tags_in_place():
    """Which random ops draw in place is read off their schemas (torch 2.11 has no
    `Tag.inplace`); where torch has the tag, the two readings agree on every random op."""
    random_ops = [
        getattr(packet, name)
        for packet in (getattr(torch.ops.aten, n, None) for n in dir(torch.ops.aten))
        if isinstance(packet, torch._ops.OpOverloadPacket)
        for name in packet.overloads()
        if torch.Tag.nondeterministic_seeded in getattr(packet, name).tags
    ]
    assert len(random_ops) > 40
    in_place = [op for op in random_ops if torch.Tag.inplace in op.tags]
    assert {str(op) for op in random_ops if _draws_in_place(op)} == {str(op) for op in in_place}
    assert "aten.bernoulli_.float" in {str(op) for op in in_place}


def test_draws_happen_in_eager_order_across_layers():
    """Several dropouts on differently laid out tensors: masks, output and gradients match."""

    def fn(x, w):
        a = F.dropout(x @ w, 0.3)
        b = F.dropout(a.transpose(0, 1), 0.5)
        return F.dropout(b.permute(1, 0) * 2, 0.2).sum(0)

    x = torch.randn(5, 7, dtype=torch.float64)
    w = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    eager = fn(x, w)
    (grad_e,) = torch.autograd.grad(eager.sum(), w)
    torch.manual_seed(3)
    out = tv.jit(fn)(x, w)
    (grad_j,) = torch.autograd.grad(out.sum(), w)
    assert torch.equal(out, eager)
    assert torch.equal(grad_j, grad_e)


def _hf_model(name: str) -> nn.Module:
    """Tiny configs, default dropout (0.1 in attention and hidden layers), training mode."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    small = dict(vocab_size=100, max_position_embeddings=32)
    if name == "bert":
        model = transformers.BertModel(
            transformers.BertConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                **small,
            ),
            add_pooling_layer=False,
        )
    elif name == "roberta":
        model = transformers.RobertaModel(
            transformers.RobertaConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                vocab_size=100,
                max_position_embeddings=34,
            ),
            add_pooling_layer=False,
        )
    elif name == "distilbert":
        model = transformers.DistilBertModel(
            transformers.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, **small)
        )
    else:
        model = transformers.T5Model(
            transformers.T5Config(
                vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2
            )
        )
    return model.train()


@pytest.mark.parametrize("name", ["bert", "roberta", "distilbert", "t5"])
def test_hf_encoders_with_attention_dropout_train_like_eager(name):
    torch.manual_seed(0)
    model = _hf_model(name)
    ids = torch.randint(3, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0  # padding: a mask tensor reaches attention
    kwargs = {"input_ids": ids, "attention_mask": mask}
    if name == "t5":
        kwargs["decoder_input_ids"] = ids[:, :5]
    jitted = train_like_eager(
        model, lambda step: ((), kwargs), lambda out: _loss(out.last_hidden_state)
    )
    assert jitted.cache_misses == 1


def test_transformer_encoder_layer_with_dropout_trains_like_eager():
    """nn.MultiheadAttention inside it reaches aten._scaled_dot_product_attention_math with
    dropout_p > 0: differentiated through the ops that draw the mask."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    train_like_eager(layer, lambda step: ((x,), {}), _loss, dtype=torch.float64)


def test_attention_dropout_output_and_gradients_equal_eager_bit_for_bit():
    def fn(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    for mask in (None, torch.randn(5, 5, dtype=torch.float64)):
        torch.manual_seed(3)
        eager = fn(q, k, v, mask)
        torch.manual_seed(3)
        out = tv.jit(fn)(q, k, v, mask)
        assert torch.equal(out, eager)
        g = torch.randn_like(out)
        for a, b in zip(
            torch.autograd.grad(out, (q, k, v), g),
            torch.autograd.grad(eager, (q, k, v), g),
            strict=True,
        ):
            assert torch.equal(a, b)


# --- CUDA's fused attention kernels -------------------------------------------------------


@pytest.mark.parametrize("kernel", ["efficient", "flash"])
def test_fused_cuda_kernels_backward_takes_the_philox_state_their_forward_drew(kernel):
    """Built from proxies (no GPU needed): the backward kernel reads the seed and offset the
    forward kernel returned, so it regenerates the forward's dropout mask."""
    names = NameGenerator()
    q, k, v = (
        TensorProxy(
            names.claim(n), (2, 2, 8, 16), torch.float16, torch.device("cuda"), requires_grad=True
        )
        for n in "qkv"
    )
    builder = TraceBuilder(names)
    with builder:
        if kernel == "efficient":
            outs = aten._scaled_dot_product_efficient_attention.default(
                q, k, v, None, False, 0.1, False
            )
            seed, offset = outs[2], outs[3]
        else:
            outs = aten._scaled_dot_product_flash_attention.default(q, k, v, 0.1, False)
            seed, offset = outs[6], outs[7]
        loss = aten.sum.default(outs[0])
    call = builder.bound_symbols[0]  # sizes as capture records them: ints, not proxies
    call.output = tuple(
        getattr(o, "value", o) if not isinstance(o, TensorProxy) else o for o in call.output
    )
    result = tv.autodiff(
        Trace(args=[q, k, v], bound_symbols=builder.bound_symbols, output=loss, names=names)
    )
    (fwd,) = [b for b in result.augmented_forward.bound_symbols if "attention" in b.sym.id]
    (bwd,) = [b for b in result.backward.bound_symbols if "attention_backward" in b.sym.id]
    assert fwd.sym.id.endswith(f"_{kernel}_attention.default")
    fwd_outs = [p.name for p in fwd.flat_proxy_outs]
    assert seed.name in fwd_outs and offset.name in fwd_outs
    bwd_args = [p.name for p in bwd.flat_proxy_args]
    assert seed.name in bwd_args and offset.name in bwd_args
    assert result.grad_inputs[0] is not None and result.grad_inputs[2] is not None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["f32", "f16"])
def test_cuda_attention_dropout_equals_eager(dtype):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)

    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, 8, 16, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)
    )
    torch.manual_seed(3)
    eager = fn(q, k, v)
    torch.manual_seed(3)
    out = tv.jit(fn)(q, k, v)
    assert torch.equal(out, eager)
    g = torch.randn_like(out)
    for a, b in zip(
        torch.autograd.grad(out, (q, k, v), g),
        torch.autograd.grad(eager, (q, k, v), g),
        strict=True,
    ):
        torch.testing.assert_close(a, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bert_with_attention_dropout_trains_like_eager_on_cuda():
    torch.manual_seed(0)
    model = _hf_model("bert").cuda()
    ids = torch.randint(3, 100, (2, 8), device="cuda")
    train_like_eager(
        model,
        lambda step: ((), {"input_ids": ids}),
        lambda out: out.last_hidden_state.square().mean(),
    )

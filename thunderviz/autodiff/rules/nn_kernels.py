"""More grad rules for nn ops with ATen backward kernels (`rules/nn.py` holds the common
ones): embedding bag, randomized leaky ReLU, fractional max pooling, CTC loss, multilabel
and multi-class margin losses, binary cross-entropy, packing padded sequences, and the
double backward of max pooling.

As in nn.py, each rule emits the kernel eager autograd runs, so the numbers match eager's.
Some of these kernels have no meta implementation (`_ctc_loss_backward`,
`fractional_max_pool3d_backward`, `multilabel_margin_loss_backward`,
`multi_margin_loss_backward`, `_ctc_loss.Tensor`,
`_pack_padded_sequence`):
prims/missing_meta.py gives their outputs' shapes.
"""

from __future__ import annotations

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import backward_kernel, register, with_arguments
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("nn_kernels")


def _embedding_bag_rule(op) -> None:
    """`_embedding_bag_forward_only` is what a trace records (it ran without autograd); its
    bookkeeping outputs (which bag each index went to, bag sizes, argmax) may be left
    empty, so the rule computes them with `_embedding_bag` for the backward kernels."""

    def embedding_bag(*args, **kwargs):
        weight, indices, *rest = op_args(op, args, kwargs)
        offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, _, padding_idx = rest
        # the kernels read indices as contiguous memory; torch's caller makes them so, but
        # on a contiguous capture copy that call was a no-op and is not in the trace
        indices = aten.contiguous.default(indices)
        outs = op(weight, indices, *rest)
        _, offset2bag, bag_size, max_indices = aten._embedding_bag.default(weight, indices, *rest)
        g = get_grad(outs[0])
        if requires_grad(weight):
            put_grad(
                weight,
                aten._embedding_bag_backward.default(
                    g,
                    indices,
                    offsets,
                    offset2bag,
                    bag_size,
                    max_indices,
                    weight.shape[0],
                    scale_grad_by_freq,
                    mode,
                    sparse,  # a sparse gradient for EmbeddingBag(sparse=True), as eager's
                    per_sample_weights,
                    padding_idx,
                ),
            )
        if requires_grad(per_sample_weights):
            put_grad(
                per_sample_weights,
                aten._embedding_bag_per_sample_weights_backward.default(
                    g, weight, indices, offsets, offset2bag, mode, padding_idx
                ),
            )
        return outs

    register(RULES, op, embedding_bag)


_embedding_bag_rule(aten._embedding_bag_forward_only.default)
_embedding_bag_rule(aten._embedding_bag.default)


# The slopes drawn in the forward (`noise_out`) are the ones the backward uses.
backward_kernel(
    RULES,
    aten.rrelu_with_noise_functional.default,
    aten.rrelu_with_noise_backward.default,
    lambda g, x, _noise, lower, upper, training, _generator, noise_out: (
        g,
        x,
        noise_out,
        lower,
        upper,
        training,
        False,
    ),
    constant_extras=True,
)
# (the random samples only placed the windows: the kernel reads where the maxima were)
for _pool, _backward in (
    (aten.fractional_max_pool2d.default, aten.fractional_max_pool2d_backward.default),
    (aten.fractional_max_pool3d.default, aten.fractional_max_pool3d_backward.default),
):
    backward_kernel(
        RULES,
        _pool,
        _backward,
        lambda g, x, kernel_size, output_size, _random_samples, indices: (
            g,
            x,
            kernel_size,
            output_size,
            indices,
        ),
    )
# (the loss, is_target): the kernel reads which classes are targets from the forward
backward_kernel(
    RULES,
    aten.multilabel_margin_loss_forward.default,
    aten.multilabel_margin_loss_backward.default,
)


# A score within the margin of the target's, ties included, is eager's kernel's to count
# (torch's decomposition, differentiated, counts a tie where the kernel does not)
backward_kernel(RULES, aten.multi_margin_loss.default, aten.multi_margin_loss_backward.default)


@RULES.grad(aten.binary_cross_entropy.default)
def binary_cross_entropy(*args, **kwargs):
    """derivatives.yaml's gradients. The input's is eager's kernel, which divides by
    max(x (1 - x), 1e-12): a prediction of exactly 0 or 1 (a saturated sigmoid in float32)
    gets a large finite gradient, where torch's decomposition, differentiated, gives nan.
    The target's is -logit(x) * g, weighted and averaged as eager's, infinite there."""
    out = aten.binary_cross_entropy.default(*args, **kwargs)
    x, target, weight, reduction = op_args(aten.binary_cross_entropy.default, args, kwargs)
    if requires_grad(weight):
        raise AutodiffError(
            "binary_cross_entropy is not differentiable as to its `weight`, in eager too "
            '("This input cannot have requires_grad True"): pass the weight detached'
        )
    g = get_grad(out)
    if requires_grad(x):
        put_grad(x, aten.binary_cross_entropy_backward.default(g, x, target, weight, reduction))
    if requires_grad(target):
        grad_target = aten.mul.Tensor(aten.neg.default(aten.logit.default(x)), g)
        if weight is not None:
            grad_target = aten.mul.Tensor(grad_target, weight)
        if reduction == _MEAN:
            grad_target = aten.div.Scalar(grad_target, target.numel)
        put_grad(target, grad_target)
    return out


_MEAN = 1  # torch's Reduction::Mean


def _ctc_loss_rule(op, backward) -> None:
    """`(neg_log_likelihood, log_alpha) = _ctc_loss(log_probs, targets, input_lengths,
    target_lengths, blank, zero_infinity)`: the kernel takes both outputs back (derivatives.yaml
    passes result0 and result1)."""

    def put_ctc_grad(result, log_probs, targets, input_lengths, target_lengths, blank, zero_inf):
        nll, log_alpha = result
        put_grad(
            log_probs,
            backward(
                get_grad(nll),
                log_probs,
                targets,
                input_lengths,
                target_lengths,
                nll,
                log_alpha,
                blank,
                zero_inf,
            ),
        )

    with_arguments(RULES, op, put_ctc_grad)


_ctc_loss_rule(aten._ctc_loss.default, aten._ctc_loss_backward.default)
_ctc_loss_rule(aten._ctc_loss.Tensor, aten._ctc_loss_backward.Tensor)


@RULES.grad(aten._pack_padded_sequence.default)
def pack_padded_sequence(x, lengths, batch_first):
    """`(data, batch_sizes)`: the packed steps, and how many sequences each step holds; the
    kernel scatters the data's gradient back into the padded layout (zeros in the padding)."""
    data, batch_sizes = aten._pack_padded_sequence.default(x, lengths, batch_first)
    put_grad(
        x,
        aten._pack_padded_sequence_backward.default(
            get_grad(data), list(x.shape), batch_sizes, batch_first
        ),
    )
    return data, batch_sizes


@RULES.grad(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(*args, **kwargs):
    """Max pooling's backward is linear in its cotangent input: its own gradient reads the
    incoming gradient at the argmax positions (a gather); `self` only chose the positions
    (a zero gradient, as autograd's)."""
    out = aten.max_pool2d_with_indices_backward.default(*args, **kwargs)
    grad_output, x, *_, indices = op_args(
        aten.max_pool2d_with_indices_backward.default, args, kwargs
    )
    g = get_grad(out)
    put_grad(x, aten.zeros_like.default(g))
    flat_g = aten.flatten.using_ints(g, -2, -1)
    picked = aten.gather.default(flat_g, -1, aten.flatten.using_ints(indices, -2, -1))
    put_grad(grad_output, aten.view.default(picked, list(indices.shape)))
    return out

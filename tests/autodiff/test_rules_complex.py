"""Complex tensors: every rule family that accepts them against torch.autograd in
complex128 on torch's own OpInfo samples (random complex cotangents on complex outputs,
gradients of every complex or real input, torch's conjugate convention), the real part for
a real input of a complex result, the refusal of a rule not checked for complex inputs,
and a small model (FFT, a real weight, abs) trained through `thunderviz.jit` like eager.
The linear algebra's own cases (solves, factorizations, eigen- and singular vectors) are in
test_rules_complex_linalg.py."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from torch.testing._internal.common_methods_invocations import op_db

import thunderviz as tv
from benchmarks import opinfo_census as census
from tests.autodiff.opinfo_samples import agrees_with_autograd, in_this_torch
from thunderviz.autodiff.api import user_rules
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

C128 = torch.complex128

# OpInfo name -> the rule family it exercises (rules/<family>.py)
FAMILIES = {
    "arithmetic": [
        "add",
        "sub",
        "mul",
        "div.no_rounding_mode",
        "true_divide",
        "neg",
        "rsub",
        "addcmul",
        "addcdiv",
        "lerp",
        "__rmul__",
    ],
    "linalg": [
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "dot",
        "mv",
        "addmv",
        "matmul",
        "nn.functional.linear",
        "einsum",
        "inner",
        "kron",
        "tensordot",
        "addr",
        "vdot",
        "linalg.vecdot",
    ],
    "composite": ["outer", "narrow", "movedim", "diag", "take"],
    "reductions": [
        "sum",
        "mean",
        "cumsum",
        "cumprod",
        "linalg.vander",
        "logcumsumexp",
        "linalg.vector_norm",
        "linalg.norm",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "prod",
    ],
    "shape": [
        "reshape",
        "permute",
        "transpose",
        "cat",
        "stack",
        "flip",
        "roll",
        "gather",
        "index_select",
        "diagonal",
        "expand",
        "tril",
        "repeat",
        "index_put",
    ],
    "strided": ["as_strided"],
    "selection": ["where", "masked_fill"],
    "casts": ["clone", "contiguous"],
    "masked": ["masked_scatter"],
    "nn (padding, unfold)": [
        "nn.functional.pad.reflect",
        "nn.functional.pad.replicate",
        "nn.functional.pad.replicate_negative",
        "nn.functional.unfold",
    ],
    "linalg_factor": [
        "lu_unpack",
        "lu",
        "linalg.lu",
        "linalg.lu_factor",
        "matrix_exp",
        "linalg.pinv",
        "linalg.pinv.hermitian",
        "svd",
        "linalg.svd",
        "linalg.svdvals",
        "norm.nuc",
        "linalg.cond",
        "linalg.eigh",
        "linalg.eigvalsh",
        "linalg.qr",
        "qr",
        "svd_lowrank",
        "pca_lowrank",
    ],
    "linalg_solve": [
        "linalg.inv",
        "linalg.solve",
        "linalg.solve_triangular",
        "linalg.lu_solve",
        "cholesky_solve",
        "cholesky_inverse",
        "linalg.matrix_power",
        "linalg.tensorinv",
        "linalg.det",
        "linalg.slogdet",
        "logdet",
        "triangular_solve",
        "cholesky",
        "linalg.cholesky",
        "linalg.cholesky_ex",
    ],
    "complex_numbers": [
        "abs",
        "sgn",
        "angle",
        "conj",
        "conj_physical",
        "real",
        "imag",
        "view_as_real",
    ],
    "elementwise": [
        "exp",
        "exp2",
        "expm1",
        "log",
        "log1p",
        "log2",
        "log10",
        "sqrt",
        "reciprocal",
        "sin",
        "cos",
        "tan",
        "sinh",
        "cosh",
        "asin",
        "atan",
        "atanh",
        "sinc",
        "square",
        "pow",
        "float_power",
        "__rpow__",
        "logaddexp",
        "tanh",
        "sigmoid",
        "rsqrt",
        "acos",
        "asinh",
        "acosh",
    ],
    "fft": ["fft.fft", "fft.ifft", "fft.fft2", "fft.ifftn", "fft.hfft", "fft.irfft"],
}


def _cases(names: list[str], dtype: torch.dtype = C128, limit: int = 3):
    out = []
    for label in filter(in_this_torch, names):
        (info,) = [o for o in op_db if census.label_of(o) == label]
        for i, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
            if i >= limit:
                break
            out.append(
                pytest.param(
                    census._sample_fn(info, sample),
                    (sample.input, *sample.args),
                    dict(sample.kwargs),
                    id=f"{label}-{i}",
                )
            )
    return out


@pytest.mark.parametrize(
    "fn,args,kwargs", [c for names in FAMILIES.values() for c in _cases(names)]
)
def test_complex_opinfo_samples_match_autograd(fn, args, kwargs):
    agrees_with_autograd(fn, args, kwargs)


@pytest.mark.parametrize(
    "fn,args,kwargs",
    _cases(["polar", "complex", "view_as_complex", "fft.rfft", "fft.ihfft"], torch.float64),
)
def test_real_inputs_of_complex_results_match_autograd(fn, args, kwargs):
    """Real inputs, complex outputs: the gradient is the real part (handle_r_to_c)."""
    agrees_with_autograd(fn, args, kwargs, torch.float64)


def _real_loss(out):
    """A real loss of a complex result, as a user writes one."""
    return (out.abs() ** 2).sum() + torch.view_as_real(out).sum()


@pytest.mark.parametrize("op", [torch.mul, torch.div, torch.add, torch.sub])
def test_real_weight_times_complex_signal(op):
    """The first bug found: a real weight times a complex tensor gave the weight
    the wrong gradient (no conjugate, imaginary part dropped by a cast)."""
    w = torch.rand(5, dtype=torch.float64) + 0.5
    z = torch.randn(3, 5, dtype=C128)
    for fn in (lambda w, z: _real_loss(op(w, z)), lambda w, z: _real_loss(op(z, w))):
        agrees_with_autograd(fn, (w, z), {}, torch.float64)


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, -1.5, 0.5 + 2j])
def test_complex_power_by_a_number(exponent):
    z = torch.randn(6, dtype=C128)
    agrees_with_autograd(lambda z: z**exponent, (z,), {})


def test_power_of_two_tensors_real_and_complex_mixed():
    """Real base with complex exponent and back, zeros in the base (0**b is flat for b >= 0)."""
    r = torch.tensor([0.0, 0.5, 2.0, 3.0], dtype=torch.float64)
    z = torch.tensor([0j, 1 + 1j, -0.5 + 2j, 2 + 0j], dtype=C128)
    for base, exponent in ((r, z), (z, r + 1), (z, z), (r + 0.5, z)):
        agrees_with_autograd(
            lambda a, b: _real_loss(torch.pow(a, b)), (base, exponent), {}, torch.float64
        )


def test_abs_sgn_angle_at_zero_follow_autograd():
    z = torch.tensor([0j, 1 + 1j, -2j, 3.0 + 0j], dtype=C128)
    for f in (torch.abs, torch.sgn, torch.angle):
        agrees_with_autograd(lambda z, f=f: _real_loss(f(z).to(C128)), (z,), {})


def test_a_rule_not_checked_for_complex_is_refused_with_op_line_and_way_out():
    z = torch.randn(4, dtype=C128)
    with pytest.raises(tv.AutodiffError) as err:
        tv.vjp(lambda z: torch.special.erfcx(z.real) + torch.nan_to_num(z).real)(
            (z,), torch.randn(4, dtype=torch.float64)
        )
    message = str(err.value)
    assert "aten.nan_to_num.default" in message and "complex" in message
    assert "test_rules_complex.py" in message  # the user's line
    assert "supports_complex=True" in message and "no_grad" in message
    assert err.value.bsym is not None and err.value.bsym.sym.id == "aten.nan_to_num.default"


def test_real_inputs_still_use_a_rule_without_complex_support():
    x = torch.randn(4, dtype=torch.float64)
    agrees_with_autograd(lambda x: torch.exp(x), (x,), {}, torch.float64)


@torch.library.custom_op("thunderviz_test::complex_unruled", mutates_args=())
def _complex_unruled(z: torch.Tensor) -> torch.Tensor:
    """An op with neither a grad rule nor a decomposition."""
    return z * 1j


_complex_unruled.register_fake(lambda z: torch.empty_like(z))


def test_an_op_without_a_rule_is_still_refused_for_complex_tensors():
    z = torch.randn(3, 3, dtype=C128)
    with pytest.raises(tv.AutodiffError, match="thunderviz_test.complex_unruled"):
        tv.vjp(_complex_unruled)((z,), torch.randn(3, 3, dtype=C128))


@pytest.mark.parametrize(
    "size,stride,offset", [((2, 2), (1, 2), 0), ((2, 2), (2, 1), 1), ((3,), (2,), 2)]
)
def test_complex_as_strided_scatter_against_finite_differences(size, stride, offset):
    """Against torch's gradcheck (finite differences), not eager's autograd, whose
    derivative of `self` here is wrong in torch 2.13 (it fails the same gradcheck)."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=C128, requires_grad=True)
    src = torch.randn(size, dtype=C128, requires_grad=True)

    def scatter(x, src):
        return torch.as_strided_scatter(x * 1, src, size, stride, offset)

    assert torch.autograd.gradcheck(tv.jit(scatter), (x, src))


@pytest.mark.parametrize("zeros", [[], [2], [1, 3]])
def test_complex_cumprod_before_at_and_after_zeros(zeros):
    """Past a slice's first zero every product holds it: the gradient's three cases."""
    torch.manual_seed(0)
    z = torch.randn(2, 5, dtype=C128)
    z[:, zeros] = 0
    agrees_with_autograd(lambda z: torch.cumprod(z, dim=1), (z,), {})


def test_user_rules_opt_in_to_complex(monkeypatch):
    """A user's rule is refused for complex tensors unless it says it supports them."""
    plain, checked = RuleSet("plain"), RuleSet("checked")

    def tanh_rule(a):  # d tanh = 1 - tanh**2, conjugated as torch's
        out = aten.tanh.default(a)
        slope = aten.add.Tensor(aten.neg.default(aten.mul.Tensor(out, out)), 1)
        tv.put_grad(a, aten.mul.Tensor(tv.get_grad(out), aten.conj_physical.default(slope)))
        return out

    plain.grad(aten.tanh.default)(tanh_rule)
    checked.grad(aten.tanh.default, supports_complex=True)(tanh_rule)
    z = torch.randn(4, dtype=C128)
    monkeypatch.setitem(user_rules.rules, "aten.tanh.default", plain.rules["aten.tanh.default"])
    with pytest.raises(tv.AutodiffError, match="complex"):
        tv.vjp(torch.tanh)((z,), torch.randn(4, dtype=C128))
    monkeypatch.setitem(user_rules.rules, "aten.tanh.default", checked.rules["aten.tanh.default"])
    agrees_with_autograd(torch.tanh, (z,), {})


class SpectralFilter(nn.Module):
    """A learned real gain per frequency of a complex signal: |FFT(x) * w|."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.rand(n, dtype=torch.float64) + 0.5)
        self.mix = nn.Linear(n, 2, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spectrum = torch.fft.fft(x, norm="ortho")
        return self.mix((spectrum * self.gain).abs())


def test_spectral_filter_trains_like_eager_through_jit():
    torch.manual_seed(0)
    model = SpectralFilter(8)
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    x = torch.randn(4, 8, dtype=C128)
    target = torch.randn(4, 2, dtype=torch.float64)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt_e.zero_grad()
        opt_j.zero_grad()
        loss_e = ((eager(x) - target) ** 2).mean()
        loss_j = ((jitted(x) - target) ** 2).mean()
        loss_e.backward()
        loss_j.backward()
        torch.testing.assert_close(loss_j, loss_e, rtol=1e-12, atol=1e-14)
        for (name, p_j), p_e in zip(model.named_parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(
                p_j.grad, p_e.grad, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}"
            )
        opt_e.step()
        opt_j.step()
    for p_j, p_e in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p_j, p_e, rtol=1e-10, atol=1e-12)

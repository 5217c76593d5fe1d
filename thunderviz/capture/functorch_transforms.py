"""A `torch.func` transform (`vmap`, `grad`, `jvp`, `jacrev`, ...) called inside a traced
program: refused, by name, where it starts.

Inside a transform the program's tensors are functorch's wrappers (batched, or tracking a
gradient of their own), and the ops the recorder sees are the transform's: the recording
was not the program's computation (a `vmap`'d layer's gradient came out wrong without a
word, a `torch.func.grad` made the wrong value). Until the recorder runs the transforms
itself, it stops at the first call inside one, with the way around it.
"""

from __future__ import annotations

from collections.abc import Callable

from torch._C import _functorch  # pyright: ignore[reportAttributeAccessIssue]

from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.core.locations import where

__all__ = ["transform_level", "refuse_inside_transform"]

transform_level: Callable[[], int | None] = _functorch.maybe_current_level

# what to write instead, per transform
_INSTEAD = {
    "Vmap": (
        "write the batched computation with batched ops (most torch ops take a batch "
        "dimension), or loop over the batch"
    ),
    "Grad": (
        "take the gradient with torch.autograd.grad(..., create_graph=True), which "
        "thunderviz traces (and differentiates again)"
    ),
    "Jvp": (
        "take a vector-Jacobian product with torch.autograd.grad(..., create_graph=True) "
        "instead, which thunderviz traces"
    ),
}


def refuse_inside_transform(name: str, module_path: str) -> None:
    """Raise for the call of `name` the program made inside a torch.func transform."""
    interpreter = _functorch.peek_interpreter_stack()
    kind = interpreter.key().name if interpreter is not None else "a transform"
    source = user_source(skip=4)
    raise CaptureError(
        f"{name} at {where(source, module_path)} runs inside torch.func's {kind} transform "
        "(vmap, grad, jvp, jacrev, ... called in the traced program). Inside one, tensors are "
        "functorch's wrappers and the ops thunderviz would record are the transform's, not "
        "the program's, so it cannot trace this faithfully. Call the transform outside the "
        f"traced call, or {_INSTEAD.get(kind, _INSTEAD['Grad'])}.",
        op=name,
        source=source,
        module_path=module_path,
    )

"""Transforms over traces: visitors, in-place insert/replace, DCE, CSE; each can be recorded
step by step (`record_transform`) for the transform stepper."""

from thunderviz.transforms.cse import CSE, cse
from thunderviz.transforms.dce import DCE, dce
from thunderviz.transforms.recording import (
    VISIT_TYPE,
    StepRecorder,
    Transform,
    TransformRun,
    TransformStep,
    record_transform,
)
from thunderviz.transforms.visitor import (
    VisitorTransform,
    insert_inplace,
    replace_inplace,
    visitor_transform,
)

__all__ = [
    "CSE",
    "DCE",
    "StepRecorder",
    "Transform",
    "TransformRun",
    "TransformStep",
    "VISIT_TYPE",
    "VisitorTransform",
    "cse",
    "dce",
    "insert_inplace",
    "record_transform",
    "replace_inplace",
    "visitor_transform",
]

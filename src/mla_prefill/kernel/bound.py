"""Launches bound to a call layout: a plan's kernels with their compiled launchers and fixed
arguments, called directly on later calls of the same layout (no planning, no Triton binding).

A *layout key* holds every tensor's shape, strides, dtype, device index and whether 16 divides
its address (what Triton specialises on), so a call whose key equals a checked call's passes
the same input checks and takes the same launches; no pointer or value is cached.
"""

from typing import Any, List, Optional, Tuple

from . import launch as launch_mod
from .plan import ARG_LSE, ARG_OUT, ARG_PART_LSE, ARG_PART_O, ARG_TABLE, TENSOR_SLOTS, LaunchPlan

# what a bound launch takes per call, in this order: the call's tensors and the split buffers
CALL_SLOTS = (*TENSOR_SLOTS, ARG_OUT, ARG_LSE, ARG_PART_O, ARG_PART_LSE, ARG_TABLE)
_INDEX = {name: i for i, name in enumerate(CALL_SLOTS)}


def layout_key(*tensors) -> tuple:
    """Shape, strides, dtype, device index and 16-byte alignment of each tensor."""
    key: List[Any] = []
    for t in tensors:
        key += (t.shape, t.stride(), t.dtype, t.get_device(), t.data_ptr() & 15)
    return tuple(key)


def bind(plan: LaunchPlan, slots: dict, kernels, launch_fn=launch_mod.launch) -> Optional[list]:
    """Launch ``plan`` once through ``launch.launch`` with the call's ``slots`` (argument name
    -> value) and return, per launch, (compiled kernel, grid, argument template, constexpr
    tail); None when some launch cannot be called directly (another Triton version, launch
    hooks, the interpreter), so every call goes through ``launch.launch``.

    In a template an integer picks one of the per-call values (``CALL_SLOTS``); a 1-tuple holds
    a fixed value (a size, a stride, the scale)."""
    bound = []
    for ln in plan.launches:
        fn = kernels(ln.kernel)
        args = tuple(slots[a] if a.__class__ is str else a for a in ln.args)
        consts, options = dict(ln.consts), dict(ln.options)
        launch_fn(fn, ln.grid, args, consts, **options)
        if bound is None or not launch_mod.direct_launch_possible(fn):
            bound = None
            continue
        kernel = launch_mod.cached_kernel(fn, args, consts, **options)
        entry = None if kernel is None else launch_mod._new_entry(fn, kernel, args, consts)
        if entry is None or entry.kernel is None:
            bound = None
            continue
        template = tuple(
            _INDEX[a] if a.__class__ is str and a in _INDEX
            else (slots[a] if a.__class__ is str else a,)
            for a in ln.args
        )  # fmt: skip
        grid = (*ln.grid, *(1,) * (3 - len(ln.grid)))
        bound.append((entry.kernel, grid, template, entry.tail))
    return bound


class Pointer:
    """An address where a kernel takes a pointer (Triton's launcher calls ``data_ptr``): a split
    buffer's pieces without a tensor view each."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def current_stream(device: int) -> int:
    """The handle of ``device``'s current stream (what a bound launch runs on)."""
    return launch_mod._driver.active.get_current_stream(device)


def call_bound(bound: list, tensors: Tuple[Any, ...], stream: int) -> None:
    """Every launch of ``bound`` with this call's values (``CALL_SLOTS`` order; split buffers
    as tensors or ``Pointer``), on ``stream`` (``current_stream``)."""
    for kernel, grid, template, tail in bound:
        args = [tensors[a] if a.__class__ is int else a[0] for a in template]
        kernel.run(*grid, stream, kernel.function, kernel.packed_metadata, None, None, None,
                   *args, *tail)  # fmt: skip

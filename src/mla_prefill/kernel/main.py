"""Entry point of the FlashInfer-Bench solution: ``main.py::run`` (destination-passing style).

This folder is packed verbatim into the solution JSON, so it imports nothing from the rest of
``mla_prefill``; files here import each other relatively (flashinfer-bench builds them as a package).
"""

import functools
from typing import Dict, Optional, Tuple, Union

import torch
import triton
from triton.runtime.errors import OutOfResources

from . import launch as launch_mod
from .attention import (
    _combine_kernel,
    _mla_pooled_split_kernel,
    _mla_prefill_kernel,
    _split_schedule_kernel,
    _tile_order_kernel,
    is_interpreter,
)
from .bound import Pointer, bind, call_bound, current_stream, layout_key
from .config import (
    MAX_ORDERED_SEQS,
    MAX_ORDERED_TILES,
    MAX_SPLIT_TOKENS,
    KernelConfig,
    choose_config,
    ordered_fits,
)
from .launch import launch
from .plan import (
    ARG_LSE,
    ARG_OUT,
    ARG_PART_LSE,
    ARG_PART_O,
    ARG_SCALE,
    ARG_TABLE,
    LOG2E,
    TENSOR_SLOTS,
    CallShape,
    LaunchPlan,
    buffer_elements,
    partial_elements,
    plan_launches,
)
from .targets import DEFAULT_TARGET, Target, device_target, target_named
from .validate import (
    HEAD_DIM_CKV,
    NUM_QO_HEADS,
    check_index_data,
    check_inputs,
    sm_scale_value,
    validation_requested,
)

# the oldest Triton every launch compiles under (CI compiles them under 3.5.1 too; 3.4 fails 22
# of the B200's 40 distinct launches: docs/design.md, Triton versions)
MIN_TRITON = (3, 5)


def triton_release(version: str) -> Tuple[int, int]:
    """``(major, minor)`` of a Triton version string ("3.6.0", "3.7.0+git1a2b", "3.10.0")."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


@functools.lru_cache(maxsize=None)
def require_triton() -> None:
    """Raise, saying what to install, when the installed Triton is older than the kernels need
    (instead of a compiler pass failing inside Triton on the first launch)."""
    if triton_release(triton.__version__) < MIN_TRITON:
        raise RuntimeError(
            f"mla-prefill's kernels need Triton {MIN_TRITON[0]}.{MIN_TRITON[1]} or later, "
            f"found {triton.__version__}: install a CUDA torch that pins one (torch 2.9 pins "
            "3.5.1, 2.10 and 2.11 pin 3.6.0, which also runs the Hopper kernel) or "
            "`pip install 'triton>=3.5'`"
        )


@functools.lru_cache(maxsize=None)
def gluon_compiles() -> bool:
    """Whether this Triton is a release the Hopper (Gluon) kernel is written for (``launch.
    WRITTEN_FOR``: every launch compiles, in CI) and has the Gluon names it calls
    (``gluon_attention``: a barrier, a cp.async load)."""
    if not triton.__version__.startswith(launch_mod.WRITTEN_FOR):
        return False
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.hopper import async_copy
    except ImportError:
        return False
    return (hasattr(gl, "barrier") or hasattr(gl, "thread_barrier")) and (
        hasattr(async_copy, "async_load") or hasattr(async_copy, "async_copy_global_to_shared")
    )


@functools.lru_cache(maxsize=None)
def gluon_available() -> bool:
    """Whether Hopper runs the Gluon kernel under this Triton: it compiles (``gluon_compiles``)
    and the release is one the GPU evidence was made under, or ``MLA_PREFILL_UNRUN_TRITON=1``
    (``launch.release_enabled``). Otherwise Hopper runs the Triton kernel."""
    return gluon_compiles() and launch_mod.release_enabled(triton.__version__)


def resolve_target(target: Union[None, str, Target], device: torch.device) -> Target:
    """``target`` as a ``Target``: a table name, a Target, or None for ``device``'s own facts
    (the default target on the CPU)."""
    if isinstance(target, Target):
        return target
    if target is not None:
        return target_named(target)
    if device.type == "cuda":
        return device_target(device.index if device.index is not None else 0)
    return DEFAULT_TARGET


def default_config(
    total_q: int,
    batch: int,
    num_kv_indices: int,
    device: torch.device,
    interpret: Optional[bool] = None,
    target: Union[None, str, Target] = None,
) -> KernelConfig:
    """The launch configuration ``mla_paged_prefill`` picks for these shapes on ``device`` (or,
    when given, for ``target``: the tiles that GPU would get). Under the interpreter: the
    default target's tiles, without the Gluon kernel (it cannot be interpreted)."""
    if interpret is None:
        interpret = is_interpreter()
    if target is None and interpret:
        target = DEFAULT_TARGET  # the interpreter runs on the CPU: no device to ask
    return choose_config(
        total_q,
        batch,
        num_kv_indices,
        resolve_target(target, device),
        gluon_api=gluon_available() and not interpret,
    )


def mla_paged_prefill(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    ckv_cache: torch.Tensor,
    kpe_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    output: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
    *,
    validate: Optional[bool] = None,
    config: Optional[KernelConfig] = None,
    target: Union[None, str, Target] = None,
    _bind_key: Optional[tuple] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """MLA paged causal prefill: ``output`` [total_q, 16, 512] bf16 and base-2 ``lse`` [total_q, 16] fp32.

    Parameters
    ----------
    q_nope : [total_q, 16, 512] bf16
    q_pe : [total_q, 16, 64] bf16
    ckv_cache : [num_pages, 1, 512] bf16 (keys and values)
    kpe_cache : [num_pages, 1, 64] bf16
    qo_indptr, kv_indptr : [batch_size + 1] int32
    kv_indices : [num_kv_indices] int32, page (= token, page size 1) of each KV position
    sm_scale : float
    output, lse : destinations; allocated when None. Every element is written.
    validate : also check index values (syncs the device); default: ``MLA_PREFILL_VALIDATE``.
    config : override the shape-derived tiles (tests pin small tiles this way).
    target : plan the tiles for another GPU (a ``targets.TARGETS`` name or a ``Target``): runs
        the launches that GPU would make, on this one (``"b200"`` on an H200 checks B200's).

    No host synchronisation happens unless ``validate`` is on, so the call can be graph-captured.
    The kernels run on the inputs' device, whichever device is current.

    Example
    -------
    >>> out, lse = mla_paged_prefill(q_nope, q_pe, ckv, kpe, qo_indptr, kv_indptr, kv_indices, 0.135)
    """
    total_q, num_pages, batch, num_kv = check_inputs(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse
    )
    scale = sm_scale_value(sm_scale)
    interpret = is_interpreter()
    if not interpret and q_nope.device.type != "cuda":
        raise ValueError(
            f"q_nope: expected CUDA tensors, got {q_nope.device}; "
            "set TRITON_INTERPRET=1 to run on the CPU through Triton's interpreter"
        )
    if not interpret and q_nope.device.index != torch.cuda.current_device():
        # Triton launches on the current device, not the tensors': make theirs current
        with torch.cuda.device(q_nope.device):
            # (not bound for ``run``'s fast path, which calls on the current device only)
            return mla_paged_prefill(
                q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices,
                sm_scale, output, lse, validate=validate, config=config, target=target,
            )  # fmt: skip
    # on the CPU the index values are host memory: checking them costs no sync, and the
    # interpreter has no memory protection (an out-of-range page would crash the process)
    if interpret or validation_requested(validate):
        check_index_data(qo_indptr, kv_indptr, kv_indices, total_q, num_pages)
    if output is None:
        output = torch.empty(
            (total_q, NUM_QO_HEADS, HEAD_DIM_CKV), dtype=torch.bfloat16, device=q_nope.device
        )
    if lse is None:
        lse = torch.empty((total_q, NUM_QO_HEADS), dtype=torch.float32, device=q_nope.device)
    if total_q == 0:
        return output, lse
    dev = q_nope.device
    here = None if interpret else device_target(dev.index or 0)
    if target is not None and not isinstance(target, Target):
        target = target_named(target)
    shape = CallShape.of(q_nope, q_pe, ckv_cache, kpe_cache, output, lse, batch, num_kv)
    plan = plan_call(shape, here, interpret, config, target)
    tensors = (q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices)
    launch_fn = _launch_checked if here is None else functools.partial(_launch_checked, here=here)
    if _bind_key is None or here is None:
        execute(plan, tensors, output, lse, scale, launch_fn)
        return output, lse
    # the solution's run, first call of this layout: launch and keep the launchers
    bound = bind(plan, call_slots(plan, tensors, output, lse, scale), _kernel, launch_fn)
    if bound is not None:
        if len(_BOUND) >= MAX_BOUND:
            _BOUND.clear()
        _BOUND[_bind_key] = (bound, partial_elements(plan), dev.index)
    return output, lse


@functools.lru_cache(maxsize=1024)
def plan_call(
    shape: CallShape,
    here: Optional[Target],
    interpret: bool,
    config: Optional[KernelConfig] = None,
    target: Optional[Target] = None,
    table_ready: bool = False,
) -> LaunchPlan:
    """The launches of a call of ``shape`` on the device ``here`` (None: the interpreter):
    ``config``'s tiles, else those chosen for ``target`` (default: ``here``); ``table_ready``:
    the work table was written before the call (``plan_launches``). Pure in its arguments, so
    cached per shape: a serving loop that repeats shapes plans once."""
    require_triton()
    if config is None:
        t = target or (DEFAULT_TARGET if here is None else here)
        config = choose_config(
            shape.total_q, shape.batch, shape.num_kv, t,
            gluon_api=gluon_available() and not interpret,
        )  # fmt: skip
    bad = config_problems(config, shape.total_q, shape.batch, here, interpret)
    if bad:
        raise ValueError("config: " + "; ".join(bad))
    capability = 0 if here is None else here.capability
    return plan_launches(shape, config, capability, interpret, table_ready)


def _kernel(name: str):
    if name == "gluon":
        from .gluon_attention import _mla_prefill_ws_kernel  # imported only where it can run

        return _mla_prefill_ws_kernel
    return {"tile": _mla_prefill_kernel, "pooled": _mla_pooled_split_kernel,
            "schedule": _split_schedule_kernel, "order": _tile_order_kernel,
            "combine": _combine_kernel}[name]  # fmt: skip


def carve_partials(plan: LaunchPlan, buf: torch.Tensor) -> dict:
    """The split path's fp32 partials (output, lse) and its int32 work table, as views of one
    buffer of at least ``sum(partial_elements(plan))`` fp32 elements."""
    return carve_buffers(plan.partials, plan.table, buf)


def carve_buffers(partials: Tuple[int, ...], table: int, buf: torch.Tensor) -> dict:
    """``carve_partials`` for split buffers of ``plan.split_layout``'s ``(partials, table)``
    (the same views of the same buffer as a plan of that layout carves)."""
    n_o, n_l, n_t = buffer_elements(partials, table)
    rows = partials or (0,)  # tiles in work order: a table, no partials
    return {
        ARG_PART_O: buf[:n_o].view(*rows, NUM_QO_HEADS, HEAD_DIM_CKV),
        ARG_PART_LSE: buf[n_o : n_o + n_l].view(*rows, NUM_QO_HEADS),
        ARG_TABLE: buf[n_o + n_l : n_o + n_l + n_t].view(torch.int32),
    }


def call_slots(plan: LaunchPlan, tensors, output, lse, scale: float, partials=None) -> dict:
    """Argument name -> value for this call: its tensors, the scale, and the split buffers,
    carved from ``partials`` or else from one fresh allocation (one allocator call, not
    three)."""
    slots = dict(zip(TENSOR_SLOTS, tensors))
    slots[ARG_OUT], slots[ARG_LSE], slots[ARG_SCALE] = output, lse, scale * LOG2E
    sizes = partial_elements(plan)
    if sizes is not None:
        if partials is None:
            partials = torch.empty(sum(sizes), dtype=torch.float32, device=output.device)
        slots.update(carve_partials(plan, partials))
    return slots


def execute(
    plan: LaunchPlan, tensors, output, lse, scale: float, launch_fn=launch, partials=None
) -> None:
    """Every launch of ``plan`` on this call's tensors (``tensors``: the seven inputs in the
    definition's order), through ``launch_fn(fn, grid, args, consts, **options)``; the split
    buffers are carved from ``partials`` when given (see ``call_slots``).

    ``mla-prefill portability`` passes meta tensors and a recording ``launch_fn`` to compile,
    for any GPU, exactly the launches a call would make.
    """
    slots = call_slots(plan, tensors, output, lse, scale, partials)
    for ln in plan.launches:
        args = tuple(slots[a] if a.__class__ is str else a for a in ln.args)
        launch_fn(_kernel(ln.kernel), ln.grid, args, dict(ln.consts), **dict(ln.options))


def config_problems(
    config: KernelConfig, total_q: int, batch: int, here: Optional[Target], interpret: bool
) -> list:
    """What stops ``config`` from launching for ``total_q`` tokens of ``batch`` sequences on
    ``here`` (the device's target; None under the interpreter)."""
    bad = config.problems()
    if config.kernel == "gluon" and interpret:
        bad.append("the gluon kernel does not run under TRITON_INTERPRET=1")
    elif config.kernel == "gluon" and here is not None and here.capability != 90:
        bad.append(f"the gluon kernel needs a Hopper GPU (sm_90), this one is {here.arch}")
    elif config.kernel == "gluon" and not gluon_available():
        bad.append(
            f"the gluon kernel runs under Triton 3.6 (3.7-3.9 with "
            f"{launch_mod.UNRUN_TRITON_ENV}=1), found {triton.__version__}"
        )
    if config.ordered and not ordered_fits(total_q, config.block_t, batch):
        bad.append(
            f"ordered tiles: at most {MAX_ORDERED_TILES} tiles and {MAX_ORDERED_SEQS} sequences, "
            f"got total_q {total_q} in {batch} sequences: use ordered=False"
        )
    if config.split and total_q > MAX_SPLIT_TOKENS:
        bad.append(
            f"a KV split sizes the ranges of at most {MAX_SPLIT_TOKENS} tokens, got total_q "
            f"{total_q}: use num_splits 1"
        )
    return bad


def _launch_checked(fn, grid, args, consts, here: Optional[Target] = None, **options) -> None:
    """``launch``, with Triton's ``OutOfResources`` (raised before the kernel is launched, when
    the compiled kernel needs more shared memory or registers than the device has) turned into an
    error that names the tiles and the device's limit."""
    try:
        launch(fn, grid, args, consts, **options)
    except OutOfResources as e:
        where = f"{here.gpu} ({here.arch}, {here.max_shared} B shared per block)" if here else ""
        tiles = {k: v for k, v in consts.items() if k.startswith("BLOCK")}
        raise RuntimeError(
            f"{getattr(fn, '__name__', fn)} with {tiles}, {options} does not fit {where}: {e}. "
            "Pass a smaller config= (fewer stages or a smaller BLOCK_N), or report the GPU: "
            "the tile chooser should not pick this"
        ) from None


# the solution's run: launchers bound per call layout (``bound.layout_key`` + the scale and the
# current device), so a repeated layout skips checks, planning and Triton's binding
_BOUND: Dict[tuple, tuple] = {}
MAX_BOUND = 1024


# the split buffers of the solution's run per (device, stream), grown to the largest call's
# and reused by the later calls of that stream (stream order keeps them apart), as a FlashInfer
# wrapper keeps its workspace; a call captured into a CUDA graph allocates its own
_WORKSPACE: Dict[Tuple[int, int], torch.Tensor] = {}


def _split_buffers(sizes: Tuple[int, int, int], device: int, stream: int):
    """(buffer, pointers to its three pieces) for a bound split call on ``stream``."""
    n_o, n_l, n_t = sizes
    n = n_o + n_l + n_t
    if torch.cuda.is_current_stream_capturing():
        buf = torch.empty(n, dtype=torch.float32, device=device)  # the graph's own pool
    else:
        buf = _WORKSPACE.get((device, stream))
        if buf is None or buf.numel() < n:
            buf = _WORKSPACE[device, stream] = torch.empty(n, dtype=torch.float32, device=device)
    base = buf.data_ptr()  # the pieces' offsets keep the 16-byte alignment they were bound with
    return buf, (Pointer(base), Pointer(base + 4 * n_o), Pointer(base + 4 * (n_o + n_l)))


def _run_key(tensors: tuple, sm_scale) -> Optional[tuple]:
    """The bound-launch key of a ``run`` call, or None where every call must take the full path
    (host tensors: the interpreter; validation on, a launch hook, a tensor scale, not
    tensors)."""
    if sm_scale.__class__ is not float or not launch_mod.hooks_idle():
        return None
    if validation_requested(None):
        return None
    try:
        if not tensors[0].is_cuda:
            return None
        return (*layout_key(*tensors), sm_scale, launch_mod._driver.active.get_current_device())
    except (AttributeError, TypeError):
        return None


def run(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    ckv_cache: torch.Tensor,
    kpe_cache: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    sm_scale: float,
    output: torch.Tensor,
    lse: torch.Tensor,
) -> None:
    """FlashInfer-Bench entry point (destination-passing style: writes ``output`` and ``lse``).

    Exactly the definition's inputs then outputs, as flashinfer-bench's signature check expects.
    The first call of a layout is checked, planned and launched through Triton, and its
    launchers are kept; a later call with the same layout key (same shapes, strides, dtypes,
    devices, alignment and scale: the same checks pass, the same launches follow) calls them.
    """
    tensors = (q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse)
    key = _run_key(tensors, sm_scale)
    hit = None if key is None else _BOUND.get(key)
    if hit is None:
        mla_paged_prefill(
            q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale,
            output, lse, _bind_key=key,
        )  # fmt: skip
        return
    bound, sizes, device = hit
    stream = current_stream(device)
    if sizes is None:
        call_bound(bound, tensors, stream)
        return
    buf, parts = _split_buffers(sizes, device, stream)
    call_bound(bound, (*tensors, *parts), stream)
    del buf  # (held until every launch is queued)

"""Entry point of the FlashInfer-Bench solution: ``main.py::run`` (destination-passing style).

This folder is packed verbatim into the solution JSON, so it imports nothing from the rest of
``mla_prefill``; files here import each other relatively (flashinfer-bench builds them as a package).
"""

import functools
import math
from typing import Optional, Tuple, Union

import torch
import triton
from triton.runtime.errors import OutOfResources

from .attention import (
    _combine_kernel,
    _mla_pooled_split_kernel,
    _mla_prefill_kernel,
    is_interpreter,
)
from .config import MAX_POOLED_TOKENS, KernelConfig, choose_config
from .launch import launch
from .targets import DEFAULT_TARGET, Target, device_target, target_named
from .validate import (
    HEAD_DIM_CKV,
    HEAD_DIM_KPE,
    NUM_QO_HEADS,
    check_index_data,
    check_inputs,
    sm_scale_value,
    validation_requested,
)

LOG2E = 1.0 / math.log(2.0)


@functools.lru_cache(maxsize=None)
def gluon_available() -> bool:
    """Whether this Triton has the Gluon API the Hopper kernel is written against: 3.6's (3.9
    dropped ``async_copy_global_to_shared``; releases between are not checked). Without it Hopper
    runs the Triton kernel."""
    if not triton.__version__.startswith("3.6."):
        return False
    try:
        from triton.experimental.gluon.language.nvidia.hopper import async_copy
    except ImportError:
        return False
    return hasattr(async_copy, "async_copy_global_to_shared")


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
    when given, for ``target``: the tiles that GPU would get)."""
    if interpret is None:
        interpret = is_interpreter()
    if target is None and interpret:
        target = DEFAULT_TARGET  # the interpreter runs on the CPU: no device to ask
    return choose_config(
        total_q,
        batch,
        num_kv_indices,
        resolve_target(target, device),
        interpret=interpret,
        gluon_api=gluon_available(),
    )


def _partials(
    lead: Tuple[int, ...], device: torch.device, table: int = 0
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 split partials: normalised outputs ``[*lead, 16, 512]``, base-2 lse ``[*lead, 16]``
    and an int32 ``[table]``, carved from one allocation (one allocator call, not three)."""
    rows = math.prod(lead) * NUM_QO_HEADS
    buf = torch.empty(rows * (HEAD_DIM_CKV + 1) + table, dtype=torch.float32, device=device)
    n_o = rows * HEAD_DIM_CKV
    return (
        buf[:n_o].view(*lead, NUM_QO_HEADS, HEAD_DIM_CKV),
        buf[n_o : n_o + rows].view(*lead, NUM_QO_HEADS),
        buf[n_o + rows :].view(torch.int32),
    )


def _pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (``triton.next_power_of_2`` without its host cost)."""
    return 1 << max(n - 1, 0).bit_length()


def _launch_combine(part_o, part_lse, table, output, lse, num_splits, pooled, pdl, launch_fn):
    """Merge the split partials into ``output``/``lse``: one (token, head) row per program.

    Per-tile splits read all of a row's splits in one load (``BLOCK_S >= num_splits``); pooled
    pieces (any count per token) go 16 at a time. ``BLOCK_S * BLOCK_D <= 8192`` fp32: 64 per
    thread of 4 warps.
    """
    total_q = output.shape[0]
    block_s = 16 if pooled else _pow2_at_least(num_splits)
    block_d = min(HEAD_DIM_CKV, 8192 // block_s)
    so, sl = output.stride(), lse.stride()
    launch_fn(
        _combine_kernel, (total_q * NUM_QO_HEADS, HEAD_DIM_CKV // block_d),
        (part_o, part_lse, part_lse if table is None else table, output, lse, num_splits, total_q,
         so[0], so[1], sl[0], sl[1]),
        dict(NUM_HEADS=NUM_QO_HEADS, HEAD_CKV=HEAD_DIM_CKV, BLOCK_D=block_d, BLOCK_S=block_s,
             POOLED=pooled, USE_PDL=pdl),
        num_warps=4, launch_pdl=pdl,
    )  # fmt: skip


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
            return mla_paged_prefill(
                q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices,
                sm_scale, output, lse, validate=validate, config=config, target=target,
            )  # fmt: skip
    if validation_requested(validate):
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
    if config is None:
        config = default_config(total_q, batch, num_kv, dev, interpret, target)
    bad = config_problems(config, total_q, here, interpret)
    if bad:
        raise ValueError("config: " + "; ".join(bad))
    dispatch(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse,
        scale, config, 0 if here is None else here.capability, interpret, batch, num_kv,
        _launch_checked if here is None else functools.partial(_launch_checked, here=here),
    )  # fmt: skip
    return output, lse


def config_problems(
    config: KernelConfig, total_q: int, here: Optional[Target], interpret: bool
) -> list:
    """What stops ``config`` from launching for ``total_q`` tokens on ``here`` (the device's
    target; None under the interpreter)."""
    bad = config.problems()
    if config.kernel == "gluon" and interpret:
        bad.append("the gluon kernel does not run under TRITON_INTERPRET=1")
    elif config.kernel == "gluon" and here is not None and here.capability != 90:
        bad.append(f"the gluon kernel needs a Hopper GPU (sm_90), this one is {here.arch}")
    elif config.kernel == "gluon" and not gluon_available():
        bad.append(f"the gluon kernel needs Triton 3.6's Gluon API, found {triton.__version__}")
    if config.pooled and total_q > MAX_POOLED_TOKENS:
        bad.append(
            f"a split of 1-token tiles pools at most {MAX_POOLED_TOKENS} tokens, got total_q "
            f"{total_q}: use block_t >= 2 or num_splits 1"
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


def dispatch(
    q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse,
    scale: float, config: KernelConfig, capability: int, interpret: bool, batch: int,
    num_kv: int, launch_fn=launch,
) -> None:  # fmt: skip
    """Every kernel launch of one call, through ``launch_fn(fn, grid, args, consts, **options)``.

    Shapes, strides, dtypes and pointer alignment decide what is launched, never values: ``mla-
    prefill portability`` passes meta tensors and a recording ``launch_fn`` to compile, for any
    GPU, exactly the launches a call would make.
    """
    total_q = q_nope.shape[0]
    num_pages = ckv_cache.shape[0]
    dev = q_nope.device
    # every gathered element's offset (page * stride + column) fits int32: cheaper addresses
    sq, sp = q_nope.stride(), q_pe.stride()
    s_ckv, s_kpe = ckv_cache.stride(0), kpe_cache.stride(0)
    offs32 = max(num_pages * s_ckv, num_pages * s_kpe) < 2**31
    guess32 = total_q * batch < 2**31
    # programmatic dependent launch (sm_90+): the combine's launch overlaps the split kernel's end
    pdl = capability >= 90
    if config.pooled:
        # 1-token tiles pool their KV ranges and cut the pool into equal pieces (one program each)
        num_pieces = config.num_splits * total_q  # pieces in all (about; + one tail per token)
        slots = num_pieces + total_q
        part_o, part_lse, table = _partials((slots,), dev, table=2 * total_q)
        launch_fn(
            _mla_pooled_split_kernel, (slots,),
            (q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices,
             part_o, part_lse, table, sq[0], sq[1], sp[0], sp[1], s_ckv, s_kpe,
             total_q, batch, scale * LOG2E, num_pieces),
            dict(NUM_HEADS=NUM_QO_HEADS, HEAD_CKV=HEAD_DIM_CKV, HEAD_KPE=HEAD_DIM_KPE,
                 BLOCK_N=config.block_n, MIN_CHUNK=config.min_chunk,
                 BLOCK_TQ=max(16, _pow2_at_least(total_q)), OFFS32=offs32,
                 GUESS32=guess32, INTERPRET=interpret, USE_PDL=pdl),
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
        _launch_combine(part_o, part_lse, table, output, lse, 0, True, pdl, launch_fn)
        return
    split = config.split
    if split:
        part_o, part_lse, _ = _partials((config.num_splits, total_q), dev)
        dst_o, dst_lse = part_o, part_lse
        stride_o_s, stride_l_s = part_o.stride(0), part_lse.stride(0)
    else:
        dst_o, dst_lse = output, lse
        stride_o_s = stride_l_s = 0

    grid = (-(-total_q // config.block_t), config.num_splits)
    so, sl = dst_o.stride(), dst_lse.stride()
    args = (
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices,
        dst_o, dst_lse, sq[0], sq[1], sp[0], sp[1], s_ckv, s_kpe,
        stride_o_s, so[-3], so[-2], stride_l_s, sl[-2], sl[-1],
        total_q, batch, scale * LOG2E,
    )  # fmt: skip
    consts = dict(
        NUM_HEADS=NUM_QO_HEADS, HEAD_CKV=HEAD_DIM_CKV, HEAD_KPE=HEAD_DIM_KPE,
        BLOCK_T=config.block_t, BLOCK_N=config.block_n,
        MIN_CHUNK=config.min_chunk if split else 0, OFFS32=offs32,
    )  # fmt: skip
    if config.kernel == "gluon":
        from .gluon_attention import _mla_prefill_ws_kernel  # imported only where it can run

        launch_fn(_mla_prefill_ws_kernel, grid, args, consts, num_warps=4)
    else:
        consts.update(GUESS32=guess32, INTERPRET=interpret)
        launch_fn(
            _mla_prefill_kernel, grid, (*args, num_kv), consts,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )  # fmt: skip
    if split:
        _launch_combine(
            part_o, part_lse, None, output, lse, config.num_splits, False, pdl, launch_fn
        )


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
    """
    mla_paged_prefill(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, output, lse
    )

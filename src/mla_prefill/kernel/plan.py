"""Launch planning: from a call's shapes, strides and tiles to the exact list of kernel launches.

``plan_launches`` is a pure function of metadata (no tensor, no device), so every path can be
tested on the CPU and cached per shape; ``main.execute`` binds a plan to a call's tensors and
launches it. A launch's arguments are named slots (``ARG_*``) filled at launch time, or plain
integers fixed by the plan.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from .config import KernelConfig, ordered_slots
from .validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS

LOG2E = 1.0 / math.log(2.0)

# argument slots filled per call by ``main.execute``
TENSOR_SLOTS = (
    "q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices",
)  # fmt: skip
ARG_OUT, ARG_LSE = "output", "lse"
ARG_PART_O, ARG_PART_LSE, ARG_TABLE = "part_o", "part_lse", "table"
ARG_SCALE = "scale_log2"  # sm_scale * log2(e): the kernels' softmax works in base 2
REC_FIELDS = 8  # int32 per program in a scheduled split's work table (attention.REC_FIELDS)
MAX_SLOTS = 2048  # programs of a scheduled split: its schedule holds them in one vector
SCHEDULE_WARPS = 8


@dataclass(frozen=True)
class CallShape:
    """What a call's launches depend on besides the tiles: sizes and element strides."""

    total_q: int
    batch: int
    num_kv: int
    num_pages: int
    q_strides: Tuple[int, int]  # q_nope (token, head)
    pe_strides: Tuple[int, int]  # q_pe (token, head)
    ckv_stride: int  # ckv_cache per page
    kpe_stride: int  # kpe_cache per page
    out_strides: Tuple[int, int]  # output (token, head)
    lse_strides: Tuple[int, int]  # lse (token, head)

    @staticmethod
    def of(q_nope, q_pe, ckv_cache, kpe_cache, output, lse, batch: int, num_kv: int):
        sq, sp, so, sl = q_nope.stride(), q_pe.stride(), output.stride(), lse.stride()
        return CallShape(
            q_nope.shape[0], batch, num_kv, ckv_cache.shape[0], (sq[0], sq[1]), (sp[0], sp[1]),
            ckv_cache.stride(0), kpe_cache.stride(0), (so[0], so[1]), (sl[0], sl[1]),
        )  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """One kernel launch: which kernel (``"tile"``, ``"gluon"``, ``"pooled"``, ``"schedule"``,
    ``"order"``, ``"combine"``),
    its grid, its runtime arguments (slot names or integers), constexprs and launch options."""

    kernel: str
    grid: Tuple[int, ...]
    args: Tuple[object, ...]
    consts: Tuple[Tuple[str, object], ...]
    options: Tuple[Tuple[str, object], ...]


@dataclass(frozen=True)
class LaunchPlan:
    """Every launch of one call, in order, and the fp32 split partials they share: normalised
    outputs ``[*partials, 16, 512]``, base-2 lse ``[*partials, 16]`` and an int32 ``[table]``
    (``partials == ()``: no split; ``table == 0`` too: no buffer). A split's table holds, per
    token, its first partial row and its piece count, then a scheduled split's records
    (``REC_FIELDS`` per program); tiles in work order have records only (after ``2 * total_q``
    unused entries, where the kernels look for them)."""

    config: KernelConfig
    partials: Tuple[int, ...]
    table: int
    launches: Tuple[Launch, ...]


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (``triton.next_power_of_2`` without its host cost)."""
    return 1 << max(n - 1, 0).bit_length()


def _combine(total_q, rows, pdl, out_strides, lse_strides, direct) -> Launch:
    """Merge the split partials into ``output``/``lse``: one (token, head) row per program, its
    pieces 16 at a time (``BLOCK_S * BLOCK_D = 8192`` fp32: 64 per thread of 4 warps). ``rows``:
    partial rows per piece (the split's tile, in tokens); ``direct``: a scheduled split, whose
    tiles of one piece wrote their tokens' output themselves."""
    block_s = 16
    block_d = min(HEAD_DIM_CKV, 8192 // block_s)
    return Launch(
        "combine", (total_q * NUM_QO_HEADS, HEAD_DIM_CKV // block_d),
        (ARG_PART_O, ARG_PART_LSE, ARG_TABLE, ARG_OUT, ARG_LSE, total_q, *out_strides,
         *lse_strides),
        (("NUM_HEADS", NUM_QO_HEADS), ("HEAD_CKV", HEAD_DIM_CKV), ("BLOCK_D", block_d),
         ("BLOCK_S", block_s), ("ROWS", rows), ("DIRECT", direct), ("USE_PDL", pdl)),
        (("num_warps", 4), ("launch_pdl", pdl)),
    )  # fmt: skip


def split_slots(config: KernelConfig, total_q: int, batch: int) -> int:
    """Programs of a scheduled split (tiles of ``block_t > 1``): ``num_splits`` per global tile,
    at most ``MAX_SLOTS`` and ``config.max_slots`` (when set), and at least one per tile of the
    schedule's (tiles follow the sequences: at most ``min(total_q, num_tiles + batch)``), so
    every tile has a piece."""
    num_tiles = -(-total_q // config.block_t)
    tiles_bound = min(total_q, num_tiles + batch)
    cap = min(MAX_SLOTS, config.max_slots) if config.max_slots else MAX_SLOTS
    return max(min(config.num_splits * num_tiles, cap), tiles_bound)


def split_layout(config: KernelConfig, total_q: int, batch: int) -> Tuple[Tuple[int, ...], int]:
    """``(partials, table)`` of a call's ``LaunchPlan`` (see there): what its split buffers hold
    depends on the tiles and the batch's sizes only, so a plan made once per batch can size them."""
    T = total_q
    if config.pooled:
        return (config.num_splits * T,), 2 * T
    if config.ordered:
        return (), 2 * T + REC_FIELDS * ordered_slots(T, config.block_t, batch)
    if config.split:
        slots = split_slots(config, T, batch)
        return (slots, config.block_t), 2 * T + REC_FIELDS * slots
    return (), 0


def table_launch(config: KernelConfig, total_q: int, batch: int, pdl: bool) -> Optional[Launch]:
    """The launch that writes a call's work table from its indptrs alone (``_tile_order_kernel``
    for ordered tiles, ``_split_schedule_kernel`` for a scheduled split), or None (no table, or
    the pooled kernel's, which its programs write themselves). ``pdl``: the attention launch
    after it is a programmatic dependent one."""
    T, bt = total_q, config.block_t
    if config.ordered:
        slots = ordered_slots(T, bt, batch)
        return Launch(
            "order", (1,),
            ("qo_indptr", "kv_indptr", ARG_TABLE, T, batch, slots),
            (("BLOCK_T", bt), ("BLOCK_N", config.block_n),
             ("LOG_B", max(4, (batch - 1).bit_length())),
             ("BLOCK_SL", max(16, pow2_at_least(slots))), ("USE_PDL", pdl)),
            (("num_warps", SCHEDULE_WARPS),),
        )  # fmt: skip
    if config.split and not config.pooled:
        slots = split_slots(config, T, batch)
        return Launch(
            "schedule", (1,),
            ("qo_indptr", "kv_indptr", ARG_TABLE, T, batch, slots),
            (("BLOCK_T", bt), ("BLOCK_N", config.block_n), ("MIN_CHUNK", config.min_chunk),
             ("BLOCK_TQ", max(16, pow2_at_least(T))), ("BLOCK_SL", max(16, pow2_at_least(slots))),
             ("GUESS32", T * batch < 2**31), ("USE_PDL", pdl)),
            (("num_warps", SCHEDULE_WARPS),),
        )  # fmt: skip
    return None


def plan_launches(
    shape: CallShape,
    config: KernelConfig,
    capability: int,
    interpret: bool,
    table_ready: bool = False,
) -> LaunchPlan:
    """The launches of a call of ``shape`` with ``config`` on a GPU of ``capability`` (0: none,
    under the interpreter). Shapes, strides and the tiles decide everything, never values.

    ``table_ready``: the work table (``table_launch``) was written before the call, from the
    same indptrs (``serving.MLAPrefillPlan.plan`` writes it once per batch), so the call's
    launches leave it out and the attention launch does not wait for it."""
    s = shape
    T = s.total_q
    qs = (*s.q_strides, *s.pe_strides, s.ckv_stride, s.kpe_stride)
    # every gathered element's offset (page * stride + column) fits int32: cheaper addresses
    offs32 = max(s.num_pages * s.ckv_stride, s.num_pages * s.kpe_stride) < 2**31
    guess32 = T * s.batch < 2**31
    # programmatic dependent launch (sm_90+): the combine's launch overlaps the split's end
    pdl = capability >= 90
    heads = (("NUM_HEADS", NUM_QO_HEADS), ("HEAD_CKV", HEAD_DIM_CKV), ("HEAD_KPE", HEAD_DIM_KPE))
    stages = (("num_warps", config.num_warps), ("num_stages", config.num_stages))
    if config.pooled:
        # 1-token tiles pool their KV ranges and cut the pool into pieces of one size, one
        # program each: at most num_splits * total_q pieces (the kernel sizes them to fit)
        num_pieces = slots = config.num_splits * T
        pooled = Launch(
            "pooled", (slots,),
            (*TENSOR_SLOTS, ARG_PART_O, ARG_PART_LSE, ARG_TABLE, *qs, T, s.batch, ARG_SCALE,
             num_pieces),
            (*heads, ("BLOCK_N", config.block_n), ("MIN_CHUNK", config.min_chunk),
             ("BLOCK_TQ", max(16, pow2_at_least(T))), ("OFFS32", offs32), ("GUESS32", guess32),
             ("INTERPRET", interpret), ("USE_PDL", pdl)),
            stages,
        )  # fmt: skip
        combine = _combine(T, 1, pdl, s.out_strides, s.lse_strides, False)
        return LaunchPlan(config, *split_layout(config, T, s.batch), (pooled, combine))
    bt = config.block_t
    partials, table = split_layout(config, T, s.batch)
    # the order kernel's records (tiles that follow the sequences, longest sequences first) or
    # the schedule's work table, unless the table was written before the call
    table_kernel = None if table_ready else table_launch(config, T, s.batch, pdl)
    if config.ordered:
        dst = (ARG_OUT, ARG_LSE, ARG_TABLE)
        grid = (ordered_slots(T, bt, s.batch),)
    elif config.split:
        # one program per piece: partials [slots, block_t, 16, 512] and [slots, block_t, 16], a
        # piece's rows from its tile's first token; a tile of one piece writes output and lse
        # directly
        dst = (ARG_PART_O, ARG_PART_LSE, ARG_TABLE)
        o_strides = (bt * NUM_QO_HEADS * HEAD_DIM_CKV, NUM_QO_HEADS * HEAD_DIM_CKV, HEAD_DIM_CKV)
        l_strides = (bt * NUM_QO_HEADS, NUM_QO_HEADS, 1)
        grid = (split_slots(config, T, s.batch),)
    else:
        dst = (ARG_OUT, ARG_LSE, "qo_indptr")  # (the table's pointer is not read)
        grid = (-(-T // bt),)
    if not config.split:
        # programs write the output itself: no piece stride
        o_strides = (0, *s.out_strides)
        l_strides = (0, *s.lse_strides)
    args = (
        *TENSOR_SLOTS, *dst, ARG_OUT, ARG_LSE, *qs, *o_strides, *l_strides, *s.out_strides,
        *s.lse_strides, T, s.batch, ARG_SCALE,
    )  # fmt: skip
    # after a table kernel, a programmatic dependent launch: its launch overlaps the table's
    wait = pdl and table_kernel is not None
    consts = (
        *heads, ("BLOCK_T", bt), ("BLOCK_N", config.block_n), ("SCHEDULED", config.split),
        ("RECORDS", config.split or config.ordered), ("WAIT_TABLE", wait), ("OFFS32", offs32),
    )  # fmt: skip
    if config.kernel == "gluon":
        main = Launch("gluon", grid, args, consts, (("num_warps", 4), ("launch_pdl", wait)))
    else:
        main = Launch(
            "tile", grid, (*args, s.num_kv),
            (*consts, ("GUESS32", guess32), ("INTERPRET", interpret)),
            (*stages, ("launch_pdl", wait)),
        )  # fmt: skip
    launches = (main,) if table_kernel is None else (table_kernel, main)
    if config.split:
        launches += (_combine(T, bt, pdl, s.out_strides, s.lse_strides, True),)
    return LaunchPlan(config, partials, table, launches)


def partial_elements(plan: LaunchPlan) -> Optional[Tuple[int, int, int]]:
    """(output, lse, table) element counts of the plan's buffers; None without any."""
    return buffer_elements(plan.partials, plan.table)


def buffer_elements(partials: Tuple[int, ...], table: int) -> Optional[Tuple[int, int, int]]:
    """(output, lse, table) element counts of split buffers of ``split_layout``'s
    ``(partials, table)``; None without any."""
    if not table:
        return None
    rows = math.prod(partials) * NUM_QO_HEADS if partials else 0
    return rows * HEAD_DIM_CKV, rows, table

"""Tile and split selection for the MLA paged prefill kernel.

Everything here is derived from tensor *shapes*, never from tensor values, so choosing a
configuration costs no host/device synchronisation and the call stays capturable in a CUDA graph.
"""

from dataclasses import dataclass
from typing import Tuple

from .targets import DEFAULT_TARGET, Target
from .validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS

PARTIAL_BYTES_CAP = 256 << 20  # fp32 partial outputs of a split launch stay under this
MAX_SPLITS = 64  # pieces per token (1-token tiles) or per tile of the global tiling
MAX_SPLIT_TOKENS = 1024  # a KV split sizes every token's range in one vector per program
KERNELS = ("triton", "gluon")  # gluon: warp-specialised Hopper kernel for 64-row tiles
# tiles in work order: the order kernel sorts the sequences and places every tile in one vector;
# from 4 sequences (3 of 1.5-1.9K new tokens over 4-5.5K positions ran 4% slower ordered: each
# fills waves by itself, and the global tiling is longest-first within each)
MAX_ORDERED_TILES = 2048
MIN_ORDERED_SEQS, MAX_ORDERED_SEQS = 4, 256
DEFAULT_MIN_CHUNK = 128  # KV positions: below this a split costs more (partial write) than it saves


def ordered_slots(total_q: int, block_t: int, batch: int) -> int:
    """Programs of tiles in work order: at least one per tile of the sequences' tilings, which
    number at most ``min(total_q, num_tiles + batch)``."""
    return max(1, min(total_q, -(-total_q // block_t) + batch))


def ordered_fits(total_q: int, block_t: int, batch: int) -> bool:
    """Whether the order kernel can order this batch's tiles: its sort takes at most
    ``MAX_ORDERED_SEQS`` sequences and its record vector ``MAX_ORDERED_TILES`` programs."""
    return batch <= MAX_ORDERED_SEQS and ordered_slots(total_q, block_t, batch) <= MAX_ORDERED_TILES


def pools_ranges(block_t: int, kernel: str) -> bool:
    """Whether a KV split of these tiles pools the ranges of all tokens into equal pieces
    (``_mla_pooled_split_kernel``): 1-token tiles of the Triton kernel. Larger tiles split on a
    schedule (``_split_schedule_kernel``)."""
    return block_t == 1 and kernel == "triton"


def shared_estimate(block_t: int, block_n: int, num_stages: int, capability: int) -> int:
    """An upper bound on the shared memory (bytes) Triton gives ``_mla_prefill_kernel`` or
    ``_mla_pooled_split_kernel`` with these tiles on ``capability``: the gathered K/V rows
    (``[block_n, 576]`` bf16) per buffer, the query tile and the ``P`` tile.

    Compiled figures it bounds (``mla-prefill portability`` checks every chosen launch): Triton
    3.6's pipeliner keeps the query tile and ``num_stages - 1`` gather buffers for ``mma.sync``
    tiles (16/32 rows, and every tile below sm_90), Triton 3.9's ``num_stages`` gather buffers
    (1-token tiles at 64-key steps, 2 stages: 94,208 B under 3.6, 149,504 under 3.9); 64-row
    ``wgmma`` tiles on sm_90 keep ``num_stages`` (221,440 B at 4, 64, 2); 64-row ``tcgen05``
    tiles on sm_100 twice that (the rows feed two MMAs: 353,280 B at 4, 64, 2). One stage is not
    pipelined and converts layouts through shared memory (bounded as two buffers).
    """
    block_m = block_t * NUM_QO_HEADS
    row = (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    p_tile = block_m * block_n * 2
    if num_stages <= 1:
        return 2 * block_n * row + block_m * row + p_tile
    if block_m >= 64 and capability >= 90:
        bufs = 2 * num_stages if capability >= 100 else num_stages
        return bufs * block_n * row + block_m * row + p_tile
    # mma.sync: Triton 3.6 stages the query tile and num_stages - 1 gathers, 3.9 num_stages
    # gathers and no query tile
    return (
        max((num_stages - 1) * block_n * row + block_m * row, num_stages * block_n * row) + p_tile
    )


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters for one call.

    block_t:    query tokens per program; the tile has ``block_t * 16`` rows (heads packed into rows).
    block_n:    KV positions per inner-loop step.
    num_splits: 1 = no split; else the KV ranges of all tiles are cut into pieces of one size
                (a multiple of ``block_n``, at least ``min_chunk``), one program each, so long
                and short ranges cost their length, not an equal share of programs: at most
                ``num_splits * total_q`` pieces for 1-token tiles (Triton kernel, pooled), at
                most ``num_splits`` per tile of the global tiling for larger tiles (a schedule
                kernel writes the pieces, ``plan.split_slots``).
    min_chunk:  a multiple of ``block_n``; only used when ``num_splits > 1``.
    num_warps, num_stages: Triton launch knobs (the gluon kernel has its own: two warpgroups,
                two KV stages).
    kernel:     "triton" (``attention.py``) or "gluon" (``gluon_attention.py``: 4-token tiles,
                ``block_n`` 64, Hopper only).
    ordered:    no split, tiles that follow the sequences (a tile is one sequence's), the
                longest sequences' first, each sequence's tiles together from its last
                (``attention._tile_order_kernel`` writes their order); else the global token
                tiling, last tile first.
    max_slots:  a scheduled split's programs at most (0: no cap but ``plan.MAX_SLOTS``), never
                fewer than its tiles: one wave of programs where the tiles fit in one.
    """

    block_t: int
    block_n: int
    num_splits: int = 1
    min_chunk: int = DEFAULT_MIN_CHUNK
    num_warps: int = 4
    num_stages: int = 2
    kernel: str = "triton"
    ordered: bool = False
    max_slots: int = 0

    @property
    def block_m(self) -> int:
        return self.block_t * NUM_QO_HEADS

    @property
    def split(self) -> bool:
        return self.num_splits > 1

    @property
    def pooled(self) -> bool:
        """A split launched as ``_mla_pooled_split_kernel`` (see ``pools_ranges``)."""
        return self.split and pools_ranges(self.block_t, self.kernel)

    def problems(self) -> list:
        """What is wrong with this config (empty when it can launch)."""
        out = []
        if self.block_t not in (1, 2, 4, 8):
            out.append(f"block_t {self.block_t} must be 1, 2, 4 or 8")
        if self.block_n < 16 or self.block_n & (self.block_n - 1):
            out.append(f"block_n {self.block_n} must be a power of two >= 16")
        if not 1 <= self.num_splits <= MAX_SPLITS:
            out.append(f"num_splits {self.num_splits} must be in [1, {MAX_SPLITS}]")
        if self.split and (self.min_chunk < self.block_n or self.min_chunk % self.block_n):
            out.append(
                f"min_chunk {self.min_chunk} must be a positive multiple of block_n {self.block_n}"
            )
        if self.ordered and (self.split or self.block_t == 1):
            out.append("ordered tiles take no split and block_t > 1")
        if self.max_slots < 0:
            out.append(f"max_slots {self.max_slots} must be >= 0 (0: no cap)")
        if self.kernel not in KERNELS:
            out.append(f"kernel {self.kernel!r} must be one of {KERNELS}")
        elif self.kernel == "gluon" and (self.block_t, self.block_n) != (4, 64):
            out.append(
                f"the gluon kernel takes block_t 4 and block_n 64, got {self.block_t}, "
                f"{self.block_n}"
            )
        return out


def _fit(block_t: int, block_n: int, num_stages: int, target: Target) -> Tuple[int, int]:
    """(block_n, num_stages) of the Triton kernel's tile that fits ``target``'s shared memory:
    fewer stages first (down to 2), then shorter KV steps (down to 16)."""
    while shared_estimate(block_t, block_n, num_stages, target.capability) > target.max_shared:
        if num_stages > 2:
            num_stages -= 1
        elif block_n > 16:
            block_n //= 2
        else:
            raise ValueError(
                f"no tile of the Triton kernel fits {target.gpu} ({target.max_shared} bytes of "
                f"shared memory per block; {block_t}-token tiles need "
                f"{shared_estimate(block_t, 16, 2, target.capability)})"
            )
    return block_n, num_stages


MAX_POOLED_WAVES = 4  # more waves of pooled pieces: shorter pieces, more partials to combine
# a pooled piece's fixed cost in KV positions (sizing the pool, the query load, writing the
# partial: a few microseconds where a program gathers 15-20 positions per microsecond)
POOLED_PIECE_COST = 128


def _pooled_splits(total_q: int, num_sms: int, range_len: float) -> int:
    """Pieces per token of a pooled split over ranges about ``range_len`` long: ``w * num_sms //
    total_q`` for the number of waves ``w`` (1 to ``MAX_POOLED_WAVES``) that takes the least
    time, ``w * (range_len / pieces + POOLED_PIECE_COST)``; the fewest waves among equals. 64
    tokens over 16,700 positions on 132 SMs: one wave of halves, 0.41 ms against 0.52 for two
    waves of thirds (``docs/design.md``); 90 tokens: three waves of quarters."""

    def cost(w: int) -> tuple:
        pieces = w * num_sms // total_q
        return (w * (range_len / pieces + POOLED_PIECE_COST), w)

    # at least two pieces: one piece per token is the unsplit kernel's work at 2 stages, where
    # two waves of halves at 3 stages took 0.57 ms against 1.42 (122 tokens over 575K positions)
    return max(2, min(range(1, MAX_POOLED_WAVES + 1), key=cost) * num_sms // total_q)


# rows (total_q x average KV range) past which 1-token tiles of a prefix-dominated batch gather
# more than 4-token tiles split on a schedule (where the Gluon kernel runs); a quarter of it where
# sequences average >= 4 new tokens, whose 4-token tiles share each row among their tokens
HEAVY_GATHER_ROWS = 1 << 18


def choose_config(
    total_q: int,
    batch: int,
    num_kv_indices: int,
    target: Target = DEFAULT_TARGET,
    gluon_api: bool = True,
) -> KernelConfig:
    """Pick tiles from shapes and the target GPU's facts (SM count, capability, shared memory).

    - Up to two and a half waves of single-token programs (``total_q <= 2.5 * num_sms``; with
      the Gluon kernel ``1.25 * num_sms``, where it beats them from 199 tokens up): one token per
      tile (16 rows) and 32-position KV steps (16 when sequences average <= 16 positions), 3
      pipeline stages (two gathers in flight): more programs in flight, no MMA rows spent on a
      neighbour sequence's query, and short dependent-load chains. Measured on the H200
      (``docs/design.md``): 138-287 tokens run 1.05-1.7x faster this way than on 64-row tiles,
      376 and 473 tokens 0.98x / 0.93x, hence the bound. A single sequence averaging <= 16
      positions takes 2 stages and 4 warps. Within one wave (split or not), a tile's time is
      mostly its instruction stream, so 8 warps share it, with one 32-position step for short
      ranges and 64-position steps otherwise (0.3-3.6 us less on 7-21 us workloads, 7% on a
      split decode batch). Past one wave they take 8 warps too: at 4, 32-key steps over 3 stages spill
      (24-56 B on sm_90 and sm_100, depending on how Triton specialises the call).
    - Not when the batch is prefix-dominated and heavy (``HEAVY_GATHER_ROWS``) where the Gluon
      kernel runs: 1-token tiles read every KV range once per token, 4-token tiles once per
      tile, and the Gluon kernel gathers faster. Measured on the H200 (``docs/design.md``):
      batches of 1-4 new tokens over 2-32K cached positions 1.2-4.7x faster this way (64
      sequences x 1 token over 16,700: 0.34 ms against 0.41), 101 tokens of 6 sequences over
      5,117 positions 2.3x; 22 tokens over 17,759 (ed999c80, 1-token tiles 0.022 ms against
      0.037) and 18 tokens of 10 sequences over 74,716 (0.054 against 0.064) stay below it.
    - Otherwise the Gluon kernel's 64-row tiles where it runs (sm_90 with Triton 3.6's Gluon
      API; ``gluon_api`` is False where it cannot run, e.g. the interpreter: 1.27-1.88x the Triton kernel from 199 tokens up), else
      the Triton kernel's 2-token tiles (``docs/design.md``). Every Triton tile then takes the
      deepest pipeline that fits the target's shared memory (``_fit``).
    - When sequences average >= 256 KV positions and the prefix dominates (at least as many KV
      positions as queries again), the KV is split, no piece shorter than
      ``DEFAULT_MIN_CHUNK``: 1-token tiles pool their ranges into whole waves of pieces of one
      size (``num_splits * total_q`` programs, ``_pooled_splits``; 3 stages where they fit),
      larger tiles, when they leave SMs idle, cut the ranges of all tiles into pieces of one
      size, ``num_sms // num_tiles`` per tile (at least 2) and at most ``num_sms`` programs
      (``max_slots``; every tile keeps one): one wave (``docs/design.md``); the split count is bounded so the fp32 partial outputs stay under
      ``PARTIAL_BYTES_CAP``.
    - When such a batch of ``MIN_ORDERED_SEQS`` to ``MAX_ORDERED_SEQS`` sequences is not split
      (a wave of tiles or more), its tiles follow the sequences and the longest sequences' start
      first (``ordered``): the global tiling's order can leave the longest tiles to the last
      wave. Measured on an H100 (``docs/design.md``): batches with empty sequences over long
      prefixes 1.02-1.71x faster.
    """
    if total_q <= 0:
        raise ValueError(f"choose_config: total_q must be > 0, got {total_q}")
    batch = max(batch, 1)
    num_sms = target.num_sms
    avg_kv = num_kv_indices / batch
    gluon = gluon_api and target.capability == 90
    # the prefix dominates: a tile's KV range is split when the tiles leave SMs idle (below)
    long_prefix = avg_kv >= 256 and num_kv_indices >= 2 * total_q
    # prefix-dominated and heavy: 4-token Gluon tiles read a range once per tile, not per token
    rows = total_q * avg_kv
    heavy_prefix = (
        gluon
        and long_prefix
        and (rows >= HEAVY_GATHER_ROWS or (total_q >= 4 * batch and 4 * rows >= HEAVY_GATHER_ROWS))
    )
    # 16-row tiles up to 2.5 waves, or 1.25 where the Gluon kernel takes the 64-row ones
    if (4 if gluon else 2) * total_q <= 5 * num_sms and not heavy_prefix:
        # 16-position steps when sequences are that short (half the gather and MMA of a step)
        block_t, block_n, num_warps, num_stages = 1, 16 if avg_kv <= 16 else 32, 8, 3
        if batch == 1 and avg_kv <= 16:
            # one or two steps: a third buffer only lengthens the prologue; 4 warps
            num_warps, num_stages = 4, 2
        elif total_q <= num_sms:
            # one wave: a tile's time is its instruction stream (address math of the gather,
            # MMA fragments), so 8 warps share it; one 32-key step for short ranges (ranges of
            # several sequences average <= 17 keys), else 64-key steps (2 stages: measured faster
            # than 1 even on one-step ranges). Split decode batches too (33.8 us against 36.2
            # for 4 warps / 32-key steps on ed999c80); their pooled pieces then take 3 stages
            num_warps = 8
            if avg_kv <= (32 if batch == 1 else 17):
                block_n, num_stages = 32, 2
            else:
                block_n, num_stages = 64, 2
    elif gluon:
        block_t, block_n, num_warps, num_stages = 4, 64, 4, 2  # warps of the default partition
    else:
        # 2-token (32-row) tiles: a 64-row tl.dot spills on every GPU (``docs/design.md``)
        block_t, block_n, num_warps, num_stages = 2, 32, 8, 4
    kernel = "gluon" if gluon and block_t == 4 else "triton"
    if kernel == "triton":
        block_n, num_stages = _fit(block_t, block_n, num_stages, target)
    num_tiles = -(-total_q // block_t)
    num_splits, max_slots = 1, 0
    if num_tiles < num_sms and long_prefix:
        # pooled pieces (1-token tiles, Triton kernel) are all alike: whole waves of them, with
        # the gathers double-buffered where 3 stages fit (ed999c80: 23.5 us against 25.4 at 2
        # stages, 26.6 at two waves of 128-key pieces). Scheduled pieces: one wave
        pooled = pools_ranges(block_t, kernel)
        if (
            pooled
            and target.capability < 100  # sm_100 spills 24 B at 3 stages
            and shared_estimate(1, block_n, 3, target.capability) <= target.max_shared
        ):
            num_stages = 3  # 167,936 B at 64-key steps: more than an A100 has
        if pooled:
            num_splits = _pooled_splits(num_tiles, num_sms, avg_kv)
        else:
            # one wave of scheduled pieces, never a partial second one where one wave can hold
            # them all (tiles of one piece then write their output without the combine): from
            # 67 tiles on 132 SMs two pieces per tile would be 1.02-1.98 waves, so the programs
            # are capped at the SM count (every tile keeps one)
            num_splits, max_slots = max(2, num_sms // num_tiles), num_sms
        num_splits = min(num_splits, -(-num_kv_indices // DEFAULT_MIN_CHUNK))
        max_splits = max(1, PARTIAL_BYTES_CAP // (total_q * NUM_QO_HEADS * HEAD_DIM_CKV * 4))
        num_splits = max(1, min(num_splits, max_splits, MAX_SPLITS))
    # unequal tiles past one wave: the longest sequences' first, one sequence per tile
    ordered = (
        block_t > 1
        and num_splits == 1
        and long_prefix
        and batch >= MIN_ORDERED_SEQS
        and num_tiles >= num_sms
        and ordered_fits(total_q, block_t, batch)
    )
    min_chunk = max(DEFAULT_MIN_CHUNK // block_n, 1) * block_n
    return KernelConfig(
        block_t,
        block_n,
        num_splits,
        min_chunk,
        num_warps,
        num_stages,
        kernel,
        ordered,
        max_slots if num_splits > 1 else 0,
    )

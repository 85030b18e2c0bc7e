"""Tile and split selection for the MLA paged prefill kernel.

Everything here is derived from tensor *shapes*, never from tensor values, so choosing a
configuration costs no host/device synchronisation and the call stays capturable in a CUDA graph.
"""

from dataclasses import dataclass

from .validate import HEAD_DIM_CKV, NUM_QO_HEADS

NUM_SMS_HOPPER = 132
PARTIAL_BYTES_CAP = 256 << 20  # fp32 partial outputs of a split launch stay under this
MAX_SPLITS = 64  # the combine reads every per-tile split of a row in one load
MAX_POOLED_TOKENS = 1024  # a pooled split sizes every token's range in one vector per program
KERNELS = ("triton", "gluon")  # gluon: warp-specialised Hopper kernel for 64-row tiles
DEFAULT_MIN_CHUNK = 128  # KV positions: below this a split costs more (partial write) than it saves


def pools_ranges(block_t: int, kernel: str) -> bool:
    """Whether a KV split of these tiles pools the ranges of all tokens into equal pieces
    (``_mla_pooled_split_kernel``): 1-token tiles of the Triton kernel. Other tiles split per tile."""
    return block_t == 1 and kernel == "triton"


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters for one call.

    block_t:    query tokens per program; the tile has ``block_t * 16`` rows (heads packed into rows).
    block_n:    KV positions per inner-loop step.
    num_splits: programs per query tile along the KV axis; 1 = no split. Each (tile, sequence) KV
                range is cut into ``num_splits`` equal ``block_n``-aligned pieces of at least
                ``min_chunk`` positions (shorter ranges leave the last splits empty). 1-token
                tiles (Triton kernel) pool instead: the ranges of all tokens are cut into about
                ``num_splits * total_q`` pieces of one size (at least ``min_chunk``), so long
                and short ranges cost their length, not an equal share of programs.
    min_chunk:  a multiple of ``block_n``; only used when ``num_splits > 1``.
    num_warps, num_stages: Triton launch knobs (the gluon kernel has its own: two warpgroups,
                two KV stages).
    kernel:     "triton" (``attention.py``) or "gluon" (``gluon_attention.py``: 4-token tiles,
                ``block_n`` 64, Hopper only).
    """

    block_t: int
    block_n: int
    num_splits: int = 1
    min_chunk: int = DEFAULT_MIN_CHUNK
    num_warps: int = 4
    num_stages: int = 2
    kernel: str = "triton"

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
        if self.kernel not in KERNELS:
            out.append(f"kernel {self.kernel!r} must be one of {KERNELS}")
        elif self.kernel == "gluon" and (self.block_t, self.block_n) != (4, 64):
            out.append(
                f"the gluon kernel takes block_t 4 and block_n 64, got {self.block_t}, "
                f"{self.block_n}"
            )
        return out


def choose_config(
    total_q: int,
    batch: int,
    num_kv_indices: int,
    num_sms: int = NUM_SMS_HOPPER,
    interpret: bool = False,
    hopper: bool = False,
) -> KernelConfig:
    """Pick tiles from shapes alone.

    - Up to two and a half waves of single-token programs (``total_q <= 2.5 * num_sms``; on
      Hopper ``1.25 * num_sms``, where the Gluon kernel beats them from 199 tokens up): one
      token per tile (16 rows) and 32-position KV steps (16 when sequences average <= 16
      positions), 3 pipeline stages (two gathers in flight): more programs in flight, no MMA rows
      spent on a neighbour sequence's query, and short dependent-load chains. Measured on H200
      (benchmarks/NOTES.md, session 3): 138-287 tokens run 1.05-1.7x faster this way than on
      64-row tiles, 376 and 473 tokens 0.98x / 0.93x, hence the bound. A single sequence
      averaging <= 16 positions takes 2 stages (session 5). Within one wave (split or not),
      a tile's time is mostly its instruction stream, so 8 warps share it, with one 32-position
      step for short ranges and 64-position steps otherwise: 0.3-3.6 us less on 7-21 us
      workloads (session 6), and 7% less on a split decode batch (session 8).
    - Otherwise 4 tokens (64 rows): the widest tile whose fp32 ``[64, 512]`` accumulator fits the
      register file of two warpgroups. On Hopper (``hopper``, never under the interpreter) these
      tiles run the warp-specialised Gluon kernel (64-key blocks): 1.27-1.88x the Triton
      kernel's speed on every workload from 199 tokens up (benchmarks/NOTES.md, session 4).
    - When the query tiles leave SMs idle, sequences average >= 256 KV positions and the prefix
      dominates (at least as many KV positions as queries again), the KV is split, no piece
      shorter than ``DEFAULT_MIN_CHUNK``: 1-token tiles pool their ranges into about one wave
      of equal pieces (``num_splits * total_q``, 3 stages), larger tiles cut every tile's range
      over about two waves of programs (``num_splits`` per tile); the split count is bounded so
      the fp32 partial outputs stay under ``PARTIAL_BYTES_CAP``.
    """
    if total_q <= 0:
        raise ValueError(f"choose_config: total_q must be > 0, got {total_q}")
    batch = max(batch, 1)
    avg_kv = num_kv_indices / batch
    gluon = hopper and not interpret
    # the prefix dominates: a tile's KV range is split when the tiles leave SMs idle (below)
    long_prefix = avg_kv >= 256 and num_kv_indices >= 2 * total_q
    # 16-row tiles up to 2.5 waves, or 1.25 where the Gluon kernel takes the 64-row ones
    if (4 if gluon else 2) * total_q <= 5 * num_sms:
        # 16-position steps when sequences are that short (half the gather and MMA of a step)
        block_t, block_n, num_warps, num_stages = 1, 16 if avg_kv <= 16 else 32, 4, 3
        if batch == 1 and avg_kv <= 16:
            num_stages = 2  # one or two steps: a third buffer only lengthens the prologue
        elif total_q <= num_sms:
            # one wave: a tile's time is its instruction stream (address math of the gather,
            # MMA fragments), so 8 warps share it; one 32-key step for short ranges (ranges of
            # several sequences average <= 17 keys), else 64-key steps (2 stages: measured faster
            # than 1 even on one-step ranges, session 7). Split decode batches too (session 8:
            # 33.8 us against 36.2 for 4 warps / 32-key steps on ed999c80); their pooled pieces
            # then take 3 stages (below)
            num_warps = 8
            if avg_kv <= (32 if batch == 1 else 17):
                block_n, num_stages = 32, 2
            else:
                block_n, num_stages = 64, 2
    else:
        block_t, block_n, num_warps, num_stages = 4, 64, 8, 2
    kernel = "gluon" if gluon and block_t == 4 else "triton"
    if kernel == "gluon":
        num_warps = 4  # the default partition; the loader warpgroup is added by warp_specialize
    if interpret:
        block_n = 16  # the interpreter ignores warps/stages; small steps exercise the loop bounds
    num_tiles = -(-total_q // block_t)
    num_splits = 1
    if num_tiles < num_sms and long_prefix:
        # pooled pieces (1-token tiles, Triton kernel) are all alike: about one wave of them,
        # with the gathers double-buffered (ed999c80: 23.5 us against 25.4 at 2 stages, 26.6 at
        # two waves of 128-key pieces; session 9). Per-tile splits: about two waves
        pooled = pools_ranges(block_t, kernel)
        if pooled and hopper:
            num_stages = 3  # 168 KB of shared memory at 64-key steps: more than an A100 has
        num_splits = -(-(1 if pooled else 2) * num_sms // num_tiles)
        num_splits = min(num_splits, -(-num_kv_indices // DEFAULT_MIN_CHUNK))
        max_splits = max(1, PARTIAL_BYTES_CAP // (total_q * NUM_QO_HEADS * HEAD_DIM_CKV * 4))
        num_splits = max(1, min(num_splits, max_splits, MAX_SPLITS))
    min_chunk = max(DEFAULT_MIN_CHUNK // block_n, 1) * block_n
    return KernelConfig(block_t, block_n, num_splits, min_chunk, num_warps, num_stages, kernel)

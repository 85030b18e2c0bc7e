"""Tile and split selection for the MLA paged prefill kernel.

Everything here is derived from tensor *shapes*, never from tensor values, so choosing a
configuration costs no host/device synchronisation and the call stays capturable in a CUDA graph.
"""

from dataclasses import dataclass, replace

from .validate import HEAD_DIM_CKV, NUM_QO_HEADS

NUM_SMS_HOPPER = 132
PARTIAL_BYTES_CAP = 256 << 20  # fp32 partial outputs of a split launch stay under this


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters for one call.

    block_t:    query tokens per program; the tile has ``block_t * 16`` rows (heads packed into rows).
    block_n:    KV positions per inner-loop step.
    kv_chunk:   0, or the KV positions each split program takes (a multiple of ``block_n``).
    num_splits: programs per query tile along the KV axis (1 when ``kv_chunk == 0``).
    num_warps, num_stages: Triton launch knobs.
    """

    block_t: int
    block_n: int
    kv_chunk: int
    num_splits: int
    num_warps: int
    num_stages: int

    @property
    def block_m(self) -> int:
        return self.block_t * NUM_QO_HEADS


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def choose_config(
    total_q: int,
    batch: int,
    num_kv_indices: int,
    num_sms: int = NUM_SMS_HOPPER,
    interpret: bool = False,
) -> KernelConfig:
    """Pick tiles from shapes alone.

    - Up to one wave of single-token programs (``total_q <= num_sms``): one token per tile
      (16 rows) and 32-position KV steps: more programs in flight, no MMA rows spent on a
      neighbour sequence's query, and short dependent-load chains (measured on H200: NOTES.md).
    - Otherwise 4 tokens (64 rows): the widest tile whose fp32 ``[64, 512]`` accumulator fits the
      register file of two warpgroups.
    - When the query tiles leave SMs idle and sequences average >= 256 KV positions, every KV
      range is cut into ``kv_chunk`` pieces sized for about two waves of programs. The split
      count is bounded by ``num_kv_indices`` (no sequence is longer), and the chunk grows until
      the fp32 partial outputs fit ``PARTIAL_BYTES_CAP``.
    """
    if total_q <= 0:
        raise ValueError(f"choose_config: total_q must be > 0, got {total_q}")
    batch = max(batch, 1)
    if total_q <= num_sms:
        block_t, block_n, num_warps, num_stages = 1, 32, 4, 2
    else:
        block_t, block_n, num_warps, num_stages = 4, 64, 8, 2
    if interpret:
        block_n = 16  # the interpreter ignores warps/stages; small steps exercise the loop bounds
    num_tiles = -(-total_q // block_t)
    avg_kv = num_kv_indices / batch
    kv_chunk, num_splits = 0, 1
    if num_tiles < num_sms and avg_kv >= 256:
        work = num_tiles * avg_kv
        kv_chunk = max(2 * block_n, _round_up(int(work // (2 * num_sms)) + 1, block_n))
        max_splits = max(1, PARTIAL_BYTES_CAP // (total_q * NUM_QO_HEADS * HEAD_DIM_CKV * 4))
        num_splits = -(-num_kv_indices // kv_chunk)
        if num_splits > max_splits:
            kv_chunk = _round_up(-(-num_kv_indices // max_splits), block_n)
            num_splits = -(-num_kv_indices // kv_chunk)
        if num_splits <= 1:
            kv_chunk, num_splits = 0, 1
    cfg = KernelConfig(block_t, block_n, kv_chunk, num_splits, num_warps, num_stages)
    return cfg


def with_split(cfg: KernelConfig, kv_chunk: int, num_kv_indices: int) -> KernelConfig:
    """``cfg`` with a forced KV split of ``kv_chunk`` positions (tests and experiments)."""
    if kv_chunk <= 0:
        return replace(cfg, kv_chunk=0, num_splits=1)
    return replace(cfg, kv_chunk=kv_chunk, num_splits=max(1, -(-num_kv_indices // kv_chunk)))

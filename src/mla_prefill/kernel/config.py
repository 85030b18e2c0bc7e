"""Tile and split selection for the MLA paged prefill kernel.

Everything here is derived from tensor *shapes*, never from tensor values, so choosing a
configuration costs no host/device synchronisation and the call stays capturable in a CUDA graph.
"""

from dataclasses import dataclass, replace

NUM_SMS_HOPPER = 132


@dataclass(frozen=True)
class KernelConfig:
    """Launch parameters for one call.

    block_t:    query tokens per program; the tile has ``block_t * 16`` rows (heads packed into rows).
    block_n:    KV rows per inner-loop step.
    num_splits: KV ranges per query tile; > 1 adds a combine launch (decode-like batches).
    num_warps, num_stages: Triton launch knobs.
    """

    block_t: int
    block_n: int
    num_splits: int
    num_warps: int
    num_stages: int

    @property
    def block_m(self) -> int:
        return self.block_t * 16


def choose_config(
    total_q: int,
    batch: int,
    num_kv_indices: int,
    num_sms: int = NUM_SMS_HOPPER,
    interpret: bool = False,
) -> KernelConfig:
    """Pick tiles from shapes alone.

    - ``total_q == batch`` (one token per sequence, decode-like): one token per tile
      (16 rows), so no MMA rows are wasted on a neighbour's query.
    - otherwise 4 tokens (64 rows): the widest tile whose fp32 ``[64, 512]`` accumulator fits the
      register file of two warpgroups.
    - when the query tiles cannot fill the SMs and the average sequence has a long KV range,
      split that range so that about two waves of programs exist.
    """
    if total_q <= 0:
        raise ValueError(f"choose_config: total_q must be > 0, got {total_q}")
    batch = max(batch, 1)
    block_t = 1 if total_q <= batch else 4
    num_tiles = -(-total_q // block_t)
    avg_kv = num_kv_indices / batch
    num_splits = 1
    if num_tiles < num_sms and avg_kv >= 256 and total_q <= 512:
        num_splits = min(16, max(1, (2 * num_sms) // num_tiles), max(1, int(avg_kv // 128)))
    if block_t == 1:
        cfg = KernelConfig(block_t=1, block_n=64, num_splits=num_splits, num_warps=4, num_stages=2)
    else:
        cfg = KernelConfig(block_t=4, block_n=64, num_splits=num_splits, num_warps=8, num_stages=2)
    if interpret:
        # The interpreter ignores warps/stages; small KV steps exercise the loop bounds.
        cfg = replace(cfg, block_n=16)
    return cfg

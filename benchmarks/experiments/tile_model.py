"""A cost model of the Gluon launch (session 15, no device time): how much of each Gluon
workload's time is per-tile overhead, and what a persistent launch could at most take off.

Each 4-token tile of a workload (rebuilt from ``blob/workload_lengths.json`` with the kernel's
own tiling: ranges per sequence the tile touches, 64-key blocks to each row's causal bound) costs
``f + r * (ranges - 1) + b * blocks`` microseconds; tiles go longest first to the earliest free
of 132 SMs (the hardware's block scheduler, one program per SM), plus ``once`` per SM and the
3.8 us empty-kernel floor. ``f``, ``r``, ``b`` and ``once`` are fitted (grid search, squared
relative error) to our GPU-side times in ``benchmarks/h200.json``. A persistent launch is then
modelled as the same tiles with ``f`` paid only by each SM's first tile and ``f_next`` by the
later ones, taken from an atomic counter (dynamic) or in a static snake order.

    PYTHONPATH=src python benchmarks/experiments/tile_model.py [F_NEXT ...]   # default 1.5 2.5

Only a model: its per-tile ``f`` is what the fit needs, not a measurement
(``gluon_phases.py``'s ``per_program`` measures the prologue, epilogue and gaps).
"""

import heapq
import itertools
import json
import sys
from pathlib import Path

from mla_prefill.kernel.config import choose_config
from mla_prefill.kernel.targets import TARGETS

H200 = TARGETS["h200"]
SMS = H200.num_sms

ROOT = Path(__file__).resolve().parents[2]
FLOOR, BLOCK_T, BLOCK_N = 3.8, 4, 64  # empty-kernel floor (us); the Gluon kernel's tile


def tiles(seqs):
    """Per tile, in the longest-first launch order: (sequence ranges it runs, 64-key blocks)."""
    qo = list(itertools.accumulate((q for q, _ in seqs), initial=0))
    out = []
    for t0 in range(0, qo[-1], BLOCK_T):
        t1 = min(t0 + BLOCK_T, qo[-1])
        ranges = blocks = 0
        for b, (q, kv) in enumerate(seqs):
            if q == 0 or qo[b + 1] <= t0 or qo[b] >= t1:
                continue
            last = min(t1, qo[b + 1]) - 1 - qo[b]  # the tile's last row of this sequence
            ranges += 1
            blocks += -(-max(min(kv, kv - q + last + 1), 0) // BLOCK_N)
        out.append((ranges, blocks))
    return out[::-1]


def predict(tl, once, f, r, b, f_next=None, snake=False):
    """Modelled GPU time in us. ``f_next``: a persistent launch (later tiles of an SM pay it
    instead of ``f``), dynamic (greedy, as an atomic counter) or ``snake`` (static)."""
    f_next = f if f_next is None else f_next
    if snake:
        loads, seen = [0.0] * SMS, [False] * SMS
        for k, (nr, nb) in enumerate(tl):
            rnd, j = divmod(k, SMS)
            i = j if rnd % 2 == 0 else SMS - 1 - j
            loads[i] += (f_next if seen[i] else f) + r * (nr - 1) + b * nb
            seen[i] = True
        return FLOOR + once + max(loads)
    heap = [(0.0, False)] * SMS  # each tile to the SM that frees first: the hardware's scheduler
    for nr, nb in tl:
        t, seen = heapq.heappop(heap)
        heapq.heappush(heap, (t + (f_next if seen else f) + r * (nr - 1) + b * nb, True))
    return FLOOR + once + max(t for t, _ in heap)


def main(f_next_values):
    lengths = json.loads((ROOT / "blob" / "workload_lengths.json").read_text())
    bench = json.loads((ROOT / "benchmarks" / "h200.json").read_text())
    rows = []
    for w in bench["workloads"]:  # the ones Hopper runs on the Gluon kernel, without a split
        cfg = choose_config(w["total_q"], w["batch"], w["num_kv_indices"], H200)
        if cfg.kernel == "gluon" and not cfg.split:
            assert (cfg.block_t, cfg.block_n) == (BLOCK_T, BLOCK_N), cfg
            rows.append((w["uuid"][:8], tiles(lengths[w["uuid"]]), w["ours"]["gpu_ms"] * 1e3))
    grid = itertools.product(
        [x / 2 for x in range(13)], [x / 4 for x in range(25)], [0, 1, 2, 3], [1.8, 1.85, 1.9, 2.0]
    )
    err, once, f, r, b = min(
        (sum(((predict(tl, *p) - m) / m) ** 2 for _, tl, m in rows), *p) for p in grid
    )
    print(f"fit: once {once} us per SM, f {f} us per tile, r {r} us per extra range, "
          f"b {b} us per 64-key block (sum of squared relative errors {err:.3f})")  # fmt: skip
    head = "".join(f"  dyn@{x}  snake@{x}" for x in f_next_values)
    print(f"workload  tiles  ours us  model us{head}   (persistent / model)")
    for name, tl, measured in rows:
        base = predict(tl, once, f, r, b)
        cols = "".join(
            f"  {predict(tl, once, f, r, b, x) / base:6.3f}"
            f"  {predict(tl, once, f, r, b, x, True) / base:8.3f}"
            for x in f_next_values
        )
        print(f"{name}  {len(tl):5d}  {measured:7.1f}  {base:8.1f}{cols}")


if __name__ == "__main__":
    main([float(x) for x in sys.argv[1:]] or [1.5, 2.5])

"""GPU time of candidate tiles per batch, beside our default plan and FlashInfer: the evidence a
tile-choice rule in ``kernel/config.py`` is written from.

Batches: the 60 of ``mla-prefill bench --random 60 --seed 7`` and its fixed decode batch, ten
of the 38 workloads' length lists (random indices), and four uniform decode batches. For each,
the candidates that apply to its shape: 1-token Triton tiles (64- and 32-key steps), 4-token
Gluon tiles unsplit (global tiling, and, for several sequences past one wave of tiles, tiles
in work order), and, when the prefix dominates, split on a schedule over about 1, 2, 3, 4
and 6 waves of programs (partials under 256 MB), and pooled 1-token pieces of 2, 4 and 8 per
token. Each
is timed as ``mla-prefill bench`` times GPU-side (cold L2, events, stream held, median of up to
30 calls); then the inputs are refilled in place and every candidate is called again on
poisoned outputs and compared with the fast fp32 reference (``bench.recheck``).
Batches of more than 4,200 tokens are skipped (their tiles are not in question).

    python tools/tile_sweep.py OUT.json [KINDS]   (on a GPU; writes OUT.json after every batch)

``KINDS``: comma-separated substrings of the batch kinds to run (e.g. ``prefix,decode``).

Unlike ``bench --random --configs``, the candidates differ per batch, so one run covers every
shape class in a few minutes.
"""

import datetime
import json
import sys
import time

import torch

from mla_prefill.accuracy import poisoned_outputs, reference_fast, versions
from mla_prefill.bench import (
    DECODE_BATCH,
    SCRUB_BYTES,
    flashinfer_planned,
    ours,
    random_batches,
    recheck,
    time_gpu_fitted,
)
from mla_prefill.blobs import LENGTHS_FILE
from mla_prefill.fuzz import Batch, kernel_sha256, make_batch_inputs
from mla_prefill.io import repo_root
from mla_prefill.kernel.config import PARTIAL_BYTES_CAP, KernelConfig, choose_config
from mla_prefill.kernel.main import config_problems
from mla_prefill.kernel.targets import TARGETS
from mla_prefill.kernel.validate import HEAD_DIM_CKV, NUM_QO_HEADS

WORKLOADS = ("ed999c80", "892d1b8f", "805238ee", "74202b1d", "053a88a3", "733a7bbe", "bb28f188",
             "77737de2", "f96b666d", "d44f32e1")  # fmt: skip
UNIFORM_DECODE = [
    ("decode 64x1 over 4K", [(1, 4096)] * 64),
    ("decode 128x2 over 8K", [(2, 8192)] * 128),
    ("decode 32x4 over 32K", [(4, 32768)] * 32),
    ("decode 16x1 over 64K", [(1, 65536)] * 16),
]
MAX_TOKENS = 4200
PARTIAL_ROW_BYTES = NUM_QO_HEADS * HEAD_DIM_CKV * 4  # one token's fp32 split partial
H200 = TARGETS["h200"]


def batches():
    lengths = json.loads((repo_root() / LENGTHS_FILE).read_text())
    out = random_batches(60, 7) + [DECODE_BATCH]
    out += [
        (f"wl {u[:8]}", [tuple(x) for x in v]) for u, v in lengths.items() if u[:8] in WORKLOADS
    ]
    return out + UNIFORM_DECODE


def candidates(T: int, B: int, K: int):
    c = []
    if T <= 2048 and K / B <= 4096:
        c += [KernelConfig(1, 64, 1, 128, 8, 2), KernelConfig(1, 32, 1, 128, 8, 3)]
    tiles = -(-T // 4)
    c.append(KernelConfig(4, 64, 1, 128, 4, 2, "gluon"))
    ordered = KernelConfig(4, 64, 1, 128, 4, 2, "gluon", ordered=True)
    if B > 1 and H200.num_sms <= tiles:
        c.append(ordered)
    if K >= 2 * T:
        # scheduled splits: pieces of one size over about w waves of programs
        for w in (1, 2, 3, 4, 6):
            s = -(-w * H200.num_sms // tiles)
            if 1 < s <= 64 and s * tiles * 4 * PARTIAL_ROW_BYTES <= PARTIAL_BYTES_CAP:
                c.append(KernelConfig(4, 64, s, 128, 4, 2, "gluon"))
    if T <= 512 and K >= 2 * T:
        c += [
            KernelConfig(1, 64, s, 128, 8, 3)
            for s in (2, 4, 8)
            if s * T * PARTIAL_ROW_BYTES <= PARTIAL_BYTES_CAP
        ]
    # only what the dispatcher accepts for this batch (the order kernel's and a split's bounds)
    return [x for x in c if not config_problems(x, T, B, H200, False)]


def name(c: KernelConfig) -> str:
    order = ",ordered" if c.ordered else ""
    return f"{c.kernel[0]}{c.block_t},{c.block_n},s{c.num_splits},w{c.num_warps},st{c.num_stages}{order}"


def main(out_path: str, kinds: str = "") -> None:
    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "versions": versions(),
        "kernel_sha256": kernel_sha256(),
        "command": " ".join(["python tools/tile_sweep.py", out_path, kinds]).strip(),
        "method": __doc__.strip(),
        "rows": [],
    }
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    t_start = time.time()
    for i, (kind, lengths) in enumerate(batches()):
        T, K, B = sum(q for q, _ in lengths), sum(k for _, k in lengths), len(lengths)
        if T > MAX_TOKENS or (kinds and not any(k in kind for k in kinds.split(","))):
            continue
        inputs = make_batch_inputs(Batch(list(lengths), K + 1000, 7000 + i), "cuda")
        row = {"i": i, "kind": kind, "T": T, "B": B, "K": K, "ms": {}, "bad": [],
               "default": name(choose_config(T, B, K, H200))}  # fmt: skip
        fns = [("default", None), ("fi", None)] + [(name(c), c) for c in candidates(T, B, K)]
        timed = {}
        for n, c in fns:
            out, lse = poisoned_outputs(T, "cuda")
            try:
                fn = (
                    flashinfer_planned(inputs, out, lse) if n == "fi" else ours(inputs, out, lse, c)
                )
                ms, _, _ = time_gpu_fitted(fn, scrub, 30, budget_ms=100.0)
                row["ms"][n] = round(ms, 5)
                timed[n] = (fn, out, lse)
            except Exception as e:  # a candidate that cannot launch is recorded, not fatal
                row["ms"][n] = None
                row["bad"].append(f"{n}: {type(e).__name__}: {str(e)[:120]}")
        # every timed candidate called again on refilled inputs and poisoned outputs
        for n, result in recheck(timed, inputs, 8000 + i, reference_fast).items():
            if not result["correct"]:
                row["bad"].append(n)
        best = min((v, k) for k, v in row["ms"].items() if v and k != "fi")
        print(f"{i:3} {kind[:14]:14} T{T:5} B{B:4} K{K:8} default {row['default']:18} "
              f"{row['ms']['default']:.4f} fi {row['ms'].get('fi') or 0:.4f} best {best[1]:18} "
              f"{best[0]:.4f} bad {row['bad']}", flush=True)  # fmt: skip
        doc["rows"].append(row)
        with open(out_path, "w") as f:
            json.dump(doc, f, indent=1)
        del inputs
        torch.cuda.empty_cache()
    print("seconds", round(time.time() - t_start))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")

"""Where the time of a call goes: the evidence behind the Gluon kernel's next design step.

Two measurements, on a GPU, of the code on ``PYTHONPATH``:

- Ablations of the Gluon kernel (``make``, then ``time`` once per variant): copies of ``src/``
  with one part of the KV loop taken out, timed on large workloads of the 38 and one ordered
  random batch. A variant's outputs are wrong by design (each call is still checked against the
  fp32 reference and the verdict recorded, so the unablated copy shows the timed code is
  right); the time it saves bounds what that part costs on the critical path.

  ``nogather``   the loader issues no cp.async (the stages keep stale rows; barriers unchanged)
  ``nosoftmax``  no row max, exp2 or row sum: P is the scaled score, alpha 1
  ``nopvlo``     the loader's half of ``P V`` skipped (its rescale kept)
  ``mmaonly``    ``nogather`` and ``nosoftmax`` together: the MMAs and the hand-offs alone

- ``time LABEL OUT --timeline``: the default launches of small split and ordered batches
  (scheduled split: table kernel, attention, combine) under the PyTorch profiler, each kernel's
  GPU time, beside FlashInfer's.

    python tools/time_parts.py make DIR            (no GPU: writes DIR/<variant>/src)
    PYTHONPATH=DIR/<variant>/src python tools/time_parts.py time <variant> OUT.jsonl
    python tools/time_parts.py time base OUT.jsonl --timeline

Rows are appended to OUT.jsonl (one per batch): GPU ms as ``mla-prefill bench`` times it (cold
L2, median), TFLOP/s, and FlashInfer's time for the unablated copy.
"""

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLUON = "mla_prefill/kernel/gluon_attention.py"
WORKLOADS = ("a06f2653", "0e70750d", "54187805", "892d1b8f")
ORDERED = ("ordered 1,492 tokens", [(526, 1199), (0, 0), (13, 30), (21, 1446), (3, 0), (51, 1971),
                                    (3, 0), (1, 1326), (35, 1789), (0, 17), (839, 1471)])  # fmt: skip
SPLIT = [
    ("split 331 tokens of 3", [(301, 301), (25, 3293), (5, 413)]),
    ("split 165 tokens of 2", [(126, 983), (39, 39)]),
    ("split 331 tokens of 7",
     [(66, 66), (39, 39), (18, 458), (134, 134), (17, 17), (11, 1270), (46, 300)]),
]  # fmt: skip

_GATHER = """    async_copy.async_copy_global_to_shared(kv_lo.index(st), base)
    async_copy.async_copy_global_to_shared(kv_hi.index(st), base + HALF)
    cols_pe = gl.arange(0, HEAD_KPE, layout=gl.SliceLayout(0, LD_PE))
    async_copy.async_copy_global_to_shared(
        pe_bufs.index(st),
        (kpe_ptr + pages_pe * stride_kpe_p)[:, None] + cols_pe[None, :],
    )
"""
_SOFTMAX = """    m_new = gl.maximum(m_i, gl.max(s, 1))
    # a row that has seen no key yet keeps m = -inf; use 0 so exp2 gives 0, not NaN
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)
"""
_NO_SOFTMAX = """    alpha = gl.full_like(m_i, 1.0)
    return s, alpha, m_i, l_i + 1.0
"""
_PV_LO = """    acc = warpgroup_mma(pe_bufs.index(st), kv_lo.index(st), acc * alpha[:, None], is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
"""
VARIANTS = {
    "base": [],
    "nogather": [(_GATHER, "    pass\n")],
    "nosoftmax": [(_SOFTMAX, _NO_SOFTMAX)],
    "nopvlo": [(_PV_LO, "    acc = acc * alpha[:, None]\n")],
    "mmaonly": [(_GATHER, "    pass\n"), (_SOFTMAX, _NO_SOFTMAX)],
}


def make(out_dir: str) -> None:
    """One copy of ``src/`` per variant (and the length lists the workloads come from)."""
    for name, edits in VARIANTS.items():
        dst = Path(out_dir) / name
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(ROOT / "src", dst / "src", ignore=shutil.ignore_patterns("__pycache__"))
        (dst / "blob").mkdir()
        shutil.copy(ROOT / "blob" / "workload_lengths.json", dst / "blob")
        path = dst / "src" / GLUON
        text = path.read_text()
        for old, new in edits:
            if text.count(old) != 1:
                sys.exit(f"{name}: the code to ablate is not in {GLUON} once; update this tool")
            text = text.replace(old, new)
        path.write_text(text)
        print(name, dst)


def time_batches(label: str, out_path: str, timeline: bool) -> None:
    import torch

    from mla_prefill.accuracy import poisoned_outputs, reference_fast
    from mla_prefill.bench import SCRUB_BYTES, flashinfer_planned, ours, recheck, time_gpu_fitted
    from mla_prefill.blobs import LENGTHS_FILE
    from mla_prefill.flops import flops
    from mla_prefill.fuzz import Batch, kernel_sha256, make_batch_inputs
    from mla_prefill.io import repo_root

    if timeline:
        batches = SPLIT + [ORDERED]
    else:
        lengths = json.loads((repo_root() / LENGTHS_FILE).read_text())
        batches = [(u[:8], [tuple(x) for x in v]) for u, v in lengths.items() if u[:8] in WORKLOADS]
        batches.append(ORDERED)
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    for i, (name, lens) in enumerate(batches):
        T, K = sum(q for q, _ in lens), sum(k for _, k in lens)
        inputs = make_batch_inputs(Batch(list(lens), K + 1000, 900 + i), "cuda")
        row = {"variant": label, "batch": name, "total_q": T, "num_kv": K,
               "gpu": torch.cuda.get_device_name(), "kernel_sha256": kernel_sha256()}  # fmt: skip
        timed = {}
        for who in ("ours", "flashinfer") if label == "base" else ("ours",):
            out, lse = poisoned_outputs(T, "cuda")
            fn = ours(inputs, out, lse) if who == "ours" else flashinfer_planned(inputs, out, lse)
            ms, _, _ = time_gpu_fitted(fn, scrub, 30, budget_ms=200.0)
            row[who] = {"gpu_ms": round(ms, 5), "tflops": round(flops(lens) / ms / 1e9, 1)}
            if timeline:
                row[who]["kernels_us"] = _kernel_times(fn, scrub)
            timed[who] = (fn, out, lse)
        # refilled inputs, poisoned outputs, every contender again (an ablated kernel is wrong)
        for who, result in recheck(timed, inputs, 950 + i, reference_fast).items():
            row[who]["correct"] = bool(result["correct"])
        print(json.dumps(row), flush=True)
        with open(out_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        del inputs
        torch.cuda.empty_cache()


def _kernel_times(fn, scrub) -> list:
    """(kernel, GPU us) of one cold-L2 call, in launch order, under the PyTorch profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    scrub.zero_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted(
        (e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start
    )
    return [(e.name[:48], round(e.time_range.elapsed_us(), 2)) for e in events]


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "time":
        time_batches(sys.argv[2], sys.argv[3], "--timeline" in sys.argv[4:])
    else:
        sys.exit(__doc__)

"""Is the cold-L2 scrub's kind part of the measured time? (session 11)

``mla-prefill bench`` writes 256 MB before every timed call (``zero_``), so the call starts with
an L2 full of dirty lines, and every line it reads first evicts one: a write-back to DRAM beside
each read. This times ours and FlashInfer's kernel behind that write scrub and behind a read
scrub of the same size (L2 left full of clean lines), side by side in one process.

    python -u benchmarks/experiments/scrub_kind.py OUT.json ed999c80 9265de63 ...
"""

import json
import sys

import torch

from mla_prefill.bench import flashinfer_planned, make_inputs, ours, time_gpu
from mla_prefill.io import load_index_tensors, load_workloads, repo_root


class ReadScrub:
    """``zero_`` reads 256 MB instead of writing it (``time_gpu`` calls ``scrub.zero_()``)."""

    def __init__(self, dev):
        self.buf = torch.ones(64 << 20, dtype=torch.int32, device=dev)
        self.sink = torch.empty((), dtype=torch.int64, device=dev)

    def zero_(self):
        torch.sum(self.buf, dtype=torch.int64, out=self.sink)


def main(path, uuids):
    root = repo_root()
    wls = load_workloads(root)
    scrubs = {"write": torch.empty(64 << 20, dtype=torch.int32, device="cuda"),
              "read": ReadScrub("cuda")}  # fmt: skip
    rows = []
    for uuid in uuids:
        (wl,) = [w for w in wls if w.uuid.startswith(uuid)]
        inputs = make_inputs(wl.workload, load_index_tensors(root, wl.workload, None), "cuda", 0)
        out = torch.empty_like(inputs["q_nope"])
        lse = torch.empty(out.shape[:2], dtype=torch.float32, device="cuda")
        fns = {"ours": ours(inputs, out, lse), "flashinfer": flashinfer_planned(inputs, out, lse)}
        row = {"uuid": wl.uuid}
        for rep in range(2):
            for kind, scrub in scrubs.items():
                for name, fn in fns.items():
                    fn()
                    ms, ahead = time_gpu(fn, scrub, 40)
                    row.setdefault(f"{name}_{kind}_us", []).append(round(ms * 1e3, 2))
                    assert ahead
        print(row, flush=True)
        rows.append(row)
    meta = {"gpu": torch.cuda.get_device_name(), "command": " ".join(["python", *sys.argv])}
    with open(path, "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

"""Experiment for the next device call (NOTES.md, "Next experiments" 1-2): host-ahead vs graph-replay
time of our call for several tile/split configs on the small and decode-like workloads.

    bash scripts/gpu_check.sh py benchmarks/experiments/split_probe.py     (writes $OUT/split_probe.json)
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from probe_regs import gpu_time, graph_time  # noqa: E402

from mla_prefill.bench import SCRUB_BYTES, make_inputs  # noqa: E402
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, repo_root  # noqa: E402
from mla_prefill.kernel.config import KernelConfig, choose_config, with_split  # noqa: E402
from mla_prefill.kernel.main import mla_paged_prefill  # noqa: E402

WORKLOADS = ["ed999c80", "a455e8fb", "98814691", "55b51e96", "473e30ea", "d30e4c23", "5ca61491"]
TILES = [(1, 32, 4, 2), (1, 64, 4, 2)]
CHUNKS = [0, 128, 256, 512, 1024]


def main():
    root = repo_root()
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    rows = []
    for wl in load_workloads(root):
        if wl.uuid[:8] not in WORKLOADS:
            continue
        w = wl.workload
        inp = make_inputs(w, load_index_tensors(root, w), "cuda", 0)
        T, n_kv = w["axes"]["total_q"], w["axes"]["num_kv_indices"]
        out = torch.empty(T, 16, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(T, 16, dtype=torch.float32, device="cuda")
        args = [inp[k] for k in INPUTS]
        default = choose_config(T, w["axes"]["len_indptr"] - 1, n_kv)
        configs = [("default", default)]
        for bt, bn, warps, stages in TILES:
            for chunk in CHUNKS if n_kv / (w["axes"]["len_indptr"] - 1) >= 256 else [0]:
                if chunk and chunk % bn:
                    continue
                cfg = with_split(KernelConfig(bt, bn, 0, 1, warps, stages), chunk, n_kv)
                configs.append((f"t{bt} n{bn} chunk{chunk}", cfg))
        for name, cfg in configs:
            def fn(cfg=cfg):
                mla_paged_prefill(*args, out, lse, config=cfg)

            try:
                fn()
                torch.cuda.synchronize()
                row = {"uuid": wl.uuid[:8], "config": name, "cfg": str(cfg),
                       "host_ahead_ms": gpu_time(fn, scrub, 30), "graph_ms": graph_time(fn, scrub, 30)}
            except Exception as e:
                row = {"uuid": wl.uuid[:8], "config": name, "error": str(e)[:300]}
            print(row, flush=True)
            rows.append(row)
        del inp
        torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "split_probe.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

"""Experiment (device): where the split path's time goes -- the whole call vs the main kernel
alone (combine launch skipped) for several split counts on the decode-like workload ed999c80.

    bash scripts/gpu_check.sh py benchmarks/experiments/split_parts.py   (writes $OUT/split_parts.json)
"""

import json
import os

import torch

import mla_prefill.kernel.main as M
from mla_prefill.bench import SCRUB_BYTES, make_inputs, time_gpu
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, repo_root
from mla_prefill.kernel.config import KernelConfig, choose_config


class _SkipLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main():
    root = repo_root()
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    rows = []
    for wl in load_workloads(root):
        if wl.uuid[:8] != "ed999c80":
            continue
        w = wl.workload
        inp = make_inputs(w, load_index_tensors(root, w), "cuda", 0)
        T, n_kv, batch = w["axes"]["total_q"], w["axes"]["num_kv_indices"], w["axes"]["len_indptr"] - 1
        out = torch.empty(T, 16, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(T, 16, dtype=torch.float32, device="cuda")
        args = [inp[k] for k in INPUTS]
        configs = [choose_config(T, batch, n_kv)] + [
            KernelConfig(1, bn, s, c, 4, st)
            for bn, s, c, st in [(32, 12, 128, 3), (32, 12, 128, 4), (32, 24, 64, 3), (64, 12, 128, 3)]
        ]
        for cfg in configs:
            def call(cfg=cfg):
                M.mla_paged_prefill(*args, out, lse, config=cfg)

            call()
            torch.cuda.synchronize()
            full, ahead_f = time_gpu(call, scrub, 40)
            combine = M._combine_kernel
            M._combine_kernel = _SkipLaunch()
            try:
                main_only, ahead_m = time_gpu(call, scrub, 40)
            finally:
                M._combine_kernel = combine
            row = {"config": str(cfg), "full_ms": full, "main_only_ms": main_only,
                   "host_ahead": ahead_f and ahead_m}
            print(row, flush=True)
            rows.append(row)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "split_parts.json"), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

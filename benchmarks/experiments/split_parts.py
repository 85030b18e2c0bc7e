"""Experiment (device): where the split path's time goes -- the whole call vs the split kernel
alone (combine launch skipped), per config, in the bench's setting (cold L2, host ahead).

    bash scripts/gpu_check.sh py benchmarks/experiments/split_parts.py ed999c80 default "1,64,6,8,3"
    (writes $OUT/split_parts-<uuid8>.json; configs as in ``mla-prefill bench --configs``, one per
    argument, ``default`` = the config ``mla_paged_prefill`` picks; no arguments: ed999c80 default)
"""

import json
import os
import sys

import torch

import mla_prefill.kernel.main as M
from mla_prefill.bench import SCRUB_BYTES, make_inputs, parse_configs, time_gpu
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, repo_root


class _SkipLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def main(uuid="ed999c80", specs=("default",)):
    root = repo_root()
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    (wl,) = [w for w in load_workloads(root) if w.uuid.startswith(uuid)]
    inp = make_inputs(wl.workload, load_index_tensors(root, wl.workload), "cuda", 0)
    T = wl.workload["axes"]["total_q"]
    out = torch.empty(T, 16, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(T, 16, dtype=torch.float32, device="cuda")
    args = [inp[k] for k in INPUTS]
    rows = []
    for spec in specs:
        cfg = None if spec == "default" else parse_configs(spec)[0]

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
        row = {"config": spec, "full_ms": full, "main_only_ms": main_only,
               "host_ahead": ahead_f and ahead_m}  # fmt: skip
        print(row, flush=True)
        rows.append(row)
    path = os.path.join(os.environ.get("OUT", "/tmp"), f"split_parts-{uuid[:8]}.json")
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "uuid": wl.uuid, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ed999c80", sys.argv[2:] or ("default",))

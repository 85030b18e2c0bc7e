"""One call of our kernel on one workload, for Nsight Compute (profiling window = that call only).

    ncu --profile-from-start off --section SpeedOfLight ... \
        python benchmarks/experiments/profile_one.py 733a7bbe "4,64,1,8,2" "g:4,32,1,8,3"

Each config given is warmed up, then called once between cudaProfilerStart/Stop.
"""

import sys

import torch

from mla_prefill.bench import make_inputs, parse_configs
from mla_prefill.io import INPUTS, load_index_tensors, load_workloads, repo_root
from mla_prefill.kernel.main import mla_paged_prefill


def main(uuid, specs):
    root = repo_root()
    (wl,) = [w for w in load_workloads(root) if w.uuid.startswith(uuid)]
    inputs = make_inputs(wl.workload, load_index_tensors(root, wl.workload, None), "cuda", 0)
    for cfg in parse_configs(";".join(specs)):
        print("config", cfg, flush=True)
        mla_paged_prefill(*[inputs[k] for k in INPUTS], config=cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        mla_paged_prefill(*[inputs[k] for k in INPUTS], config=cfg)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

"""One call of our kernel on one workload, for Nsight Compute (profiling window = that call only).

    ncu --profile-from-start off --section SpeedOfLight ... \
        python benchmarks/experiments/profile_one.py 733a7bbe "4,64,1,8,2" "g:4,32,1,8,3"

Each config given is warmed up, then called once between cudaProfilerStart/Stop; ``default``
is the config ``mla_paged_prefill`` picks, ``fi`` FlashInfer's planned wrapper (bench.py's).
"""

import sys

import torch

from mla_prefill.bench import flashinfer_planned, make_inputs, ours, parse_configs
from mla_prefill.io import load_index_tensors, load_workloads, repo_root


def main(uuid, specs):
    root = repo_root()
    (wl,) = [w for w in load_workloads(root) if w.uuid.startswith(uuid)]
    inputs = make_inputs(wl.workload, load_index_tensors(root, wl.workload, None), "cuda", 0)
    out = torch.empty_like(inputs["q_nope"])
    lse = torch.empty(out.shape[:2], dtype=torch.float32, device=out.device)
    for spec in specs:
        if spec == "fi":
            fn = flashinfer_planned(inputs, out, lse)
        elif spec == "default":
            fn = ours(inputs, out, lse)
        else:
            fn = ours(inputs, out, lse, parse_configs(spec)[0])
        print("config", spec, flush=True)
        fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        fn()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

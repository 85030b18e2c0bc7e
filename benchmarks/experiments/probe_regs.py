"""Experiment (device; kernel v1, whose KernelConfig was (block_t, block_n, num_splits, num_warps,
num_stages): kept as the record of the run that produced h200-probe-regs.json): registers/spills/shared memory per config, and host-ahead vs graph-replay
GPU time, for the current kernel and a 'flat' variant without the in-kernel sequence search/loop.

python benchmarks/experiments/probe_regs.py  (needs CUDA; writes JSON to $OUT/probe.json)
"""

import json
import os
import statistics

import torch
import triton
import triton.language as tl

import mla_prefill.kernel.main as M
from mla_prefill.bench import SCRUB_BYTES, make_inputs
from mla_prefill.io import load_index_tensors, load_workloads, repo_root
from mla_prefill.kernel.attention import _attend_kv_range
from mla_prefill.kernel.config import KernelConfig


@triton.jit
def _flat_kernel(q_nope_ptr, q_pe_ptr, ckv_ptr, kpe_ptr, work_ptr, out_ptr, lse_ptr,
                 stride_ckv_p, stride_kpe_p, qk_scale, kv_indices_ptr,
                 HEAD_CKV: tl.constexpr, HEAD_KPE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_N: tl.constexpr):
    # work item: (tok0, q_start, q_end, kv_start, kv_len)
    w = work_ptr + tl.program_id(0) * 5
    tok0 = tl.load(w); q_start = tl.load(w + 1); q_end = tl.load(w + 2)
    kv_start = tl.load(w + 3); kv_len = tl.load(w + 4)
    BLOCK_M: tl.constexpr = BLOCK_T * 16
    offs_m = tl.arange(0, BLOCK_M)
    row_tok = tok0 + offs_m // 16
    row_head = offs_m % 16
    in_seq = row_tok < q_end
    offs_ckv = tl.arange(0, HEAD_CKV); offs_kpe = tl.arange(0, HEAD_KPE)
    r64 = row_tok.to(tl.int64)
    q_n = tl.load(q_nope_ptr + (r64 * 16 + row_head)[:, None] * HEAD_CKV + offs_ckv[None, :], mask=in_seq[:, None], other=0.0)
    q_p = tl.load(q_pe_ptr + (r64 * 16 + row_head)[:, None] * HEAD_KPE + offs_kpe[None, :], mask=in_seq[:, None], other=0.0)
    prefix = kv_len - (q_end - q_start)
    causal_lim = tl.where(in_seq, prefix + (row_tok - q_start), -1)
    i_first = tok0 - q_start
    i_last = tl.minimum(tok0 + BLOCK_T, q_end) - 1 - q_start
    hi = tl.maximum(tl.minimum(kv_len, prefix + i_last + 1), 0)
    unm = tl.minimum(tl.maximum(prefix + i_first + 1, 0), hi)
    mid_n = unm // BLOCK_N * BLOCK_N
    acc = tl.zeros([BLOCK_M, HEAD_CKV], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    idx_ptr = kv_indices_ptr + kv_start
    acc, m_i, l_i = _attend_kv_range(acc, m_i, l_i, q_n, q_p, ckv_ptr, kpe_ptr, idx_ptr, stride_ckv_p, stride_kpe_p,
                                     0, mid_n, causal_lim, qk_scale, HEAD_CKV, HEAD_KPE, BLOCK_N, False, False)
    acc, m_i, l_i = _attend_kv_range(acc, m_i, l_i, q_n, q_p, ckv_ptr, kpe_ptr, idx_ptr, stride_ckv_p, stride_kpe_p,
                                     mid_n, hi, causal_lim, qk_scale, HEAD_CKV, HEAD_KPE, BLOCK_N, True, False)
    seen = l_i > 0.0
    l_div = tl.where(seen, l_i, 1.0)
    o = acc / l_div[:, None]
    tl.store(out_ptr + (r64 * 16 + row_head)[:, None] * HEAD_CKV + offs_ckv[None, :], o.to(tl.bfloat16), mask=in_seq[:, None])
    tl.store(lse_ptr + r64 * 16 + row_head, tl.where(seen, m_i + tl.math.log2(l_div), float("-inf")), mask=in_seq)


def work_list(qo, kv, bt):
    items = []
    qo, kv = qo.tolist(), kv.tolist()
    for b in range(len(qo) - 1):
        for t in range(qo[b], qo[b + 1], bt):
            items.append((t, qo[b], qo[b + 1], kv[b], kv[b + 1] - kv[b]))
    items.sort(key=lambda it: -(it[4] - (it[2] - it[1]) + it[0] - it[1]))  # longest first
    return torch.tensor(items, dtype=torch.int32, device="cuda").flatten(), len(items)


def stats(jit):
    out = []
    for kern in jit.device_caches[0][0].values():
        out.append({"regs": kern.n_regs, "spills": kern.n_spills, "shared": kern.metadata.shared,
                    "warps": kern.metadata.num_warps, "stages": kern.metadata.num_stages})
    return out


def gpu_time(fn, scrub, iters=20):
    s = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    e = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        scrub.zero_(); s[i].record(); fn(); e[i].record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(s, e))


def graph_time(fn, scrub, iters=20):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return gpu_time(g.replay, scrub, iters)


def main():
    root = repo_root()
    want = ["d30e4c23", "473e30ea", "ed999c80", "bb28f188", "0e70750d"]
    scrub = torch.empty(SCRUB_BYTES, dtype=torch.int8, device="cuda")
    res = {"gpu": torch.cuda.get_device_name(), "rows": []}
    cfgs = [None, KernelConfig(4, 64, 1, 8, 2), KernelConfig(4, 128, 1, 8, 1), KernelConfig(2, 64, 1, 4, 2),
            KernelConfig(1, 64, 2, 4, 2), KernelConfig(1, 32, 6, 4, 2), KernelConfig(1, 64, 12, 4, 3)]
    for wl in load_workloads(root):
        if wl.uuid[:8] not in want:
            continue
        w = wl.workload
        idx = load_index_tensors(root, w)
        inp = make_inputs(w, idx, "cuda", 0)
        T = w["axes"]["total_q"]
        out = torch.empty(T, 16, 512, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(T, 16, dtype=torch.float32, device="cuda")
        args = [inp[k] for k in ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "qo_indptr", "kv_indptr", "kv_indices")]
        for cfg in cfgs:
            if cfg is not None and cfg.block_t == 1 and T > 64:
                continue
            fn = lambda: M.mla_paged_prefill(*args, inp["sm_scale"], out, lse, config=cfg)
            try:
                fn(); torch.cuda.synchronize()
                row = {"uuid": wl.uuid[:8], "cfg": str(cfg), "gpu_ms": gpu_time(fn, scrub), "graph_ms": graph_time(fn, scrub)}
            except Exception as e:
                row = {"uuid": wl.uuid[:8], "cfg": str(cfg), "error": str(e)[:300]}
            print(row, flush=True)
            res["rows"].append(row)
        for bt, bn, nw, ns in [(4, 64, 8, 2), (4, 64, 8, 3), (4, 32, 8, 3)]:
            work, n = work_list(inp["qo_indptr"], inp["kv_indptr"], bt)
            fn = lambda: _flat_kernel[(n,)](inp["q_nope"], inp["q_pe"], inp["ckv_cache"], inp["kpe_cache"], work, out, lse,
                                            inp["ckv_cache"].stride(0), inp["kpe_cache"].stride(0), inp["sm_scale"] * 1.4426950408889634,
                                            inp["kv_indices"], HEAD_CKV=512, HEAD_KPE=64, BLOCK_T=bt, BLOCK_N=bn, num_warps=nw, num_stages=ns)
            try:
                fn(); torch.cuda.synchronize()
                row = {"uuid": wl.uuid[:8], "cfg": f"flat t{bt} n{bn} w{nw} s{ns}", "gpu_ms": gpu_time(fn, scrub), "graph_ms": graph_time(fn, scrub)}
            except Exception as e:
                row = {"uuid": wl.uuid[:8], "cfg": f"flat t{bt} n{bn} w{nw} s{ns}", "error": str(e)[:300]}
            print(row, flush=True)
            res["rows"].append(row)
        del inp
        torch.cuda.empty_cache()
    res["main_kernel"] = stats(M._mla_prefill_kernel)
    res["flat_kernel"] = stats(_flat_kernel)
    print(json.dumps(res["main_kernel"]))
    print(json.dumps(res["flat_kernel"]))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "probe.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

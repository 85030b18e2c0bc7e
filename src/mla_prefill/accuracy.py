"""What every correctness check shares: the inputs it draws, the outputs it poisons, the fp32
reference it compares with, and the one tolerance rule (flashinfer-bench's evaluator's).

``bench``, ``fuzz``, ``run`` on the CPU and the tests all use these, so a change to the rule or
to how inputs are drawn reaches every check at once.
"""

import math
from typing import Dict

import torch

from mla_prefill.kernel.validate import HEAD_DIM_CKV, HEAD_DIM_KPE, NUM_QO_HEADS

# flashinfer-bench's evaluator: |a - b| <= atol + rtol * |b| on every element
ATOL = RTOL = 1e-2


def draw_inputs(
    total_q: int,
    num_pages: int,
    index: Dict[str, torch.Tensor],
    sm_scale: float,
    device: str,
    seed: int,
) -> dict:
    """The definition's inputs: N(0, 1) bf16 queries and caches (as flashinfer-bench draws
    them), drawn on ``device`` from ``seed``, and the given index tensors moved there."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(
            torch.bfloat16
        )

    return {
        "q_nope": randn(total_q, NUM_QO_HEADS, HEAD_DIM_CKV),
        "q_pe": randn(total_q, NUM_QO_HEADS, HEAD_DIM_KPE),
        "ckv_cache": randn(num_pages, 1, HEAD_DIM_CKV),
        "kpe_cache": randn(num_pages, 1, HEAD_DIM_KPE),
        "qo_indptr": index["qo_indptr"].to(device),
        "kv_indptr": index["kv_indptr"].to(device),
        "kv_indices": index["kv_indices"].to(device),
        "sm_scale": float(sm_scale),
    }


def poisoned_outputs(total_q: int, device) -> tuple:
    """``output`` and ``lse`` filled with NaN: an element the kernel does not write fails."""
    out = torch.full(
        (total_q, NUM_QO_HEADS, HEAD_DIM_CKV), float("nan"), dtype=torch.bfloat16, device=device
    )
    lse = torch.full((total_q, NUM_QO_HEADS), float("nan"), dtype=torch.float32, device=device)
    return out, lse


def close(got: torch.Tensor, want: torch.Tensor, atol=ATOL, rtol=RTOL) -> torch.Tensor:
    """Per element: within ``atol + rtol * |want|``; NaN never; an infinity only where ``want``
    holds the same one."""
    got, want = got.float(), want.float()
    within = (got - want).abs() <= atol + rtol * want.abs()
    same_inf = torch.isinf(want) & (got == want)
    return (within & torch.isfinite(want) & ~got.isnan()) | same_inf


def compare(out, lse, ref_out, ref_lse, atol=ATOL, rtol=RTOL) -> dict:
    """``close`` on every element of both outputs, with the largest errors."""
    ok_o, ok_l = close(out, ref_out, atol, rtol), close(lse, ref_lse, atol, rtol)
    o, r = out.float(), ref_out.float()
    fin = torch.isfinite(ref_lse)
    return {
        "correct": bool(ok_o.all() and ok_l.all()),
        "max_abs_err_out": float((o - r).abs().nan_to_num(float("inf")).max())
        if o.numel()
        else 0.0,
        "max_abs_err_lse": float((lse[fin] - ref_lse[fin]).abs().nan_to_num(float("inf")).max())
        if fin.any()
        else 0.0,
        "mismatched_out": int((~ok_o).sum()),
        "mismatched_lse": int((~ok_l).sum()),
    }


@torch.no_grad()
def reference_fast(
    q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale, chunk=512
):
    """fp32 reference with the definition's semantics (rows with no key: output 0, lse -inf),
    vectorised per sequence and chunked over queries so that batches of thousands of tokens can
    be checked. The CPU tests pin it to the definition's own ``reference``."""
    T = q_nope.shape[0]
    out = torch.zeros(T, NUM_QO_HEADS, HEAD_DIM_CKV, dtype=torch.bfloat16, device=q_nope.device)
    lse = torch.full((T, NUM_QO_HEADS), -float("inf"), dtype=torch.float32, device=q_nope.device)
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    ckv = ckv_cache[:, 0].float()
    kpe = kpe_cache[:, 0].float()
    for b in range(len(qo) - 1):
        q0, q1, k0, k1 = qo[b], qo[b + 1], kv[b], kv[b + 1]
        if q1 <= q0 or k1 <= k0:
            continue
        pages = kv_indices[k0:k1].long()
        kc, kp = ckv[pages], kpe[pages]
        prefix = (k1 - k0) - (q1 - q0)
        cols = torch.arange(k1 - k0, device=q_nope.device)
        for c0 in range(q0, q1, chunk):
            c1 = min(c0 + chunk, q1)
            qn = q_nope[c0:c1].float()
            qp = q_pe[c0:c1].float()
            s = (
                torch.einsum("thd,kd->thk", qn, kc) + torch.einsum("thd,kd->thk", qp, kp)
            ) * sm_scale
            rows = torch.arange(c0 - q0, c1 - q0, device=q_nope.device) + prefix
            s.masked_fill_((cols[None, :] > rows[:, None])[:, None, :], -float("inf"))
            lse[c0:c1] = torch.logsumexp(s, dim=-1) / math.log(2.0)
            out[c0:c1] = torch.einsum("thk,kd->thd", torch.softmax(s, dim=-1), kc).to(
                torch.bfloat16
            )
    return out, lse


def versions(cuda: bool = True) -> Dict[str, str]:
    """The versions a result depends on (Python, torch, Triton, FlashInfer, flashinfer-bench,
    this package; CUDA where asked), for every results file and trace."""
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("triton", "flashinfer-python", "flashinfer-bench", "mla-prefill"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    if out["mla-prefill"] == "not installed":  # run from the source tree (scripts/gpu_check.sh)
        from mla_prefill import __version__

        out["mla-prefill"] = f"{__version__} (source tree)"
    if cuda:
        out["cuda"] = str(torch.version.cuda)
    return out

"""FLOP and byte counts for one call, from the exact causal pair count.

Per sequence with ``qo`` queries and ``kv`` keys (bottom-right aligned mask), the attended
(query, key) pairs are ``qo * (kv - qo) + qo * (qo + 1) / 2``. Each pair costs, per head,
``2 * (512 + 64)`` FLOPs for ``Q K^T`` and ``2 * 512`` for ``P V``.
"""

from typing import Iterable, Tuple

from mla_prefill.kernel.validate import HEAD_DIM_CKV as HEAD_CKV
from mla_prefill.kernel.validate import HEAD_DIM_KPE as HEAD_KPE
from mla_prefill.kernel.validate import NUM_QO_HEADS as NUM_HEADS

BF16 = 2
FP32 = 4
MATMUL_CEILING_TFLOPS = 790.0  # bf16 matmul measured on the H200 used for benchmarks/results/


def attended_pairs(lengths: Iterable[Tuple[int, int]]) -> int:
    total = 0
    for qo, kv in lengths:
        if qo <= 0 or kv <= 0:
            continue
        total += qo * (kv - qo) + qo * (qo + 1) // 2
    return total


def flops(lengths: Iterable[Tuple[int, int]]) -> int:
    """``2 * H * pairs * (2 * 512 + 64)``: Q K^T over 576 dims plus P V over 512."""
    return 2 * NUM_HEADS * attended_pairs(lengths) * (2 * HEAD_CKV + HEAD_KPE)


def min_bytes(total_q: int, num_kv_indices: int) -> int:
    """Q (nope + pe) + gathered KV rows once + output + lse."""
    q = total_q * NUM_HEADS * (HEAD_CKV + HEAD_KPE) * BF16
    kv = num_kv_indices * (HEAD_CKV + HEAD_KPE) * BF16
    out = total_q * NUM_HEADS * HEAD_CKV * BF16 + total_q * NUM_HEADS * FP32
    return q + kv + out


def bucket(total_q: int) -> str:
    """Workload bucket by tokens: launch-bound small ones, compute-bound big ones."""
    if total_q <= 100:
        return "small (<=100 tok)"
    if total_q < 1000:
        return "medium (101-999 tok)"
    return "large (>=1000 tok)"

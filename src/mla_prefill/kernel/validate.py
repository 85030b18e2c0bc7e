"""Input checks for ``run``.

``check_inputs`` reads metadata only (dtype, shape, stride, device): it is always on and costs no
device synchronisation. ``check_index_data`` reads the index tensors' values; it syncs, so it runs
only when asked (``validate=True``, ``MLA_PREFILL_VALIDATE=1``, ``mla-prefill check`` and tests).
Each problem is a ``ValueError`` naming the argument, the position and what was expected, because
a mismatch here would otherwise give a silently wrong answer or an out-of-bounds read.
"""

import math
import os
from typing import List, Optional, Tuple

import torch

NUM_QO_HEADS = 16
HEAD_DIM_CKV = 512
HEAD_DIM_KPE = 64
PAGE_SIZE = 1

VALIDATE_ENV = "MLA_PREFILL_VALIDATE"


def validation_requested(validate: Optional[bool]) -> bool:
    """``validate`` if given, else the ``MLA_PREFILL_VALIDATE`` environment switch."""
    if validate is not None:
        return bool(validate)
    return os.environ.get(VALIDATE_ENV, "0") not in ("", "0", "false", "False")


def _expect_tensor(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def _expect(name: str, x: torch.Tensor, shape: Tuple, dtype: torch.dtype) -> None:
    if x.dtype != dtype:
        hint = (
            f"; convert with .to({dtype})"
            if x.dtype in (torch.int64, torch.float16, torch.float32)
            else ""
        )
        raise ValueError(f"{name}: expected dtype {dtype}, got {x.dtype}{hint}")
    if x.dim() != len(shape) or any(e is not None and e != a for e, a in zip(shape, x.shape)):
        want = "[" + ", ".join("*" if e is None else str(e) for e in shape) + "]"
        raise ValueError(f"{name}: expected shape {want}, got {list(x.shape)}")
    if x.numel() > 0 and x.stride(-1) != 1:
        raise ValueError(
            f"{name}: the last dimension must be contiguous (stride 1), got strides "
            f"{tuple(x.stride())}; pass {name}.contiguous()"
        )


def sm_scale_value(sm_scale: object) -> float:
    """The softmax scale as a Python float; a CUDA tensor is refused (reading it would sync)."""
    if isinstance(sm_scale, torch.Tensor):
        if sm_scale.numel() != 1:
            raise ValueError(
                f"sm_scale: expected a scalar, got a tensor of shape {list(sm_scale.shape)}"
            )
        if sm_scale.device.type != "cpu":
            raise ValueError(
                "sm_scale: expected a Python float or a CPU scalar tensor, got a tensor on "
                f"{sm_scale.device}; reading it would synchronise the device"
            )
        sm_scale = sm_scale.item()
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float)):
        raise ValueError(f"sm_scale: expected a float, got {type(sm_scale).__name__}")
    value = float(sm_scale)
    if not math.isfinite(value):
        raise ValueError(f"sm_scale: expected a finite float, got {value}")
    return value


_BF16, _I32, _F32 = torch.bfloat16, torch.int32, torch.float32


def _inputs_ok(
    q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse
) -> bool:
    """The common case in a few microseconds: every rule of ``_explain_inputs``, as one boolean."""
    try:
        t, p = q_nope.shape[0], ckv_cache.shape[0]
        dev = q_nope.get_device()  # CUDA index; -1 for CPU and meta alike, which take the slow path
        ok = (
            dev >= 0
            and
            q_nope.dtype is _BF16 and q_pe.dtype is _BF16 and ckv_cache.dtype is _BF16
            and kpe_cache.dtype is _BF16 and qo_indptr.dtype is _I32 and kv_indptr.dtype is _I32
            and kv_indices.dtype is _I32
            and q_nope.shape == (t, NUM_QO_HEADS, HEAD_DIM_CKV)
            and q_pe.shape == (t, NUM_QO_HEADS, HEAD_DIM_KPE)
            and ckv_cache.shape == (p, PAGE_SIZE, HEAD_DIM_CKV)
            and kpe_cache.shape == (p, PAGE_SIZE, HEAD_DIM_KPE)
            and qo_indptr.dim() == 1 and kv_indices.dim() == 1
            and kv_indptr.shape == qo_indptr.shape and qo_indptr.shape[0] >= 1
            and (qo_indptr.shape[0] > 1 or t == 0) and (p > 0 or kv_indices.shape[0] == 0)
            and q_nope.stride(2) == 1 and q_pe.stride(2) == 1 and ckv_cache.stride(2) == 1
            and kpe_cache.stride(2) == 1
            and q_pe.get_device() == dev and ckv_cache.get_device() == dev
            and kpe_cache.get_device() == dev and qo_indptr.get_device() == dev
            and kv_indptr.get_device() == dev and kv_indices.get_device() == dev
        )  # fmt: skip
        if ok and output is not None:
            ok = (
                output.dtype is _BF16 and output.shape == (t, NUM_QO_HEADS, HEAD_DIM_CKV)
                and output.stride(2) == 1 and output.get_device() == dev
            )  # fmt: skip
        if ok and lse is not None:
            ok = lse.dtype is _F32 and lse.shape == (t, NUM_QO_HEADS) and lse.get_device() == dev
        return ok
    except (AttributeError, IndexError, TypeError, RuntimeError):
        return False


def check_inputs(
    q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output=None, lse=None
) -> Tuple[int, int, int, int]:
    """Metadata checks; returns ``(total_q, num_pages, batch_size, num_kv_indices)``.

    Raises ``ValueError`` naming the argument and what was expected.
    """
    if _inputs_ok(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse
    ):
        return q_nope.shape[0], ckv_cache.shape[0], qo_indptr.shape[0] - 1, kv_indices.shape[0]
    return _explain_inputs(
        q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output, lse
    )


def _explain_inputs(
    q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, output=None, lse=None
) -> Tuple[int, int, int, int]:
    """The same rules one by one, raising on the first broken one with what to fix."""
    for name, x in (
        ("q_nope", q_nope), ("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache),
        ("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
    ):  # fmt: skip
        _expect_tensor(name, x)
    bf16 = torch.bfloat16
    total_q = q_nope.shape[0] if q_nope.dim() == 3 else -1
    num_pages = ckv_cache.shape[0] if ckv_cache.dim() == 3 else -1
    _expect("q_nope", q_nope, (None, NUM_QO_HEADS, HEAD_DIM_CKV), bf16)
    _expect("q_pe", q_pe, (total_q, NUM_QO_HEADS, HEAD_DIM_KPE), bf16)
    _expect("ckv_cache", ckv_cache, (None, PAGE_SIZE, HEAD_DIM_CKV), bf16)
    _expect("kpe_cache", kpe_cache, (num_pages, PAGE_SIZE, HEAD_DIM_KPE), bf16)
    _expect("qo_indptr", qo_indptr, (None,), torch.int32)
    _expect("kv_indptr", kv_indptr, (qo_indptr.shape[0],), torch.int32)
    _expect("kv_indices", kv_indices, (None,), torch.int32)
    if qo_indptr.shape[0] < 1:
        raise ValueError("qo_indptr: expected at least one element (batch_size + 1), got 0")
    batch = qo_indptr.shape[0] - 1
    num_kv = kv_indices.shape[0]
    if batch == 0 and total_q > 0:
        raise ValueError(f"qo_indptr: has no sequence (length 1) but q_nope holds {total_q} tokens")
    if num_pages == 0 and num_kv > 0:
        raise ValueError(f"ckv_cache: has 0 pages but kv_indices holds {num_kv} page indices")
    if output is not None:
        _expect_tensor("output", output)
        _expect("output", output, (total_q, NUM_QO_HEADS, HEAD_DIM_CKV), bf16)
    if lse is not None:
        _expect_tensor("lse", lse)
        _expect("lse", lse, (total_q, NUM_QO_HEADS), torch.float32)
    named = [
        ("q_nope", q_nope), ("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache),
        ("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
        ("output", output), ("lse", lse),
    ]  # fmt: skip
    device = q_nope.device
    for name, x in named:
        if x is not None and x.device != device:
            raise ValueError(
                f"{name}: expected every tensor on {device} (where q_nope is), got {x.device}"
            )
    return total_q, num_pages, batch, num_kv


def index_data_problems(
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    total_q: int,
    num_pages: int,
    limit: int = 5,
) -> List[Tuple[str, str]]:
    """Value checks on the index tensors, as ``(argument, message)`` pairs (at most ``limit`` each).

    Reads the tensors on the host: this synchronises the device.
    """
    problems: List[Tuple[str, str]] = []
    qo = qo_indptr.detach().to("cpu", torch.int64)
    kv = kv_indptr.detach().to("cpu", torch.int64)
    idx = kv_indices.detach().to("cpu", torch.int64)
    for name, ptr, last, last_what in (
        ("qo_indptr", qo, total_q, "total_q (q_nope.shape[0])"),
        ("kv_indptr", kv, idx.numel(), "len(kv_indices)"),
    ):
        if ptr.numel() == 0:
            continue
        if int(ptr[0]) != 0:
            problems.append((name, f"must start at 0, got {name}[0] = {int(ptr[0])}"))
        drops = torch.nonzero(ptr[1:] < ptr[:-1]).flatten()[:limit].tolist()
        for b in drops:
            problems.append(
                (
                    name,
                    f"must never decrease: {name}[{b}] = {int(ptr[b])} > {name}[{b + 1}] = {int(ptr[b + 1])}",
                )
            )
        if int(ptr[-1]) != last:
            problems.append(
                (name, f"must end at {last_what} = {last}, got {name}[-1] = {int(ptr[-1])}")
            )
    if qo.numel() == kv.numel() and qo.numel() > 1:
        q_len = qo[1:] - qo[:-1]
        kv_len = kv[1:] - kv[:-1]
        # kv_len == 0 is allowed: no keys, so output 0 and lse -inf, as the reference does
        short = torch.nonzero((kv_len < q_len) & (kv_len > 0)).flatten()[:limit].tolist()
        for b in short:
            problems.append(
                (
                    "kv_indptr",
                    f"sequence {b}: kv_len {int(kv_len[b])} < q_len {int(q_len[b])}; the KV range "
                    "must include the new tokens (kv_len >= q_len, or kv_len == 0)",
                )
            )
    bad = torch.nonzero((idx < 0) | (idx >= num_pages)).flatten()[:limit].tolist()
    for pos in bad:
        problems.append(
            (
                "kv_indices",
                f"kv_indices[{pos}] = {int(idx[pos])} is outside [0, num_pages = {num_pages})",
            )
        )
    return problems


def check_index_data(qo_indptr, kv_indptr, kv_indices, total_q: int, num_pages: int) -> None:
    """Raise ``ValueError`` on the first problem ``index_data_problems`` finds."""
    problems = index_data_problems(qo_indptr, kv_indptr, kv_indices, total_q, num_pages, limit=1)
    if problems:
        name, msg = problems[0]
        raise ValueError(f"{name}: {msg}")

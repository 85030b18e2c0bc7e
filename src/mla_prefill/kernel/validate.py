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

# The metadata rules, stated once: each tensor argument in ``run``'s order with its dtype and
# shape. A letter is a size bound by the first tensor that has it (T: total_q, from q_nope;
# P: num_pages, from ckv_cache; B: batch_size + 1, from qo_indptr; N: num_kv_indices, from
# kv_indices). Every tensor lives on q_nope's device and has a contiguous last dimension.
# ``_inputs_ok`` (the fast yes/no) and ``_explain_inputs`` (the error) both walk this table.
TENSOR_RULES = (
    ("q_nope", _BF16, ("T", NUM_QO_HEADS, HEAD_DIM_CKV)),
    ("q_pe", _BF16, ("T", NUM_QO_HEADS, HEAD_DIM_KPE)),
    ("ckv_cache", _BF16, ("P", PAGE_SIZE, HEAD_DIM_CKV)),
    ("kpe_cache", _BF16, ("P", PAGE_SIZE, HEAD_DIM_KPE)),
    ("qo_indptr", _I32, ("B",)),
    ("kv_indptr", _I32, ("B",)),
    ("kv_indices", _I32, ("N",)),
    ("output", _BF16, ("T", NUM_QO_HEADS, HEAD_DIM_CKV)),  # optional (allocated when None)
    ("lse", _F32, ("T", NUM_QO_HEADS)),  # optional
)
OPTIONAL = ("output", "lse")
# rules across sizes: (holds, argument, what is wrong)
SIZE_RULES = (
    (lambda d: d["B"] >= 1, "qo_indptr", "expected at least one element (batch_size + 1), got 0"),
    (
        lambda d: d["B"] > 1 or d["T"] == 0,
        "qo_indptr",
        "has no sequence (length 1) but q_nope holds {T} tokens",
    ),
    (
        lambda d: d["P"] > 0 or d["N"] == 0,
        "ckv_cache",
        "has 0 pages but kv_indices holds {N} page indices",
    ),
)


def _inputs_ok(*tensors) -> bool:
    """Whether the nine tensor arguments (``output``/``lse`` may be None) obey every rule of
    ``TENSOR_RULES`` and ``SIZE_RULES``: the common case in a few microseconds, no messages."""
    try:
        q_nope = tensors[0]
        dims = {
            "T": q_nope.shape[0], "P": tensors[2].shape[0], "B": tensors[4].shape[0],
            "N": tensors[6].shape[0],
        }  # fmt: skip
        dev = q_nope.get_device()  # CUDA index, else -1 (CPU and meta alike)
        cpu = dev < 0
        if cpu and not q_nope.is_cpu:
            return False  # meta tensors: the explaining path compares devices exactly
        for x, (_, dtype, shape) in zip(tensors, TENSOR_RULES):
            if x is None and _ in OPTIONAL:
                continue
            if x.dtype is not dtype or x.dim() != len(shape) or x.get_device() != dev:
                return False
            if cpu and not x.is_cpu:
                return False
            for size, want in zip(x.shape, shape):
                if size != (dims[want] if want.__class__ is str else want):
                    return False
            if x.stride(-1) != 1 and x.numel() > 0:
                return False
        return all(holds(dims) for holds, _, _ in SIZE_RULES)
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


def _dtype_hint(name: str, got: torch.dtype, want: torch.dtype) -> str:
    """How to fix a wrong dtype: an input can be converted; a destination cannot (a converted
    copy would receive the result, not the caller's buffer)."""
    if name in OPTIONAL:
        return f"; pass a {want} buffer (the result is written into it), or None to allocate one"
    if got in (torch.int64, torch.float16, torch.float32, torch.bfloat16):
        return f"; convert with .to({want})"
    return ""


def _explain_inputs(*tensors) -> Tuple[int, int, int, int]:
    """``TENSOR_RULES`` and ``SIZE_RULES`` one by one, raising on the first broken one with what
    to fix; returns the sizes when every rule holds."""
    dims = {}
    device = None
    for x, (name, dtype, shape) in zip(tensors, TENSOR_RULES):
        if x is None and name in OPTIONAL:
            continue
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
        if x.dtype != dtype:
            raise ValueError(
                f"{name}: expected dtype {dtype}, got {x.dtype}{_dtype_hint(name, x.dtype, dtype)}"
            )
        want = [dims.get(e, e) if isinstance(e, str) else e for e in shape]
        if x.dim() != len(shape) or any(
            not isinstance(w, str) and w != a for w, a in zip(want, x.shape)
        ):
            text = "[" + ", ".join("*" if isinstance(w, str) else str(w) for w in want) + "]"
            raise ValueError(f"{name}: expected shape {text}, got {list(x.shape)}")
        for e, a in zip(shape, x.shape):
            if isinstance(e, str):
                dims.setdefault(e, a)
        if x.numel() > 0 and x.stride(-1) != 1:
            raise ValueError(
                f"{name}: the last dimension must be contiguous (stride 1), got strides "
                f"{tuple(x.stride())}; pass {name}.contiguous()"
            )
        if device is None:
            device = x.device
        elif x.device != device:
            raise ValueError(
                f"{name}: expected every tensor on {device} (where q_nope is), got {x.device}"
            )
    for holds, name, message in SIZE_RULES:
        if not holds(dims):
            raise ValueError(f"{name}: {message.format(**dims)}")
    return dims["T"], dims["P"], dims["B"] - 1, dims["N"]


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

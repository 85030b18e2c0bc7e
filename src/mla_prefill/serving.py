"""Serving: plan once per batch, run once per layer.

A serving engine runs prefill attention eagerly, once per layer, on batches it planned once, so
host time per ``run`` is paid once per layer. ``MLAPrefillPlan.plan`` does everything that
depends only on the batch (sizes, tiles, validation when asked; the index tensors are copied
into buffers the plan owns, as FlashInfer's wrapper copies them into its workspace; the work
table of ordered tiles or of a scheduled split is written there, on the plan's stream, so no
layer's ``run`` launches the table kernel again), and the first ``run`` binds the launches to
the call's layout: each kernel's compiled launcher, its grid and its fixed arguments. A later
``run`` with the same layout (shapes, strides, dtypes and the 16-byte alignment Triton
specialises on) checks the inputs' metadata and calls each launcher with the new pointers: no
planning, no Triton binding.

CUDA graphs: ``run`` after ``plan`` allocates nothing (the split partials and the work table
belong to the plan) and never syncs, so it can be captured; the graph reads the plan's index
buffers and table, so a new ``plan`` of a batch of the same sizes (new values copied into the
same buffers, the table written again) replays correctly, as a serving engine's graph runner
expects; index values written into the buffers without a ``plan`` are not (nor are they for
FlashInfer's wrapper). A plan is one stream's: two streams running concurrently need one plan
each (as FlashInfer's wrapper needs one workspace each).
"""

import warnings
from typing import Optional, Tuple, Union

import torch
import triton

from mla_prefill.kernel import launch as launch_mod
from mla_prefill.kernel.attention import is_interpreter
from mla_prefill.kernel.bound import bind, call_bound, current_stream, layout_key
from mla_prefill.kernel.config import KernelConfig, choose_config
from mla_prefill.kernel.launch import launch
from mla_prefill.kernel.main import (
    _kernel,
    call_slots,
    carve_buffers,
    config_problems,
    execute,
    gluon_available,
    gluon_compiles,
    plan_call,
    resolve_target,
)
from mla_prefill.kernel.plan import (
    ARG_PART_LSE,
    ARG_PART_O,
    ARG_TABLE,
    CallShape,
    LaunchPlan,
    buffer_elements,
    split_layout,
    table_launch,
)
from mla_prefill.kernel.targets import Target, device_target
from mla_prefill.kernel.validate import (
    HEAD_DIM_CKV,
    NUM_QO_HEADS,
    check_index_data,
    check_inputs,
    sm_scale_value,
)

_I32 = torch.int32


class HopperFallbackWarning(RuntimeWarning):
    """``MLAPrefillPlan``'s warning that a Hopper GPU runs the portable kernel
    (``hopper_fallback_note``); a caller that reports the note itself filters this category."""


def hopper_fallback_note(target: Target) -> Optional[str]:
    """Why a Hopper GPU runs the portable Triton kernel instead of the Gluon one its large tiles
    are chosen for, or None. The Gluon kernel runs under Triton 3.6 (CUDA torch 2.10/2.11), the
    release of its full GPU evidence; 3.7-3.9, which it compiles under (CI), enable it with
    ``MLA_PREFILL_UNRUN_TRITON=1`` (3.7.1 ran it on an H100: ``benchmarks/results/triton-3.7.1/``),
    so the note names that setting where the kernel compiles (``gluon_compiles``). Otherwise
    Hopper gets the Triton kernel's 2-token tiles, several times slower on large batches
    (``docs/design.md``, Triton versions)."""
    if target.capability != 90 or gluon_available():
        return None
    return (
        f"mla-prefill: Triton {triton.__version__} on {target.gpu}: the Hopper (Gluon) kernel "
        "runs with Triton 3.6, so this GPU runs the portable Triton kernel, several times slower "
        "on batches of 1000 tokens or more; for the Hopper kernel install CUDA torch 2.10 or 2.11 "
        "(Triton 3.6)"
        + (
            f", or set {launch_mod.UNRUN_TRITON_ENV}=1 to run it under this Triton (it compiles "
            "here; its full GPU checks were made under 3.6: check it with python -m "
            "mla_prefill.fuzz)"
            if gluon_compiles()
            else ""
        )
    )


def fallback_note_here() -> Optional[str]:
    """``hopper_fallback_note`` of the current CUDA device (the bench and the replay print it)."""
    return hopper_fallback_note(device_target(torch.cuda.current_device()))


class _Bound:
    """The launches of one plan bound to one call layout: per launch, the compiled kernel (or
    None: Triton's own launch), its grid, its argument template and its constexpr tail."""

    __slots__ = ("key", "plan", "launches", "direct")

    def __init__(self, key, plan: LaunchPlan, launches, direct: bool):
        self.key, self.plan, self.launches, self.direct = key, plan, launches, direct


class MLAPrefillPlan:
    """Plan once per batch (``plan``), run once per layer (``run``).

    >>> p = MLAPrefillPlan(torch.device("cuda"))
    >>> p.plan(qo_indptr, kv_indptr, kv_indices, sm_scale)        # once per batch
    >>> out, lse = p.run(q_nope, q_pe, ckv_cache, kpe_cache)       # per layer
    """

    def __init__(
        self,
        device: Union[None, str, torch.device] = None,
        target: Union[None, str, Target] = None,
        index_buffers: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
    ):
        """``device``: where the kernels run (default: the current CUDA device, or the CPU
        under ``TRITON_INTERPRET=1``); ``target``: plan another GPU's tiles; ``index_buffers``:
        caller-owned (qo_indptr, kv_indptr, kv_indices) buffers the plan copies into (a CUDA
        graph runner's static buffers; every batch must fit them)."""
        self.interpret = is_interpreter()
        if device is None:
            device = "cpu" if self.interpret else torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.here = None if self.interpret else device_target(self.device.index)
        note = None if self.here is None else hopper_fallback_note(self.here)
        if note is not None:
            warnings.warn(note, HopperFallbackWarning, stacklevel=2)
        self.target = None if target is None else resolve_target(target, self.device)
        self._fixed = index_buffers
        self._buffers = {}
        self._partials = None
        self._bound: Optional[_Bound] = None
        # the last plan's sizes and tiles (None: not planned yet)
        self.total_q = self.batch = self.num_kv = self.config = None

    # -- plan: once per batch -------------------------------------------------------------------

    def plan(
        self,
        qo_indptr: torch.Tensor,
        kv_indptr: torch.Tensor,
        kv_indices: torch.Tensor,
        sm_scale: float,
        *,
        total_q: Optional[int] = None,
        num_pages: Optional[int] = None,
        validate: bool = False,
        config: Optional[KernelConfig] = None,
    ) -> "MLAPrefillPlan":
        """Plan the batch described by the index tensors (int32; on the host or the device).

        ``total_q`` defaults to ``qo_indptr[-1]`` (a read that syncs when ``qo_indptr`` is on the
        GPU, as FlashInfer's plan does); ``validate`` checks the index values (needs
        ``num_pages``); ``config`` pins tiles. The copies and the work table's kernel are queued
        on the current stream, the one the plan's runs go on.
        """
        for name, t in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr),
                        ("kv_indices", kv_indices)):  # fmt: skip
            if not isinstance(t, torch.Tensor) or t.dtype != _I32 or t.dim() != 1:
                raise ValueError(f"{name}: expected a 1-D int32 tensor, got {_describe(t)}")
        if kv_indptr.shape != qo_indptr.shape or qo_indptr.shape[0] < 1:
            raise ValueError(
                f"qo_indptr, kv_indptr: expected the same length >= 1 (batch_size + 1), got "
                f"{qo_indptr.shape[0]} and {kv_indptr.shape[0]}"
            )
        if total_q is None:
            total_q = int(qo_indptr[-1])
        batch, num_kv = qo_indptr.shape[0] - 1, kv_indices.shape[0]
        if validate:
            if num_pages is None:
                raise ValueError("plan(validate=True) needs num_pages (ckv_cache.shape[0])")
            check_index_data(qo_indptr, kv_indptr, kv_indices, total_q, num_pages)
        self.scale = sm_scale_value(sm_scale)
        if config is None and total_q > 0:
            t = self.target or self.here or resolve_target(None, self.device)
            config = choose_config(
                total_q, batch, num_kv, t, gluon_api=gluon_available() and not self.interpret
            )
        if config is not None:
            bad = config_problems(config, total_q, batch, self.here, self.interpret)
            if bad:
                raise ValueError("config: " + "; ".join(bad))
        if (total_q, batch, num_kv, config) != (self.total_q, self.batch, self.num_kv, self.config):
            self._bound = None  # the bound launches hold the sizes as fixed arguments
        self.total_q, self.batch, self.num_kv, self.config = total_q, batch, num_kv, config
        # the indices into buffers the plan owns: a captured graph reads these, so a new plan of
        # a batch of the same sizes replays correctly
        self.qo_indptr = self._copy_in(0, "qo_indptr", qo_indptr)
        self.kv_indptr = self._copy_in(1, "kv_indptr", kv_indptr)
        self.kv_indices = self._copy_in(2, "kv_indices", kv_indices)
        if config is not None:
            self._write_table(config)
        return self

    def _write_table(self, config: KernelConfig) -> None:
        """Size the split buffers for the batch and write its work table now (the order of
        ordered tiles, a scheduled split's pieces): it depends on the indptrs alone, so every
        layer's ``run`` reads the same table and launches only attention (and the combine)."""
        partials, table = split_layout(config, self.total_q, self.batch)
        sizes = buffer_elements(partials, table)
        if sizes is None:
            return
        n = sum(sizes)
        if self._partials is None or self._partials.numel() < n:
            self._partials = torch.empty(n, dtype=torch.float32, device=self.device)
            self._bound = None  # the bound launches take the buffers' pieces
        ln = table_launch(config, self.total_q, self.batch, pdl=False)
        if ln is None:
            return
        slots = {"qo_indptr": self.qo_indptr, "kv_indptr": self.kv_indptr,
                 ARG_TABLE: carve_buffers(partials, table, self._partials)[ARG_TABLE]}  # fmt: skip
        args = tuple(slots[a] if a.__class__ is str else a for a in ln.args)
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):  # Triton launches on the current device
                launch(_kernel(ln.kernel), ln.grid, args, dict(ln.consts), **dict(ln.options))
        else:
            launch(_kernel(ln.kernel), ln.grid, args, dict(ln.consts), **dict(ln.options))

    def _copy_in(self, i: int, name: str, src: torch.Tensor) -> torch.Tensor:
        n = src.shape[0]
        if self._fixed is not None:
            buf = self._fixed[i]
            if buf.dtype != _I32 or buf.device != self.device or buf.shape[0] < n:
                raise ValueError(
                    f"index buffer {name}: holds {buf.shape[0]} {buf.dtype} on {buf.device}, "
                    f"the batch needs {n} int32 on {self.device}"
                )
            dst = buf[:n]
        else:
            dst = self._buffers.get(name)
            if dst is None or dst.shape[0] != n:
                dst = torch.empty(n, dtype=_I32, device=self.device)
                self._buffers[name] = dst
                self._bound = None
        dst.copy_(src, non_blocking=True)
        return dst

    # -- run: once per layer --------------------------------------------------------------------

    def run(
        self,
        q_nope: torch.Tensor,
        q_pe: torch.Tensor,
        ckv_cache: torch.Tensor,
        kpe_cache: torch.Tensor,
        out: Optional[torch.Tensor] = None,
        lse: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``output`` [total_q, 16, 512] bf16 and base-2 ``lse`` [total_q, 16] fp32 of the
        planned batch; ``out``/``lse`` are written when given."""
        try:
            if out is None:
                out = torch.empty((q_nope.shape[0], NUM_QO_HEADS, HEAD_DIM_CKV),
                                  dtype=torch.bfloat16, device=q_nope.device)  # fmt: skip
            if lse is None:
                lse = torch.empty((q_nope.shape[0], NUM_QO_HEADS), dtype=torch.float32,
                                  device=q_nope.device)  # fmt: skip
            key = layout_key(q_nope, q_pe, ckv_cache, kpe_cache, out, lse)
        except (AttributeError, TypeError, IndexError):  # not tensors: say which, and what
            self._check(q_nope, q_pe, ckv_cache, kpe_cache, out, lse)
            raise
        bound = self._bound
        if bound is None or bound.key != key or self.interpret:
            # a layout not seen since the plan: every check, then bind (which launches)
            self._check(q_nope, q_pe, ckv_cache, kpe_cache, out, lse)
            if self.total_q == 0:
                return out, lse
            if bound is None or bound.key != key:
                self._bind(key, q_nope, q_pe, ckv_cache, kpe_cache, out, lse)
                return out, lse
        # the same metadata as a checked, bound call: the same checks would pass
        slots = (q_nope, q_pe, ckv_cache, kpe_cache, self.qo_indptr, self.kv_indptr,
                 self.kv_indices, out, lse)  # fmt: skip
        if bound.direct:
            call_bound(bound.launches, (*slots, *self._parts), current_stream(self.device.index))
        else:
            execute(bound.plan, slots[:7], out, lse, self.scale, partials=self._partials)
        return out, lse

    def _check(self, q_nope, q_pe, ckv_cache, kpe_cache, out, lse) -> None:
        if self.total_q is None:
            raise RuntimeError("run() before plan(): plan the batch first")
        check_inputs(
            q_nope, q_pe, ckv_cache, kpe_cache, self.qo_indptr, self.kv_indptr, self.kv_indices,
            out, lse,
        )  # fmt: skip
        if q_nope.shape[0] != self.total_q:
            raise ValueError(
                f"q_nope: the plan is for {self.total_q} tokens, got {q_nope.shape[0]}; plan "
                "this batch first"
            )
        if q_nope.device != self.device:
            raise ValueError(f"q_nope: the plan runs on {self.device}, got {q_nope.device}")
        if self.interpret:  # the interpreter reads host memory: keep the index checks
            check_index_data(self.qo_indptr, self.kv_indptr, self.kv_indices, self.total_q,
                             ckv_cache.shape[0])  # fmt: skip

    def _bind(self, key, q_nope, q_pe, ckv_cache, kpe_cache, out, lse) -> _Bound:
        """Plan the launches for this layout, run them through Triton (compiling if needed),
        and keep each compiled kernel's launcher with its fixed arguments (``kernel.bound``)."""
        shape = CallShape.of(q_nope, q_pe, ckv_cache, kpe_cache, out, lse, self.batch,
                             self.num_kv)  # fmt: skip
        # the work table is the plan's (``_write_table``), so the launches leave it out
        plan = plan_call(shape, self.here, self.interpret, self.config, table_ready=True)
        tensors = (q_nope, q_pe, ckv_cache, kpe_cache, self.qo_indptr, self.kv_indptr,
                   self.kv_indices)  # fmt: skip
        slots = call_slots(plan, tensors, out, lse, self.scale, self._partials)
        launches = bind(plan, slots, _kernel)  # launches this call; None: no direct launch
        # the plan's own split buffers, passed per call like the call's tensors
        self._parts = tuple(slots.get(k) for k in (ARG_PART_O, ARG_PART_LSE, ARG_TABLE))
        self._bound = _Bound(key, plan, launches or [], launches is not None)
        return self._bound


def _describe(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.dtype} tensor of shape {list(t.shape)}"
    return type(t).__name__

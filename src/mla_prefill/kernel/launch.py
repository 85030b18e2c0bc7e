"""Launching a compiled Triton kernel without ``JITFunction.run``'s per-call binding (Triton
3.6-3.9).

``kernel[grid](*args, **kwargs)`` binds every argument, specialises it (``native_specialize_impl``)
and builds a string cache key from the specialisation and the options on every call: ~20 us of
host time per launch on the H200 machine's host, the largest part of our ~54 us per call against
FlashInfer's ~27 (measured 2026-12-03; docs/design.md, host time). ``launch`` sends the first call of each argument
class through Triton, keeps the ``CompiledKernel`` Triton returns, and calls its launcher directly
(``CompiledKernel.run``, as ``JITFunction.run`` itself does) for later calls of the same class.

The class (``arg_class``) is at least as fine as Triton 3.6's specialisation, so a cached kernel is
the one Triton would pick: per ``int``, whether 16 divides it (Triton: ``i32``, divisible by 16 or
not) or, for 0, 1, negatives and values outside int32 (``constexpr 1``, ``i64``), the value itself
(in a 1-tuple, so it never equals a flag); per tensor, its dtype and whether 16 divides its
address (Triton: the same); a ``float`` is ``fp32`` whatever its value. So a call site has a few
classes, not one per shape: the cache stays small (and is cleared past ``MAX_ENTRIES``).

Triton 3.7-3.9 launch a compiled kernel with the same ``CompiledKernel.run`` call and specialise
arguments as 3.6 does; 3.7 adds a stage-inspection hook to the cache key (``launch`` requires it
unset) and 3.9 an fp-sanitizer option (part of ``cache_key``). They are enabled only with
``MLA_PREFILL_UNRUN_TRITON=1``: the full GPU checks of this launcher were made under 3.6 (3.7.1
ran the quick ones). Any other argument type, launch hooks (profilers), pre-run or
stage-inspection hooks, another Triton version or ``MLA_PREFILL_TRITON_LAUNCH=1`` (read at
import) send every call through Triton, as does the interpreter. No pointer or value of a call
is cached: the arguments are passed afresh each time.
"""

import os
from typing import Any, Dict, Tuple

import torch
import triton

TRITON_LAUNCH_ENV = "MLA_PREFILL_TRITON_LAUNCH"
# read once (as Triton reads TRITON_INTERPRET once, at decoration); tests set the attribute
TRITON_LAUNCH = os.environ.get(TRITON_LAUNCH_ENV, "0") == "1"
# Triton releases: those the kernels' GPU evidence was made under (benchmarks/results/), and
# those the Hopper kernel and this launcher are written for (compiled in CI; ``JITFunction.run``
# compared line by line). MLA_PREFILL_UNRUN_TRITON=1 (read at import) enables both parts under
# a release of the second kind that is not of the first.
RUN_RELEASES = ("3.6.",)
WRITTEN_FOR = ("3.6.", "3.7.", "3.8.", "3.9.")
UNRUN_TRITON_ENV = "MLA_PREFILL_UNRUN_TRITON"
UNRUN_TRITON = os.environ.get(UNRUN_TRITON_ENV, "0") == "1"


def release_enabled(version: str) -> bool:
    """Whether the Gluon kernel and this launcher run under Triton ``version``."""
    return version.startswith(RUN_RELEASES) or (UNRUN_TRITON and version.startswith(WRITTEN_FOR))


_SUPPORTED = release_enabled(triton.__version__)
_INT32_MAX = 0x7FFFFFFF
_Tensor = torch.Tensor

try:  # the same device / stream queries as ``JITFunction.run``
    from triton import knobs
    from triton.knobs import HookChain
    from triton.runtime.driver import driver as _driver
    from triton.runtime.jit import JITFunction
except ImportError:  # pragma: no cover - another Triton: always the plain launch
    _SUPPORTED = False


def _idle(hook) -> bool:
    """No launch hook to call: Triton 3.6 keeps an empty ``HookChain`` there, which its own
    launcher calls (a no-op) on every launch; a profiler adds to it or replaces it."""
    return hook is None or (type(hook) is HookChain and not hook.calls)


def arg_class(args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """A key per runtime argument, at least as fine as Triton 3.6's specialisation of it.

    ``None`` in the result means an argument of a type this module does not classify.
    """
    return tuple(
        [
            (not a & 15 if 1 < a <= _INT32_MAX else (a,))
            if type(a) is int
            else (a.dtype, not a.data_ptr() & 15)
            if type(a) is _Tensor
            else float
            if type(a) is float
            else None
            for a in args
        ]
    )


class _Entry:
    __slots__ = ("kernel", "tail")

    def __init__(self, kernel, tail):
        self.kernel = (
            kernel  # the CompiledKernel, or None: this call site always goes through Triton
        )
        self.tail = tail  # constexpr values in signature order, after the runtime arguments


_CACHE: Dict[Tuple[Any, ...], _Entry] = {}
MAX_ENTRIES = 4096


def _plain(fn, grid, args, consts, options):
    return fn[grid](*args, **consts, **options)


def hooks_idle() -> bool:
    """No launch hook is set (a profiler sets one), nor a stage-inspection hook (3.7 and later:
    it adds to Triton's cache key): launching without Triton skips nothing."""
    return (
        _idle(knobs.runtime.launch_enter_hook)
        and _idle(knobs.runtime.launch_exit_hook)
        and getattr(knobs.runtime, "add_stages_inspection_hook", None) is None
    )


def direct_launch_possible(fn) -> bool:
    """Whether calls of ``fn`` may skip ``JITFunction.run``: an enabled Triton release
    (``release_enabled``), no launch or pre-run
    hook, a compiled (not interpreted) kernel, and ``MLA_PREFILL_TRITON_LAUNCH`` unset."""
    return (
        _SUPPORTED
        and not TRITON_LAUNCH
        and isinstance(fn, JITFunction)  # the interpreter's InterpretedFunction is not one
        and not fn.pre_run_hooks
        and hooks_idle()
    )


def cache_key(
    fn, device: int, cls: Tuple[Any, ...], consts: Dict[str, Any], options: Dict[str, Any]
):
    """What a cached launcher is filed under: everything Triton's own key is made of, with the
    arguments' classes in place of their specialisation."""
    return (
        fn,
        device,
        cls,
        tuple(consts.values()),
        tuple(options.items()),
        knobs.runtime.debug,
        knobs.compilation.instrumentation_mode,
        getattr(knobs.compilation, "fpsan_homomorphic_casts", None),  # Triton 3.9
    )


def launch(
    fn, grid: Tuple[int, ...], args: Tuple[Any, ...], consts: Dict[str, Any], **options: Any
) -> None:
    """``fn[grid](*args, **consts, **options)``, through the cached launcher where it is safe.

    ``args`` are the kernel's leading runtime parameters, in order; ``consts`` every remaining
    (constexpr) parameter by name; ``options`` Triton's (``num_warps``, ``launch_pdl``, ...).
    """
    if not direct_launch_possible(fn):
        _plain(fn, grid, args, consts, options)
        return
    cls = arg_class(args)
    device = _driver.active.get_current_device()
    key = cache_key(fn, device, cls, consts, options)
    entry = _CACHE.get(key)
    if entry is None:
        kernel = _plain(fn, grid, args, consts, options)
        if None not in cls:
            if len(_CACHE) >= MAX_ENTRIES:
                _CACHE.clear()
            _CACHE[key] = _new_entry(fn, kernel, args, consts)
        return
    kernel = entry.kernel
    if kernel is None:
        _plain(fn, grid, args, consts, options)
        return
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    kernel.run(
        grid[0], g1, g2, _driver.active.get_current_stream(device), kernel.function,
        kernel.packed_metadata, None, None, None, *args, *entry.tail,
    )  # fmt: skip


def _new_entry(fn, kernel, args, consts) -> _Entry:
    """The launcher for later calls of this class, or an entry that sends them through Triton
    when the call does not have the layout ``launch`` relies on (runtime parameters first, then
    exactly the constexpr ones)."""
    if hasattr(kernel, "result"):  # an asynchronous compile's future
        kernel = kernel.result()
    if getattr(kernel, "run", None) is None or getattr(kernel, "function", None) is None:
        return _Entry(None, ())  # (``run`` loads the module, as Triton's own launch did)
    params = fn.params
    n = len(args)
    layout_ok = (
        len(params) == n + len(consts)
        and not any(p.is_constexpr for p in params[:n])
        and all(p.is_constexpr and p.name in consts for p in params[n:])
        and hasattr(kernel, "packed_metadata")
    )
    if not layout_ok:
        return _Entry(None, ())
    return _Entry(kernel, tuple(consts[p.name] for p in params[n:]))


def cached_kernel(fn, args: Tuple[Any, ...], consts: Dict[str, Any], **options: Any):
    """The ``CompiledKernel`` a call with these arguments would launch directly (None: Triton's
    own launch). For tests, which compare it with the one ``JITFunction.run`` picks."""
    cls = arg_class(args)
    entry = _CACHE.get(cache_key(fn, _driver.active.get_current_device(), cls, consts, options))
    return None if entry is None else entry.kernel


def clear_cache() -> None:
    """Forget every cached launcher (tests; the compiled kernels stay in Triton's own cache)."""
    _CACHE.clear()

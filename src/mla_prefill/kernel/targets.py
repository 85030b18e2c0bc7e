"""The GPUs the tile chooser plans for, as data.

A ``Target`` holds the facts a launch plan depends on: compute capability, SM count and the
opt-in shared memory one block may have. The table lists the GPUs we check (``mla-prefill
portability`` compiles every launch for each of them on any machine); on a real device the facts
come from its properties (``device_target``), so a GPU not in the table plans with its own
numbers. Figures are NVIDIA's (CUDA C++ Programming Guide, compute-capability tables; datasheets
for SM counts).
"""

import functools
from dataclasses import dataclass
from typing import Dict

import torch


@dataclass(frozen=True)
class Target:
    """name: short key (``--target``); gpu: the name a device reports (flashinfer-bench's
    ``target_hardware``); capability: major * 10 + minor; max_shared: opt-in shared memory per
    block, bytes."""

    name: str
    gpu: str
    capability: int
    num_sms: int
    max_shared: int

    @property
    def arch(self) -> str:
        return f"sm_{self.capability}{'a' if self.capability >= 90 else ''}"


_SHARED_227K = 232_448  # sm_90 / sm_100: 227 KB opt-in per block
TARGETS: Dict[str, Target] = {
    t.name: t
    for t in (
        Target("h200", "NVIDIA H200", 90, 132, _SHARED_227K),
        Target("h100", "NVIDIA H100", 90, 132, _SHARED_227K),  # SXM5; same chip as H200
        Target("b200", "NVIDIA B200", 100, 148, _SHARED_227K),
        Target("a100", "NVIDIA A100", 80, 108, 166_912),  # 163 KB opt-in
        # what a GPU of no known kind is planned as when no device can be asked (sm_86/89/120
        # consumer parts: 99 KB opt-in per block, the smallest of the Triton-supported GPUs)
        Target("generic", "unknown GPU", 80, 82, 101_376),
    )
}
DEFAULT_TARGET = TARGETS["h200"]  # shapes-only planning (tests, tools) without naming a GPU


def target_named(name: str) -> Target:
    """The table's target ``name``; a ValueError lists the known names."""
    try:
        return TARGETS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None


def _shared_optin(props, index: int) -> int:
    """Opt-in shared memory per block: torch's property, else Triton's driver query."""
    value = getattr(props, "shared_memory_per_block_optin", 0)
    if value:
        return int(value)
    from triton.runtime import driver

    return int(driver.active.utils.get_device_properties(index)["max_shared_mem"])


@functools.lru_cache(maxsize=None)
def device_target(index: int) -> Target:
    """The target of CUDA device ``index``, from its properties (named after the table's entry
    whose GPU name and capability it has, else ``"sm_XY"``)."""
    props = torch.cuda.get_device_properties(index)
    capability = props.major * 10 + props.minor
    shared = _shared_optin(props, index)
    name = f"sm_{capability}"
    for t in TARGETS.values():
        if t.gpu in props.name and t.capability == capability:
            name = t.name
            break
    return Target(name, props.name, capability, props.multi_processor_count, shared)

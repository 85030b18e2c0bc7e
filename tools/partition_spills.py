"""Register spills per warp-specialised partition of compiled launches (no GPU needed).

ptxas reports one spill figure per kernel. A warp-specialised kernel's partitions run under
their own register caps (`setmaxnreg`), and each partition's code lies between the
`USETMAXREG` instructions of its warps in the SASS, its local-memory stores and loads (`STL`,
`LDL`: the spills) included. This prints, per launch, every such region with its cap and the
bytes it spills, so a register split can be tuned partition by partition (docs/design.md,
Gluon kernel). The code before the first `USETMAXREG` is the common prologue.

    mla-prefill portability --target h200 --json > /tmp/rows.json
    python tools/partition_spills.py /tmp/rows.json [--workload PREFIX] [--kernel NAME]
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

from mla_prefill import portability

SETMAXREG = re.compile(r"USETMAXREG\.\w+(?:\.\w+)*\s+(?:\w+,\s*)?(0x[0-9a-f]+|\d+)")
LOCAL = re.compile(r"\b(STL|LDL)(?:\.LU)?(?:\.(64|128|U8|S8|U16|S16))?\s")
WIDTH = {None: 4, "64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}


def sass_of(spec: dict) -> str:
    """The SASS of a launch spec (a row of ``mla-prefill portability --json``)."""
    kernel = portability.compile_spec(spec)
    command = portability.ptxas_command(spec)
    cuobjdump = Path(command[0]).with_name("cuobjdump")
    if not cuobjdump.exists():
        sys.exit(f"partition_spills: no cuobjdump beside {command[0]}")
    with tempfile.TemporaryDirectory() as d:
        ptx, cubin = Path(d) / "k.ptx", Path(d) / "k.cubin"
        ptx.write_text(kernel.asm["ptx"])
        subprocess.run([*command, str(ptx), "-o", str(cubin)], check=True)
        return subprocess.run([str(cuobjdump), "-sass", str(cubin)], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip


def regions(sass: str) -> List[dict]:
    """The SASS cut at each `USETMAXREG`: the region's cap (None: the prologue, under the
    kernel's own limit) and the bytes its `STL`/`LDL` move."""
    out = [dict(cap=None, stl=0, ldl=0, instructions=0)]
    for line in sass.splitlines():
        if not re.search(r"/\*[0-9a-f]{4,}\*/", line):
            continue
        m = SETMAXREG.search(line)
        if m:
            out.append(dict(cap=int(m.group(1), 0), stl=0, ldl=0, instructions=0))
            continue
        out[-1]["instructions"] += 1
        for op, width in LOCAL.findall(line):
            out[-1][op.lower()] += WIDTH[width or None]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rows", help="JSON of `mla-prefill portability --json`")
    p.add_argument("--workload", default="", help="only launches of workloads with this prefix")
    p.add_argument("--kernel", default="_mla_prefill_ws_kernel", help="kernel function name")
    args = p.parse_args()
    specs = {}
    for row in json.loads(Path(args.rows).read_text()):
        if row["kernel"].endswith(":" + args.kernel) and row["workload"].startswith(args.workload):
            spec = portability._spec_of(row)
            specs.setdefault(portability._spec_key(spec), (spec, []))[1].append(row["workload"])
    if not specs:
        print("partition_spills: no launch matches", file=sys.stderr)
        return 1
    for spec, workloads in specs.values():
        flags = {k: v for k, v in spec["constants"].items() if isinstance(v, bool) and v}
        print(f"{spec['kernel']} sm_{spec['capability']} {sorted(flags)}: "
              f"{', '.join(w[:8] for w in workloads[:6])}{' ...' if len(workloads) > 6 else ''}")  # fmt: skip
        for r in regions(sass_of(spec)):
            if r["instructions"]:
                cap = "prologue" if r["cap"] is None else f"{r['cap']} registers"
                print(f"  {cap:>14}: {r['instructions']:6d} instructions, spill stores "
                      f"{r['stl']} B, loads {r['ldl']} B")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

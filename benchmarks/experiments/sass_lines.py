"""Static SASS of the Triton kernel for sm_90, compiled here without a GPU: instruction count,
the commonest opcodes, and the source lines that cost the most instructions.

    python benchmarks/experiments/sass_lines.py 1,32,8,2 1,64,8,1    # block_t,block_n,warps,stages

The 1-token tiles are instruction-bound (Nsight Compute, NOTES.md session 6) and run their
kernel body about once per call, so the static count is a usable proxy for their time when
trying instruction-saving edits offline. Uses the nvdisasm that ships with Triton.
"""

import collections
import os
import re
import subprocess
import sys
import tempfile

import triton

sys.path.insert(0, os.path.dirname(__file__))
from ttgir_buffers import compile_config  # noqa: E402

NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
SRC = os.path.join(os.path.dirname(__file__), "../../src/mla_prefill/kernel/attention.py")


def disassemble(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [NVDISASM, "-g", "-c", f.name], capture_output=True, text=True, check=True
        ).stdout


def main(specs, top=15):
    src = open(SRC).read().splitlines()
    for spec in specs:
        bt, bn, w, st = (int(x) for x in spec.split(","))
        sass = disassemble(compile_config(bt, bn, w, st).asm["cubin"])
        line, by_line, by_op = None, collections.Counter(), collections.Counter()
        for text in sass.splitlines():
            m = re.search(r'//## File "([^"]+)", line (\d+)', text)
            if m:
                line = (os.path.basename(m.group(1)), int(m.group(2)))
            elif re.match(r"\s+/\*[0-9a-f]{4}\*/", text):
                ins = re.sub(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[T0-9]+\s+)?", "", text)
                by_op[ins.split()[0].split(".")[0]] += 1
                by_line[line] += 1
        print(f"{spec}: {sum(by_op.values())} instructions; {by_op.most_common(10)}")
        for (name, no), n in by_line.most_common(top):
            code = src[no - 1].strip() if name == "attention.py" else ""
            print(f"  {n:5d}  {name}:{no}  {code[:80]}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["1,32,8,2", "1,64,8,1", "1,16,4,2"])

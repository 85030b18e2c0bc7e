"""A patched copy of the kernel package, importable beside the shipped one (used by
``timeline.py`` and ``gluon_phases.py``: timer reads go into the copy, never into ``src/``)."""

import shutil
import sys
import tempfile
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[2] / "src" / "mla_prefill" / "kernel"


def patched_kernel_package(pkg, edits):
    """Copy ``src/mla_prefill/kernel`` to a temporary package named ``pkg``, rewrite its files
    with ``edits`` ({file name: function from the file's text to the new text}) and put it on
    ``sys.path``; returns its folder."""
    tmp = Path(tempfile.mkdtemp()) / pkg
    shutil.copytree(KERNEL, tmp)
    for name, edit in edits.items():
        p = tmp / name
        p.write_text(edit(p.read_text()))
    sys.path.insert(0, str(tmp.parent))
    return tmp

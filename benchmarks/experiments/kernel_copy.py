"""A patched copy of the kernel package, importable beside the shipped one (used by
``timeline.py`` and ``gluon_phases.py``: timer reads go into the copy, never into ``src/``)."""

import shutil
import sys
import tempfile
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[2] / "src" / "mla_prefill" / "kernel"


def patched_kernel_package(pkg, subs, patch):
    """Copy ``src/mla_prefill/kernel`` to a temporary package named ``pkg``, rewrite each file
    named in ``subs`` ({file name: substitutions}) as ``patch(text, its substitutions, name)``
    and put the package on ``sys.path``; returns its folder."""
    tmp = Path(tempfile.mkdtemp()) / pkg
    shutil.copytree(KERNEL, tmp)
    for name, file_subs in subs.items():
        p = tmp / name
        p.write_text(patch(p.read_text(), file_subs, name))
    sys.path.insert(0, str(tmp.parent))
    return tmp

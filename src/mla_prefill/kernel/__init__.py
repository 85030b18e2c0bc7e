"""The solution's sources: Triton kernels (``attention.py``), tiles (``config.py``), input checks
(``validate.py``) and the entry point ``main.py::run``. Packed verbatim by ``mla-prefill pack``."""

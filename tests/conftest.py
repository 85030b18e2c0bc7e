"""One test suite for both paths: ``--device cpu`` (default, Triton's interpreter) or ``cuda``.

``TRITON_INTERPRET`` must be set before anything imports triton, because ``@triton.jit`` decides
at decoration time; ``pytest_configure`` runs before the test modules are imported.
"""

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", choices=["cpu", "cuda"], help="where kernels run")


def pytest_configure(config):
    if config.getoption("--device") == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    config.addinivalue_line("markers", "gpu: needs --device cuda")
    config.addinivalue_line("markers", "cpu_only: describes the CPU (interpreter) path")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--device") == "cuda":
        skip = pytest.mark.skip(reason="describes the CPU (interpreter) path")
        marker = "cpu_only"
    else:
        skip = pytest.mark.skip(reason="GPU test: run with --device cuda on a CUDA machine")
        marker = "gpu"
    for item in items:
        if marker in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device(request):
    dev = request.config.getoption("--device")
    if dev == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.exit("--device cuda given but torch sees no CUDA device", returncode=2)
    return dev


@pytest.fixture(scope="session")
def reference():
    from mla_prefill.io import reference_fn

    return reference_fn()

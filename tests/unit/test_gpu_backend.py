"""Backend detection: works without CuPy, never imports it to detect it, and says why not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import replayverify
from replayverify.gpu import backend

PACKAGE = Path(replayverify.__path__[0])


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_detection_never_imports_cupy() -> None:
    code = (
        "import sys\n"
        "import replayverify.gpu as g, replayverify.gpu.journal, replayverify.gpu.philox\n"
        "import replayverify.gpu.device, replayverify.evaluate.calibrate, replayverify.gpu.cli\n"
        "g.installed()\n"
        "assert 'cupy' not in sys.modules, 'importing or detecting imported cupy'\n"
        "print('ok')\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.skipif(backend.installed(), reason="CuPy is installed here; see the simulated case")
def test_without_cupy_available_is_false_and_nothing_is_imported() -> None:
    code = (
        "import sys, replayverify.gpu as g\n"
        "print(g.available()); print(g.unavailable_reason())\n"
        "print('cupy' in sys.modules)\n"
        "try:\n"
        "    g.get_xp('cupy')\n"
        "except g.GpuUnavailable as e:\n"
        "    print(e)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "False",
        "CuPy is not installed (pip install 'replayverify[gpu]')",
        "False",
        "GPU backend unavailable: CuPy is not installed (pip install 'replayverify[gpu]')",
    ]


def test_simulated_missing_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(backend, "_loaded", None)
    assert not backend.installed()
    assert not backend.available()
    assert backend.unavailable_reason() == backend.INSTALL_HINT
    with pytest.raises(backend.GpuUnavailable, match=r"^GPU backend unavailable: CuPy is not"):
        backend.get_xp("cupy")
    assert backend.get_xp("numpy") is np
    with pytest.raises(ValueError, match="unknown array backend 'torch'"):
        backend.get_xp("torch")


def test_simulated_cupy_without_device(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Runtime:
        @staticmethod
        def getDeviceCount() -> int:  # CuPy's name
            return 0

    class _Cuda:
        runtime = _Runtime()

    fake = type(sys)("cupy")
    fake.cuda = _Cuda()
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(backend.importlib, "import_module", lambda name: fake)
    monkeypatch.setattr(backend, "_loaded", None)
    assert backend.installed()
    assert not backend.available()
    assert backend.unavailable_reason() == "no CUDA device"
    with pytest.raises(backend.GpuUnavailable, match=r"^GPU backend unavailable: no CUDA device$"):
        backend.require_cupy()


def test_namespace_helpers_on_numpy() -> None:
    a = np.arange(3)
    assert backend.namespace_of(a, [1, 2]) is np
    assert not backend.is_cupy_array(a)
    assert backend.is_cupy_module(np) is False
    assert backend.to_numpy(a) is a


def test_cupy_is_imported_only_under_replayverify_gpu() -> None:
    pattern = re.compile(r"^\s*(import cupy|from cupy\b)|import_module\(\s*['\"]cupy", re.M)
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if pattern.search(p.read_text(encoding="utf-8"))
        and "gpu" not in p.relative_to(PACKAGE).parts
    ]
    assert offenders == []

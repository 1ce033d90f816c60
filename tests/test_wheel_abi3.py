"""The wheel check's stable-ABI gate (.ci/abi3_symbols.py, run by .ci/wheel-check.sh): it passes a
cp311-abi3 manylinux wheel whose scanner imports only stable-ABI symbols and whose shim imports
none, and refuses the wrong tag, a version-specific file name, a symbol outside the stable ABI and
a shim that uses CPython. The shared libraries are compiled here from tiny C files (they are
never loaded, only read as ELF), so the test needs a C compiler."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
CC = shutil.which("cc") or shutil.which("gcc")
STABLE_TEST = Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_stable_abi_ctypes.py"
pytestmark = [
    pytest.mark.skipif(CC is None, reason="no C compiler"),
    pytest.mark.skipif(not STABLE_TEST.is_file(), reason="this Python has no test package"),
    pytest.mark.skipif(importlib.util.find_spec("elftools") is None, reason="no pyelftools"),
]
KINETO = "stepscope/importers/_ss_kineto.abi3.so"
SHIM = "stepscope/capture/cupti/_ss_cupti.abi3.so"
GOOD_NAME = "stepscope-0.1.0-cp311-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


def _check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("abi3_symbols", ROOT / ".ci" / "abi3_symbols.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lib(tmp: Path, name: str, calls: list[str]) -> bytes:
    """A shared library whose one function calls each of ``calls`` (undefined symbols)."""
    body = "".join(f"extern void {c}(void);\n" for c in calls)
    body += "void f(void) {" + "".join(f" {c}();" for c in calls) + " }\n"
    src = tmp / f"{name}.c"
    src.write_text(body)
    out = tmp / f"{name}.so"
    subprocess.run([str(CC), "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def _wheel(tmp: Path, name: str, parts: dict[str, bytes]) -> Path:
    path = tmp / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("stepscope/__init__.py", "")
        for member, data in parts.items():
            z.writestr(member, data)
    return path


def _run(wheel: Path, capsys: pytest.CaptureFixture[str]) -> str:
    mod = _check()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["abi3_symbols.py", str(wheel)])
        try:
            mod.main()
        except SystemExit as exc:
            return f"refused: {exc.code}"
    return "ok: " + capsys.readouterr().out


def test_stable_abi_list_is_the_pythons_own() -> None:
    allowed = _check().stable_abi()
    assert {"PyTuple_GetItem", "PyBuffer_Release", "_Py_Dealloc", "PyModule_Create2"} <= allowed
    assert "PyTuple_GET_ITEM" not in allowed and "_PyTuple_Resize" not in allowed


def test_passes_a_stable_abi_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kineto = _lib(tmp_path, "k", ["PyTuple_GetItem", "PyBuffer_Release", "_Py_Dealloc"])
    shim = _lib(tmp_path, "s", ["pthread_mutex_lock"])
    got = _run(_wheel(tmp_path, GOOD_NAME, {KINETO: kineto, SHIM: shim}), capsys)
    assert got.startswith("ok: ") and f"{KINETO}: 3 CPython symbols" in got, got


@pytest.mark.parametrize("case", ["private symbol", "newer symbol", "shim uses CPython",
                                  "version-specific name", "not abi3", "not manylinux"])
def test_refuses(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kineto_calls = ["PyTuple_GetItem"]
    shim_calls: list[str] = []
    name, kineto_member = GOOD_NAME, KINETO
    if case == "private symbol":
        kineto_calls.append("_PyTuple_Resize")
    elif case == "newer symbol":  # stable ABI since 3.13 only
        kineto_calls.append("PyUnicode_EqualToUTF8")
    elif case == "shim uses CPython":
        shim_calls.append("PyTuple_Size")
    elif case == "version-specific name":
        kineto_member = "stepscope/importers/_ss_kineto.cpython-311-x86_64-linux-gnu.so"
    elif case == "not abi3":
        name = GOOD_NAME.replace("cp311-abi3", "cp311-cp311")
    else:
        name = GOOD_NAME.replace("manylinux2014_x86_64.manylinux_2_17_x86_64", "linux_x86_64")
    parts = {kineto_member: _lib(tmp_path, "k", kineto_calls),
             SHIM: _lib(tmp_path, "s", shim_calls or ["pthread_mutex_lock"])}
    got = _run(_wheel(tmp_path, name, parts), capsys)
    assert got.startswith("refused: "), got
    bad = {"private symbol": "_PyTuple_Resize", "newer symbol": "PyUnicode_EqualToUTF8",
           "shim uses CPython": "PyTuple_Size", "version-specific name": "cpython-311",
           "not abi3": "not a cp311-abi3", "not manylinux": "not a cp311-abi3"}[case]
    assert bad in got, got

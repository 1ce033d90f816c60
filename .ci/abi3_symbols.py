"""Run by .ci/wheel-check.sh on the repaired wheel: it is tagged cp311-abi3 and manylinux_2_17,
both C parts are ``*.abi3.so``, the Kineto scanner takes from CPython only symbols of the stable
ABI, and the CUPTI shim none at all.

The stable ABI's symbols are the list that this Python's own test of it checks
(``test/test_stable_abi_ctypes.py``, SYMBOL_NAMES, generated from CPython's
``Misc/stable_abi.toml``): run with CPython 3.11, it is the ABI the wheel's tag promises. A symbol
outside it would load on the build's Python and fail on another one.

    python .ci/abi3_symbols.py WHEEL
"""

from __future__ import annotations

import ast
import io
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile  # pyelftools: auditwheel's dependency (dev extra)

# In the stable ABI (Doc/data/stable_abi.dat: since 3.2) but not in the test's list: a Py_TRACE_REFS
# build renames it (modsupport.h), so the test cannot look it up in every build.
NOT_LISTED = frozenset({"PyModule_Create2"})
PARTS = {"stepscope/importers/_ss_kineto.abi3.so": "the Kineto scanner",
         "stepscope/capture/cupti/_ss_cupti.abi3.so": "the CUPTI shim"}


def stable_abi() -> frozenset[str]:
    path = Path(sysconfig.get_paths()["stdlib"]) / "test" / "test_stable_abi_ctypes.py"
    if not path.is_file():
        sys.exit(f"{path}: missing, cannot check the stable ABI (this Python has no test package)")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "SYMBOL_NAMES" for t in node.targets):
            return frozenset(ast.literal_eval(node.value)) | NOT_LISTED
    sys.exit(f"{path}: no SYMBOL_NAMES")


def python_imports(data: bytes) -> set[str]:
    """The undefined dynamic symbols of a shared library that CPython would provide."""
    dynsym = ELFFile(io.BytesIO(data)).get_section_by_name(".dynsym")
    return {s.name for s in dynsym.iter_symbols()
            if s["st_shndx"] == "SHN_UNDEF" and re.match(r"_?Py", s.name)}


def main() -> None:
    wheel = Path(sys.argv[1])
    if not re.search(r"-cp311-abi3-.*manylinux_2_17_x86_64", wheel.name):
        sys.exit(f"{wheel.name}: not a cp311-abi3 manylinux_2_17 wheel")
    names = set(zipfile.ZipFile(wheel).namelist())
    stray = sorted(n for n in names if n.endswith(".so") and n not in PARTS)
    if stray:
        sys.exit(f"{wheel.name}: unexpected shared libraries {stray} (each C part is *.abi3.so)")
    allowed = stable_abi()
    for part, what in PARTS.items():
        if part not in names:
            sys.exit(f"{wheel.name}: no {what} ({part})")
        used = python_imports(zipfile.ZipFile(wheel).read(part))
        outside = sorted(used - allowed) if what != "the CUPTI shim" else sorted(used)
        if outside:
            sys.exit(f"{part}: uses {', '.join(outside)}, outside the stable ABI of "
                     f"{sys.version.split()[0]}")
        print(f"{part}: {len(used)} CPython symbols, all in the stable ABI "
              f"({len(allowed)} symbols, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()

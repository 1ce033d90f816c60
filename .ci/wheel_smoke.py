"""Run by .ci/wheel-check.sh inside a clean venv holding the repaired wheel (one per CPython it
checks), with PATH holding only that venv (no C compiler) and an empty cache: the installed
stepscope, not the checkout, is the one used; its compiled Kineto scanner and CUPTI shim (the
stable-ABI builds, ``*.abi3.so``) load; an import of a real trace runs through the scanner;
nothing is compiled at first use.

    python .ci/wheel_smoke.py VENV TRACE
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> None:
    venv, trace = Path(sys.argv[1]).resolve(), sys.argv[2]
    assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is on PATH"

    import stepscope
    from stepscope.capture.cupti import native as cupti_native
    from stepscope.importers.kineto import native as kineto_native
    from stepscope.importers.kineto.parse import parse_kineto

    assert Path(stepscope.__file__).resolve().is_relative_to(venv), stepscope.__file__
    ext = kineto_native.EXTENSION
    assert ext is not None, "the compiled Kineto scanner did not load"
    assert Path(ext.__file__).resolve().is_relative_to(venv), ext.__file__
    assert str(ext.__file__).endswith(".abi3.so"), ext.__file__  # the stable-ABI build

    shim = cupti_native._prebuilt()
    assert shim is not None and shim.resolve().is_relative_to(venv), shim
    assert shim.name.endswith(".abi3.so"), shim
    cupti_native.load_shim()  # what `record` does at first use: no build, nothing in the cache
    assert not cupti_native.cache_dir().exists(), "the CUPTI shim was built at first use"

    class Counting:
        """The scanner, counting the chunks it turned into columns."""

        def __init__(self, inner: object) -> None:
            self.inner, self.read = inner, 0

        def scan(self, *args: object) -> object:
            got = self.inner.scan(*args)  # type: ignore[attr-defined]
            self.read += got is not None
            return got

    counting = Counting(ext)
    kineto_native.EXTENSION = counting  # type: ignore[assignment]
    fast = parse_kineto(trace, default_rank=0, chunk_bytes=64 * 1024)
    kineto_native.EXTENSION = ext
    slow = parse_kineto(trace, default_rank=0, chunk_bytes=64 * 1024, native=False)
    assert counting.read > 0, "no chunk went through the compiled scanner"
    assert fast.tables["kernels"].equals(slow.tables["kernels"]), "the two paths differ"

    env = dict(os.environ)
    version = subprocess.run(["stepscope", "--version"], capture_output=True, text=True,
                             env=env, check=True).stdout.strip()
    assert version == f"stepscope {stepscope.__version__}", version
    r = subprocess.run(["stepscope", "import", trace, "-o", "run"], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0 and (Path("run") / "manifest.json").is_file(), r.stderr
    assert "note:" not in r.stderr, r.stderr  # no missing-extension notice
    print(f"wheel smoke, Python {sys.version.split()[0]}: {version}; scanner read {counting.read} chunks of {trace}; "
          f"CUPTI shim {shim.name} loaded without a compiler")


if __name__ == "__main__":
    main()

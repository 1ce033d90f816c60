"""stepscope's injected bootstrap (``stepscope record`` prepends this folder to PYTHONPATH).

1. Chain: run the ``sitecustomize`` that this one shadows (the next one on ``sys.path``), so a
   site's or a virtual environment's customisation still happens.
2. If ``STEPSCOPE_CAPTURE`` is set, start the capture (``stepscope.capture.bootstrap``). When this
   interpreter cannot import ``stepscope`` (another environment), only the ``stepscope`` package
   is loaded from the folder named in the configuration (never the rest of that site-packages).

Nothing here may print or raise: the program's output and behaviour must stay unchanged. A failure
is written to the staging folder as ``bootstrap-error-<pid>.txt`` for the launcher to report.
"""

import os
import sys


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None or spec.origin is None:
        return
    if os.path.abspath(spec.origin) == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_stepscope_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


def _load_stepscope(pkg_root: str) -> None:
    try:
        import stepscope  # noqa: F401
        return
    except ImportError:
        pass
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("stepscope", [pkg_root]) if pkg_root else None
    if spec is None or spec.loader is None:
        raise ImportError(f"stepscope is not importable here (looked in {pkg_root!r})")
    module = importlib.util.module_from_spec(spec)
    sys.modules["stepscope"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    text = os.environ.get("STEPSCOPE_CAPTURE")
    if not text:
        return
    try:
        import json

        cfg = json.loads(text)
        _load_stepscope(str(cfg.get("pkg_root", "")))
        from stepscope.capture.process import start_from_env

        start_from_env(text, tuple(getattr(sys, "argv", ()) or ()))
    except BaseException as exc:  # never break the program
        try:
            import json
            import traceback

            staging = json.loads(text).get("staging", "")
            if staging and os.path.isdir(staging):
                path = os.path.join(staging, f"bootstrap-error-{os.getpid()}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(f"{type(exc).__name__}: {exc}\n")
                    traceback.print_exc(file=f)
        except BaseException:
            pass


try:
    _chain()
except Exception:
    # the chained sitecustomize failed: Python would print its traceback and go on; so do we
    import traceback

    traceback.print_exc()
_start()

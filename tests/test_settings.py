"""settings.py: every STEPSCOPE_* variable, read in one place, documented, never failing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from stepscope.settings import VARIABLES, Settings

SRC = Path(__file__).parent.parent / "src" / "stepscope"
DOCS = Path(__file__).parent.parent / "docs" / "settings.md"


def test_defaults_without_variables() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({"PATH": "/bin"}).cupti_prepared_buffers == 4


def test_each_variable_is_understood() -> None:
    s = Settings.from_env({
        "STEPSCOPE_CAPTURE": '{"staging": "/tmp/x"}', "STEPSCOPE_CUPTI_API_VIA": " activity ",
        "STEPSCOPE_CUPTI_DETACH": "always", "STEPSCOPE_CUPTI_DUMP": "/tmp/dump",
        "STEPSCOPE_CUPTI_LIB": "/x/libcupti.so", "STEPSCOPE_CUPTI_NESTED_DRIVER": "1",
        "STEPSCOPE_CUPTI_PREPARED_BUFFERS": "0", "STEPSCOPE_CUPTI_SYNC": "1",
        "STEPSCOPE_CUPTI_ZEROED_BUFFERS": "0", "STEPSCOPE_KINETO_NATIVE": "Off",
        "STEPSCOPE_IMPORT_ENGINE": "dask:tcp://10.0.0.5:8786", "STEPSCOPE_IMPORT_WORKERS": "6",
        "STEPSCOPE_SAMPLER_PROCESS": "0", "STEPSCOPE_TORCH_DRIVER_CALLS": " cuLaunchKernel, ,cuX",
    })
    assert s == Settings(capture='{"staging": "/tmp/x"}', cupti_api_via="activity",
                         cupti_detach=True, cupti_detach_with_graphs=True,
                         cupti_dump="/tmp/dump", cupti_lib="/x/libcupti.so",
                         cupti_nested_driver=True, cupti_prepared_buffers=0, cupti_sync=True,
                         cupti_zeroed_buffers=False, import_engine="dask:tcp://10.0.0.5:8786",
                         import_workers=6, kineto_native=False, sampler_process=False,
                         torch_driver_calls=frozenset({"cuLaunchKernel", "cuX"}))
    assert not Settings.from_env({"STEPSCOPE_CUPTI_DETACH": "0"}).cupti_detach
    assert Settings.from_env({"STEPSCOPE_TORCH_DRIVER_CALLS": ""}).torch_driver_calls == frozenset()


def test_a_bad_value_means_the_default() -> None:
    bad = {name: "\u2603 -3 nonsense" for name in VARIABLES if name != "STEPSCOPE_CAPTURE"}
    s = Settings.from_env(bad)
    assert (s.cupti_api_via, s.cupti_prepared_buffers, s.cupti_sync, s.cupti_nested_driver) == (
        "callbacks", 4, False, False)
    assert (s.import_engine, s.import_workers) == ("process", None)
    assert Settings.from_env({"STEPSCOPE_IMPORT_WORKERS": "0"}).import_workers is None
    assert Settings.from_env({"STEPSCOPE_CUPTI_PREPARED_BUFFERS": "-3"}).cupti_prepared_buffers == 4
    assert Settings.from_env({"STEPSCOPE_CUPTI_DUMP": ""}).cupti_dump is None


def test_the_module_stays_light() -> None:
    # the capture's bootstrap imports it inside the profiled program
    tree = ast.parse((SRC / "settings.py").read_text())
    mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= {"__future__", "os", "collections.abc", "dataclasses"}


def test_every_variable_is_read_here_and_documented() -> None:
    # outside settings.py a variable's name may be written (the launcher sets STEPSCOPE_CAPTURE)
    # or read before stepscope can be imported (the sitecustomize): nothing else names one
    allowed = {"capture/config.py", "capture/samplers/remote.py",
               "capture/sitecustomize_dir/sitecustomize.py", "importers/kineto/native.py"}
    named = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"^STEPSCOPE_[A-Z_]+$", node.value.strip()):
                    named.add(name)
                    rel = path.relative_to(SRC).as_posix()
                    assert rel == "settings.py" or rel in allowed, (rel, name)
    assert named <= set(VARIABLES)
    doc = DOCS.read_text()
    assert all(f"`{name}`" in doc for name in VARIABLES)
    assert len(VARIABLES) == len(Settings.__dataclass_fields__) - 1  # DETACH feeds two fields

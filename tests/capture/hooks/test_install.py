"""TorchHooks as a whole: what it lists before any framework is imported; wrapper files."""

from __future__ import annotations

import sys
from pathlib import Path

from stepscope.capture.hooks import install
from stepscope.capture.hooks.install import WRAPPER_FILES, TorchHooks


def test_every_hook_module_is_a_wrapper_file() -> None:
    """Sampled stacks leave out the frames of our wrappers: a new hook module must be listed."""
    package = Path(install.__file__).parent
    modules = {str(p) for p in package.glob("*.py") if p.name not in ("__init__.py", "install.py")}
    assert modules == set(WRAPPER_FILES)


def test_torch_hooks_wait_for_the_import() -> None:
    hooks = TorchHooks(clock=lambda: 0, on_wait=lambda *a: None, on_iterator=lambda *a: None,
                       on_optimizer_step=lambda o: None, on_error=lambda c, m: None)
    hooks.install()
    hooks.install()  # idempotent
    try:
        imported = {m: m in sys.modules for m in ("torch.utils.data.dataloader", "torch.optim.optimizer")}
        assert hooks.installed == {
            "torch.utils.data.dataloader": "patched" if imported["torch.utils.data.dataloader"]
            else "waiting for import",
            "torch.optim.optimizer": "hooked" if imported["torch.optim.optimizer"]
            else "waiting for import"}
    finally:
        hooks.uninstall()

"""Host capture on a tiny CPU training loop: DataLoader waits and settings, optimizer steps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset
from torch.utils.data import dataloader as dl_module

from stepscope.capture.host import HostCapture, HostSettings

SRC = Path(__file__).parents[2] / "src"
FORK_OK = pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")


class SlowData(Dataset):  # type: ignore[type-arg]
    def __init__(self, n: int, sleep_s: float = 0.01, fail_at: int | None = None) -> None:
        self.n, self.sleep_s, self.fail_at = n, sleep_s, fail_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if i == self.fail_at:
            raise ValueError(f"bad item {i}")
        time.sleep(self.sleep_s)
        return torch.full((4,), float(i)), torch.tensor(float(i))


def _train(loader: Any, optimizers: int = 1) -> int:
    model = torch.nn.Linear(4, 1)
    opts = [torch.optim.SGD(model.parameters(), lr=0.01) for _ in range(optimizers)]
    n = 0
    for x, y in loader:
        loss = ((model(x).squeeze(-1) - y) ** 2).mean()
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
        n += 1
    return n


def _capture(**kw: Any) -> HostCapture:
    settings: dict[str, Any] = {"sample_hz": 20.0, "stack_hz": 0.0, "nvml": False, "hooks": True}
    settings.update(kw)
    return HostCapture(HostSettings(**settings))


def test_single_process_loader_waits_steps_and_restore() -> None:
    original_next = dl_module._BaseDataLoaderIter.__dict__["__next__"]
    original_get = DataLoader.__dict__["_get_iterator"]
    cap = _capture()
    ticks: list[int] = []
    cap.add_step_listener(ticks.append)
    cap.start()
    assert dl_module._BaseDataLoaderIter.__dict__["__next__"] is not original_next
    loader = DataLoader(SlowData(12), batch_size=2, num_workers=0)
    iterations = _train(loader)  # StopIteration at the end of the epoch ends the loop normally
    cap.stop()
    assert iterations == 6
    assert dl_module._BaseDataLoaderIter.__dict__["__next__"] is original_next
    assert DataLoader.__dict__["_get_iterator"] is original_get
    data = cap.drain()
    waits = data["input_waits"]
    assert len(waits["dur_ns"]) == 7  # 6 batches + the call that raised StopIteration
    assert all(d >= 19_000_000 for d in waits["dur_ns"][:6])  # 2 items x 10 ms each
    assert set(waits["source"]) == {"dataloader"} and set(waits["name"]) == {"DataLoader.__next__"}
    assert ticks == list(range(6))
    steps = data["steps"]
    assert steps["step"] == [0, 1, 2, 3, 4] and set(steps["source"]) == {"hook"}
    assert all(d >= 19_000_000 for d in steps["dur_ns"])  # each step holds one batch wait
    settings = cap.settings_for_manifest()
    dl = settings["dataloader"]
    assert dl["num_workers"] == 0 and dl["batch_size"] == 2 and dl["pin_memory"] is False
    assert dl["persistent_workers"] is False and dl["batches"] == 7 and dl["iterators"] == 1
    assert settings["samplers"]["hooks"] == {"torch.utils.data.dataloader": "patched",
                                             "torch.optim.optimizer": "hooked"}
    # after stop(): nothing is recorded any more
    _train(DataLoader(SlowData(2, 0.0), batch_size=2))
    after = cap.drain()
    assert after["input_waits"]["ts_ns"] == [] and after["steps"]["ts_ns"] == []


@FORK_OK
def test_worker_loader_settings_and_worker_cpu() -> None:
    cap = _capture(sample_hz=50.0)  # the loop lasts ~0.3 s: ~15 samples while the workers live
    cap.start()
    loader = DataLoader(SlowData(24, 0.025), batch_size=2, num_workers=2, prefetch_factor=2,
                        persistent_workers=True)
    assert _train(loader) == 12
    cap.stop()
    data = cap.drain()
    dl = cap.settings_for_manifest()["dataloader"]
    assert dl["num_workers"] == 2 and dl["prefetch_factor"] == 2 and dl["persistent_workers"] is True
    workers = [n for n in data["processes"]["name"] if n.startswith("DataLoader worker")]
    assert workers == ["DataLoader worker 0", "DataLoader worker 1"]
    assert len(data["input_waits"]["ts_ns"]) == 13
    metrics = data["samples"]["metric"]
    assert "dataloader.workers_cpu_pct" in metrics
    counts = [v for m, v in zip(metrics, data["samples"]["value"]) if m == "dataloader.workers"]
    assert max(counts) == 2


def test_exceptions_pass_through_untouched() -> None:
    cap = _capture(sample_hz=0.0)
    cap.start()
    try:
        with pytest.raises(ValueError, match="bad item 3"):
            _train(DataLoader(SlowData(8, 0.0, fail_at=3), batch_size=2))
    finally:
        cap.stop()
    waits = cap.drain()["input_waits"]
    assert len(waits["ts_ns"]) == 2  # batch 0, then the call that raised


def test_several_optimizers_count_one_step_per_iteration() -> None:
    cap = _capture(sample_hz=0.0)
    cap.start()
    n = _train(DataLoader(SlowData(10, 0.0), batch_size=2), optimizers=3)
    cap.stop()
    assert len(cap.drain()["steps"]["step"]) == n - 1  # 5 boundaries -> 4 complete steps


def test_manual_steps_win_over_the_optimizer_hook() -> None:
    cap = _capture(sample_hz=0.0)
    cap.start()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        model(torch.ones(2)).sum().backward()
        opt.step()
        cap.mark_step()
    cap.stop()
    steps = cap.drain()["steps"]
    assert set(steps["source"]) == {"hook", "manual"} or set(steps["source"]) == {"manual"}
    assert cap.settings_for_manifest()["samplers"]["steps"]["source"] == "manual"
    # one hook boundary before the first mark_step, then manual only: 5 boundaries
    assert cap.settings_for_manifest()["samplers"]["steps"]["boundaries"] == 5


def test_hooks_installed_when_torch_is_imported_later(tmp_path: Path) -> None:
    """The launcher starts the capture before the user's code imports torch."""
    script = textwrap.dedent(
        """
        import sys
        from stepscope.capture.host import HostCapture, HostSettings
        cap = HostCapture(HostSettings(sample_hz=0, stack_hz=0, nvml=False))
        cap.start()
        assert "torch" not in sys.modules, "the capture must not import torch"
        import torch
        from torch.utils.data import DataLoader
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in DataLoader(torch.utils.data.TensorDataset(torch.ones(6, 1)), batch_size=2):
            model(x).sum().backward()
            opt.step()
        cap.stop()
        data = cap.drain()
        print(len(data["input_waits"]["ts_ns"]), len(data["steps"]["ts_ns"]),
              cap.settings_for_manifest()["samplers"]["hooks"])
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False,
                         env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("4 2 {'torch.utils.data.dataloader': 'patched', "
                                 "'torch.optim.optimizer': 'hooked'}")


def test_stop_can_leave_the_step_hook_in_until_released() -> None:
    cap = _capture(sample_hz=0.0)
    seen: list[int] = []
    cap.add_step_listener(seen.append)
    cap.start()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def steps(n: int) -> None:
        for _ in range(n):
            model(torch.ones(2)).sum().backward()
            opt.step()

    steps(2)
    cap.stop(keep_hooks=True)  # samplers stop; boundaries still reach the listener
    steps(3)
    assert seen == [0, 1, 2, 3, 4]
    cap.release_hooks()
    steps(2)
    assert seen == [0, 1, 2, 3, 4]
    from torch.optim.optimizer import _global_optimizer_post_hooks

    assert not _global_optimizer_post_hooks  # the global step hook is gone


def test_hooks_taken_out_inside_a_step_do_not_break_the_programs_own_hook() -> None:
    """The window closes on a step boundary, i.e. inside Optimizer.step's post-hooks: taking
    stepscope's hook out there made torch raise "OrderedDict mutated during iteration" in the
    program's step() when the program had registered a hook of its own after it."""
    from torch.optim.optimizer import (
        _global_optimizer_post_hooks,
        register_optimizer_step_post_hook,
    )

    cap = _capture(sample_hz=0.0)
    seen: list[int] = []

    def on_boundary(k: int) -> None:
        seen.append(k)
        if k == 1:
            cap.stop()  # from inside the hook, as a closing window does

    cap.add_step_listener(on_boundary)
    cap.start()
    mine: list[int] = []
    user = register_optimizer_step_post_hook(lambda o, a, kw: mine.append(1))
    try:
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            model(torch.ones(2)).sum().backward()
            opt.step()  # raised RuntimeError before
        assert seen == [0, 1] and len(mine) == 4  # switched off at once; the user's hook runs on
        assert len(_global_optimizer_post_hooks) == 2  # still registered (off) ...
        cap.release_hooks()
        assert len(_global_optimizer_post_hooks) == 1  # ... until taken out from outside a step
    finally:
        user.remove()

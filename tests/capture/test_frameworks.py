"""The frameworks a program imported, read from its modules (``capture.frameworks``)."""

from __future__ import annotations

from stepscope.capture.frameworks import frameworks_loaded


def test_frameworks_are_read_from_the_modules_the_program_imported() -> None:
    assert frameworks_loaded({"jax": 1, "numpy": 1}) == ["jax"]
    assert frameworks_loaded({"torch": 1, "triton": 1, "numba": 1}) == ["pytorch", "triton"]
    assert frameworks_loaded({}) == []

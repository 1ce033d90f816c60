"""Python and notebooks: ``load(path)`` -> :class:`Profile`, whose methods answer with Arrow
tables (``profile.py``); where a path is imported to (``sources.py``); the tables
(``tables.py``, ``diffs.py``); data frames when pandas or polars are installed
(``frames.py``)."""

from stepscope.notebook.profile import Profile, load, note, verdict

__all__ = ["Profile", "load", "note", "verdict"]

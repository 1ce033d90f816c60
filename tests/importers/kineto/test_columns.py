"""importers.kineto.columns: numpy columns to Arrow without pandas."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa

from stepscope.importers.kineto.columns import with_nulls


def test_with_nulls_casts_and_masks() -> None:
    out = with_nulls(np.array([1.0, 2.0, 3.0]), np.array([False, True, False]), pa.int64())
    assert out.type == pa.int64()
    assert out.to_pylist() == [1, None, 3]


def test_with_nulls_needs_no_pandas() -> None:
    # pyarrow < 26's DataType.to_pandas_dtype imports pandas, an optional extra: the cast must
    # not (this fails with such a pyarrow and the old cast; with pyarrow >= 26 it guards the path)
    code = ("import sys\n"
            "class NoPandas:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'pandas': raise ImportError(name)\n"
            "sys.meta_path.insert(0, NoPandas())\n"
            "import numpy as np, pyarrow as pa\n"
            "from stepscope.importers.kineto.columns import with_nulls\n"
            "print(with_nulls(np.arange(3), np.array([True, False, False]), pa.int64()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "null" in done.stdout

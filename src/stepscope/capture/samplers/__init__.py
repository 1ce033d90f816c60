"""Periodic metric samplers of the host capture, one module per source.

- ``system``: psutil, the system and this process (CPU, memory, DataLoader workers, disk, network);
- ``nvml``: NVML (nvidia-ml-py), one set of metrics per GPU the process sees;
- ``gpm``: NVML's GPU Performance Monitoring metrics (Hopper and newer), read by ``nvml``;
- ``numa``: the sysfs CPU/NUMA topology the manifest reports next to the GPUs.

Each sampler turns one tick into ``Row`` tuples ``(ts_ns, device, metric, value, unit)`` for the
``samples`` table (``rank`` is added when the buffer is drained); ``device`` is null except for
``gpu.*`` metrics, where it is the GPU index as the process sees it (after
``CUDA_VISIBLE_DEVICES``). Samplers never raise out of ``sample()``: a metric that fails is
switched off (for that GPU) and the reason is kept in the sampler's ``unavailable``, which
``HostCapture.settings_for_manifest()`` reports.
"""

from __future__ import annotations

Row = tuple[int, int | None, str, float, str]  # ts_ns, device, metric, value, unit

"""What-if on the step graph: what a change would save, and how far the timings hold.

Functions of the step graph (``analysis.graph``) and of the analysis results, returning
frozen dataclasses; the advisor's rules judge these facts and ask the model for savings.

* kernels: the speed-up tables of kernel changes (``speedups``), how kernel time turns into
  step time (``scaling``), the steady steps' kernels (``kernels``), and the savings of wider
  grids (``small_grid``), higher occupancy (``occupancy``), tensor cores (``tensor_cores``)
  and aligned 16-bit GEMMs (``alignment``);
* GPU idle time: the split of the steps' idle time among its remedies (``idle``), what the
  host did meanwhile (``host``, ``host_ops``);
* copies and memory: copies with their calls and steps (``transfers``), pinning
  (``pageable``), overlap (``copy_overlap``), round trips and tiny copies (``round_trips``),
  memory peaks (``memory``) and allocator churn (``churn``);
* the profiler's own cost (``profiler_cost``) and how far host timings can be trusted
  (``overhead``, ``confidence``).
"""

"""What-if on the step graph: what a change would save, and how far the timings hold.

Functions of the step graph (``analysis.graph``) and of the analysis results, returning
frozen dataclasses: the speed-up tables of kernel changes and how kernel time turns into step
time (``speedups``, ``scaling``, ``kernels``), the split of GPU idle time into what each
remedy would reclaim (``idle``), copy and transfer savings (``transfers``), host time by op
(``host_ops``), and the profiler's own cost (``profiler_cost``, ``overhead``). The advisor's
rules judge these facts and ask the model for savings.
"""

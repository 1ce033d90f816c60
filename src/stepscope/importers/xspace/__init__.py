"""TensorFlow/JAX profiler XSpace (``*.xplane.pb``) import: ``parse.parse_xspace``."""

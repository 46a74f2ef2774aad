"""Measured timings -> hardware profiles.

Kernel timings from elsewhere: read them (``readers``: Vidur and generic CSV), fit a profile to
them (``fit``), validate a profile against them (``validate``). This machine's CPU, as the NumPy
reference engine sees it (``llmsim calibrate --local-cpu``): ``localcpu`` writes the profile from
the micro-benchmarks (``microbench``) refined by a fit to the engine's own steps (``enginefit``),
whose step times are drift-normalised samples (``steptimes``); ``stepgrid`` checks the profile on
single steps it was not fitted to. A real serving engine's runs (``serving``: ``calibrate
--serving``) give an engine profile; ``replay`` replays a measured run and scores it.
"""

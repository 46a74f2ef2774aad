"""The NumPy reference transformer: a real model that checks the simulator's numbers.

``model`` (the forward pass, picoGPT-style pure functions), ``weights`` (seeded random weights,
INT8 emulation), ``paged_kv`` (the paged KV cache), ``generate`` (greedy and speculative
decoding of whole sequences), ``counters`` (FLOPs and bytes counted as the model runs),
``engine`` (runs the simulator's own scheduler decisions for real), ``timing`` (one step timed on
this machine: cold passes and the drift probes) and the digital twin, reference engine vs
simulator request by request: ``twin`` (one run), ``twin_compare`` (the comparison and its
errors), ``twin_runs`` (repeated runs) and ``twin_report`` (its files). Measuring this machine
for a ``local-cpu`` profile is ``llmsim.calibration.localcpu``.
"""

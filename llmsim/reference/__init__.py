"""The NumPy reference transformer: a real model that checks the simulator's numbers.

``model`` (pure forward functions and a paged KV cache), ``counters`` (FLOPs and bytes counted as
the model runs), ``engine`` (runs the simulator's own scheduler decisions for real),
``cpubench`` (this machine's matmul and bandwidth rates -> a ``local-cpu`` profile) and ``twin``
(reference engine vs simulator, request by request).
"""

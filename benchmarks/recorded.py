"""Run a piece of code under another Python (one with vLLM or transformers installed, which llmsim's
own environment never needs) and keep what it printed, with when and where it ran: the ``--record``
step of the checks against real vLLM (vllm_bench_stream_check.py, vllm_scheduler_check.py,
chat_template_check.py)."""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess


def run_in(python: str, code: str, *args: str, stdin: str | None = None) -> dict:
    """The JSON object on the last line ``code`` prints, run by ``python`` with ``args`` (and
    ``stdin``), plus the date and the machine it was recorded on."""
    done = subprocess.run([python, "-c", code, *args], input=stdin, capture_output=True, text=True, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    return {"recorded": dt.date.today().isoformat(), "machine": machine, **out}

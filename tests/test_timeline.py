"""trace.json: named tracks, request phases, bounded counters and the output.trace settings.

Two checks of the file itself: a strict structural one of every event (``check_trace``: the
fields of each phase type, names for every process and thread, slices that nest or follow each
other, in Perfetto's nanoseconds and in the floating-point microseconds DevTools adds up), and,
where a Chromium is on PATH, Chromium's own trace engine (the DevTools Performance panel's,
bundled in the browser) parsing it headless. Perfetto's Python package cannot be used offline: it
downloads its trace_processor binary on first use."""

from __future__ import annotations

import json
import math
import os
import select
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict

import numpy as np
import pandas as pd
import pytest

import llmsim
from llmsim.cli import main
from llmsim.report import write_scenario
from llmsim.scenario import OutputConfig, Scenario
from llmsim.timeline import MAX_COUNTER_POINTS, MAX_STEP_SLICES, PHASES, perfetto_trace, sample_requests, write_trace

BASE = """
name: timeline
seed: 3
model: llama-3.1-8b
hardware: H100-SXM
cluster: {replicas: 2, router: least_outstanding}
policy: {kind: chunked, chunk_tokens: 512, max_num_seqs: 32}
workload:
  kind: poisson
  rate_rps: 10
  num_requests: 60
  prompt_tokens: {dist: lognormal, median: 600, sigma: 0.6, min: 16, max: 4096}
  output_tokens: {dist: uniform, min: 4, max: 40}
"""
# load shedding and a horizon: rejected, unfinished and finished requests in one run
CROWDED = (
    BASE.replace("rate_rps: 10", "rate_rps: 400")
    .replace("max_num_seqs: 32}", "max_num_seqs: 4, max_queue: 3}")
    .replace("num_requests: 60", "num_requests: 60\n  horizon_s: 0.35")
)
PIPELINE = BASE.replace("cluster: {replicas: 2,", "cluster: {replicas: 1, pp: 2,")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each scenario run once: name -> Results."""
    here = tmp_path_factory.mktemp("timeline")
    out = {}
    for name, text in (("base", BASE), ("crowded", CROWDED), ("pipeline", PIPELINE)):
        (here / f"{name}.yaml").write_text(text)
        out[name] = llmsim.run(str(here / f"{name}.yaml"))
    return out


def trace_of(res, **output) -> dict:
    return perfetto_trace(res.steps, res.requests, res.summary, OutputConfig(**output), chunks=res.chunks)


# ---------------------------------------------------------------- the structural check


def check_trace(trace: dict) -> dict:
    """Every rule a trace viewer relies on, asserted; returns {thread name: [X slices]}, counters."""
    # (a written trace.json also names its run: metadata.llmsim_run_id, as every file of the folder)
    assert set(trace) - {"metadata"} == {"traceEvents", "displayTimeUnit"} and trace["displayTimeUnit"] == "ms"
    json.dumps(trace, allow_nan=False)  # valid JSON: no NaN or Infinity anywhere
    procs, threads = {}, {}
    slices: dict[tuple, list] = defaultdict(list)
    counters: dict[tuple, list] = defaultdict(list)
    for ev in trace["traceEvents"]:
        ph = ev["ph"]
        assert isinstance(ev["name"], str) and ev["name"] and isinstance(ev["pid"], int), ev
        if ph == "M":
            meta(ev, procs, threads)
            continue
        assert isinstance(ev["ts"], (int, float)) and math.isfinite(ev["ts"]) and ev["ts"] >= 0, ev
        if ph == "X":
            assert isinstance(ev["tid"], int) and ev["dur"] >= 0 and isinstance(ev["cat"], str), ev
            slices[(ev["pid"], ev["tid"])].append(ev)
        elif ph == "i":
            assert ev["s"] == "t" and isinstance(ev["tid"], int), ev
            slices[(ev["pid"], ev["tid"])]  # noqa: B018  (the thread must be named too)
        elif ph == "C":
            assert "tid" not in ev and ev["args"] and all(isinstance(v, (int, float)) for v in ev["args"].values())
            counters[(ev["pid"], ev["name"])].append(ev)
        else:
            raise AssertionError(f"unexpected phase {ph!r}")
    assert all(p in procs for p, _ in slices) and all(p in procs for p, _ in counters), "a process without a name"
    assert all(key in threads for key in slices), "a thread without a name"
    tids = [tid for _, tid in threads]
    assert len(tids) == len(set(tids)), "thread ids repeat across processes"
    by_name = {}
    for key, evs in slices.items():
        check_nesting(evs, threads[key])
        by_name[f"{procs[key[0]]} / {threads[key]}"] = evs
    return {"procs": procs, "threads": threads, "slices": by_name, "counters": counters}


def meta(ev: dict, procs: dict, threads: dict) -> None:
    name, args = ev["name"], ev["args"]
    if name in ("process_name", "thread_name"):
        assert isinstance(args["name"], str) and args["name"], ev
    else:
        assert name in ("process_sort_index", "thread_sort_index") and isinstance(args["sort_index"], int), ev
    if name.startswith("thread"):
        assert isinstance(ev["tid"], int), ev
        if name == "thread_name":
            threads[(ev["pid"], ev["tid"])] = args["name"]
    elif name == "process_name":
        procs[ev["pid"]] = args["name"]


def check_nesting(evs: list[dict], thread: str) -> None:
    """X slices of one thread nest or follow each other, both in the nanoseconds Perfetto reads
    (llround(ts * 1000) + llround(dur * 1000)) and in the floating-point microseconds DevTools adds
    up (ts + dur); nothing nests but a request's phases, one level deep, in order and together
    covering the request; prefill chunks one level below, inside ``prefill`` (or ``decode`` for a
    recompute), never overlapping."""
    ns = {id(e): (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in evs}
    tree = nest(evs, lambda e: ns[id(e)], thread)
    assert tree == nest(evs, lambda e: (e["ts"], e["ts"] + e["dur"]), thread), f"{thread}: ns and µs disagree"
    for parent, kids in tree:
        names = [k["name"] for k in kids]
        assert parent["cat"] == "request" and names == [p for p in PHASES if p in names], (thread, parent, names)
        span = ns[id(parent)][1] - ns[id(parent)][0]
        assert sum(ns[id(k)][1] - ns[id(k)][0] for k in kids) == span, f"{thread}: {parent['name']}: phases leave gaps"


def nest(evs: list[dict], bounds, thread: str) -> list[tuple[dict, list[dict]]]:
    """[(parent, its children)]; fails on two slices that overlap without one holding the other,
    or on nesting deeper than one level. Sorted by start, ties in file order, as Perfetto's sorter
    does (a request precedes its phases)."""
    stack: list[dict] = []
    out: list[tuple[dict, list[dict]]] = []
    for ev in sorted(evs, key=lambda e: bounds(e)[0]):
        start, end = bounds(ev)
        while stack and start >= bounds(stack[-1])[1]:
            stack.pop()
        if stack:
            parent = stack[-1]
            assert end <= bounds(parent)[1], f"{thread}: {ev['name']} overlaps {parent['name']} without nesting"
            if len(stack) == 2:  # a prefill chunk in its phase: the prompt's, or a recompute's
                want = {"prefill": "chunk ", "decode": "recompute: "}.get(parent["name"])
                assert ev["cat"] == "chunk" and want and ev["name"].startswith(want), (thread, parent, ev)
                stack.append(ev)
                continue
            assert len(stack) == 1 and ev["name"] in PHASES, f"{thread}: {ev['name']} nested in {parent['name']}"
            if not out or out[-1][0] is not parent:
                out.append((parent, []))
            out[-1][1].append(ev)
        stack.append(ev)
    return out


def requests_in(trace: dict) -> dict[int, list[str]]:
    """request id -> the phase names of its slices (the request slice itself first)."""
    out: dict[int, list[str]] = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X" and ev["cat"] == "request":
            out[ev["args"]["id"]].append("request" if ev["name"].startswith("request") else ev["name"])
    return out


# ---------------------------------------------------------------- the tests


def test_tracks_are_named_and_steps_are_slices(runs):
    res = runs["base"]
    trace = trace_of(res)
    seen = check_trace(trace)
    assert seen["procs"][1] == "pool main (2x H100-SXM tp1)"
    assert seen["procs"][2] == "requests (all 60)"
    assert {"replica 0", "replica 1"} <= set(seen["threads"].values())
    steps = [e for name, evs in seen["slices"].items() if name.startswith("pool ") for e in evs]
    assert len(steps) == len(res.steps) and {e["cat"] for e in steps} <= {"prefill", "decode", "mixed"}
    first = min(steps, key=lambda e: e["ts"])
    assert first["dur"] == pytest.approx(res.steps.sort_values("start_s")["duration_s"].iloc[0] * 1e6, abs=1e-3)
    names = {name for _, name in seen["counters"]}
    assert names == {f"replica {r} {c}" for r in (0, 1) for c in ("KV cache", "running", "waiting")}
    kv = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "replica 0 KV cache"]
    cap = res.summary["pools"][0]["kv_blocks_per_replica"]
    used = res.steps[res.steps["replica"] == 0]["kv_blocks_used"]
    assert max(e["args"]["%"] for e in kv) == pytest.approx(100 * used.max() / cap, abs=1e-3)


def test_each_request_has_its_phases_in_order(runs):
    res = runs["base"]
    trace = trace_of(res)
    phases = requests_in(trace)
    assert set(phases) == set(res.requests["id"])
    # the phases that took time, in order; a prompt is always prefilled (one step at least)
    assert all(p[0] == "request" and "prefill" in p and p[1:] == [x for x in PHASES if x in p] for p in phases.values())
    assert Counter(x for p in phases.values() for x in p)["queued"] > 0
    row = res.requests.iloc[5]
    got = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("args", {}).get("id") == row["id"]}
    steps = res.steps[res.steps["replica"] == row["replica"]]
    first = steps[(steps["start_s"] + steps["duration_s"] - row["queued_s"]).abs() < 1e-9].iloc[0]
    assert got["prefill"]["ts"] == pytest.approx(first["start_s"] * 1e6, abs=1e-3)  # queued_s ends that step
    assert got["queued"]["dur"] > 0 and got["prefill"]["dur"] > 0
    # the phases are on the engine's clock: the client has the answer output_delay_s later
    delay = res.summary["engine"]["output_delay_s"]
    assert delay > 0
    assert got["decode"]["ts"] + got["decode"]["dur"] == pytest.approx((row["finish_s"] - delay) * 1e6, abs=1e-3)
    parent = got[f"request {row['id']}"]["args"]
    assert parent["prompt_tokens"] == row["prompt_tokens"] and parent["output_tokens"] == row["output_tokens"]
    assert parent["replica"] == row["replica"]


def test_prefill_chunks_are_the_steps_that_carried_them(runs):
    # chunked 512: a prompt's chunks are the steps it rode in, at most 512 tokens each, and they
    # add up to the prompt less its prefix-cache hits (a request never preempted)
    res = runs["base"]
    trace = trace_of(res, trace="full")
    chunks: dict[int, list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "chunk":
            chunks[e["args"]["id"]].append(e)
    done = res.requests[(res.requests["status"] == "finished") & (res.requests["preemptions"] == 0)]
    assert len(done) > 30 and set(done["id"]) <= set(chunks)
    for row in done.itertuples():
        tokens = [int(e["name"].split(": ")[1].split()[0]) for e in chunks[row.id]]
        assert sum(tokens) == row.prompt_tokens - row.cached_tokens and max(tokens) <= 512
    assert max(len(v) for v in chunks.values()) > 1  # long prompts took several steps
    # the sampled trace keeps the chunks of the sampled requests only (the simulator kept no more)
    assert set(res.chunks["id"]) == set(sample_requests(res.requests, OutputConfig())["id"])


def test_sample_caps_request_tracks_evenly_over_arrival(runs):
    res = runs["base"]
    trace = trace_of(res, trace="sample", trace_requests=7)
    seen = check_trace(trace)
    ids = sorted(requests_in(trace))
    order = res.requests.sort_values("arrival_s")["id"].tolist()
    assert len(ids) == 7 and order[0] in ids and order[-1] in ids  # first and last arrival kept
    assert seen["procs"][2] == "requests (7 of 60, evenly spread over arrival order)"
    assert trace == trace_of(res, trace="sample", trace_requests=7)  # deterministic, no RNG
    lanes = [t for (pid, _), t in seen["threads"].items() if pid == 2]
    assert 1 <= len(lanes) <= 7


def test_full_covers_every_request_rejected_and_unfinished_too(runs):
    res = runs["crowded"]
    status = res.requests["status"].value_counts()
    assert status.get("rejected", 0) > 0 and status.get("unfinished", 0) > 0 and status.get("finished", 0) > 0
    trace = trace_of(res, trace="full", trace_requests=1)
    seen = check_trace(trace)
    served = set(res.requests[res.requests["status"] != "rejected"]["id"])
    assert set(requests_in(trace)) == served
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert sorted(e["args"]["id"] for e in instants) == sorted(res.requests[res.requests["status"] == "rejected"]["id"])
    assert "rejected" in seen["threads"].values() and all(e["args"]["reject_reason"] for e in instants)
    unfinished = res.requests[res.requests["status"] == "unfinished"]["id"]
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "request"}
    assert all(f"request {i} (unfinished)" in names for i in unfinished)


def test_overlapping_pipeline_steps_get_their_own_threads(runs):
    res = runs["pipeline"]
    seen = check_trace(trace_of(res))
    threads = set(seen["threads"].values())
    assert "replica 0" in threads and "replica 0 (in flight 2)" in threads
    steps = [e for name, evs in seen["slices"].items() if name.startswith("pool ") for e in evs]
    assert len(steps) == len(res.steps)


def test_counters_stay_bounded_on_a_long_run():
    """120,000 steps on two replicas: at most MAX_COUNTER_POINTS per track, peaks kept."""
    n = 60_000
    rng = np.random.default_rng(0)
    dur = rng.uniform(0.005, 0.02, n)
    start = np.concatenate([[0.0], np.cumsum(dur)[:-1]])
    one = pd.DataFrame(
        {
            "pool": "main",
            "start_s": start,
            "duration_s": dur,
            "prefill_tokens": 0,
            "decode_tokens": rng.integers(1, 64, n),
            "batch_size": rng.integers(1, 64, n),
            "kv_blocks_used": rng.integers(0, 5000, n),
            "waiting": rng.integers(0, 30, n),
        }
    )
    steps = pd.concat([one.assign(replica=0), one.assign(replica=1)], ignore_index=True)
    summary = {
        "pools": [{"name": "main", "hardware": "H100-SXM", "replicas": 2, "tp": 1, "kv_blocks_per_replica": 5000}]
    }
    trace = perfetto_trace(steps, None, summary)
    counts = Counter(e["name"] for e in trace["traceEvents"] if e["ph"] == "C")
    assert len(counts) == 6 and max(counts.values()) <= MAX_COUNTER_POINTS
    running = [e["args"]["requests"] for e in trace["traceEvents"] if e["name"] == "replica 1 running"]
    assert max(running) == one["batch_size"].max()  # the bucket maximum keeps the peak
    # trace: sample keeps every k-th step beyond MAX_STEP_SLICES per replica; full keeps them all
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 2 * len(range(0, n, 3)) <= 2 * MAX_STEP_SLICES
    full = perfetto_trace(steps, None, summary, OutputConfig(trace="full"))
    assert sum(e["ph"] == "X" for e in full["traceEvents"]) == 2 * n


def test_trace_none_writes_nothing_and_removes_a_stale_one(runs, tmp_path):
    res = runs["base"]
    (tmp_path / "trace.json").write_text("{}")
    assert write_trace(tmp_path, res.steps, res.requests, res.summary, OutputConfig(trace="none")) == []
    assert not (tmp_path / "trace.json").exists()


def test_written_file_is_the_trace_and_scenario_json_rebuilds_it(runs, tmp_path):
    """What `llmsim report DIR` does: the output settings come back from scenario.json."""
    res = runs["base"]
    (tmp_path / "s.yaml").write_text(BASE + "output: {trace: sample, trace_requests: 9}\n")
    sc = llmsim.load_scenario(tmp_path / "s.yaml")
    write_scenario(sc, tmp_path)
    [path] = write_trace(tmp_path, res.steps, res.requests, res.summary, sc.output)
    first = path.read_bytes()
    assert json.loads(first) == perfetto_trace(res.steps, res.requests, res.summary, sc.output)
    again = Scenario.model_validate(json.loads((tmp_path / "scenario.json").read_text())).output
    assert again.trace_requests == 9
    write_trace(tmp_path, res.steps, res.requests, res.summary, again)
    assert path.read_bytes() == first and len(requests_in(json.loads(first))) == 9


def test_run_and_report_commands_write_the_same_trace(tmp_path):
    (tmp_path / "s.yaml").write_text(BASE + "output: {trace_requests: 5}\n")
    out = tmp_path / "run"
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(out), "--quiet"]) == 0
    first = (out / "trace.json").read_bytes()
    check_trace(json.loads(first))
    assert len(requests_in(json.loads(first))) == 5
    (out / "trace.json").unlink()
    assert main(["report", str(out), "--quiet"]) == 0
    assert (out / "trace.json").read_bytes() == first


# ---------------------------------------------------------------- Chromium's trace engine

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
# parses each trace as the Performance panel does; returns what it made of processes and threads
DEVTOOLS_PROBE = """
(async () => {
  const T = await import('devtools://devtools/bundled/models/trace/trace.js');
  const out = [];
  for (const trace of window.__TRACES__) {
    const model = T.TraceModel.Model.createWithAllHandlers();
    await model.parse(trace.traceEvents);
    const parsed = model.parsedTrace(model.size() - 1);
    const data = parsed.data ?? parsed;
    const procs = {};
    for (const [pid, p] of data.Renderer.processes) {
      const threads = {};
      for (const [tid, t] of p.threads) {
        const roots = t.tree ? [...t.tree.roots] : [];
        threads[tid] = {name: t.name, entries: t.entries.length, roots: roots.length,
                        children: roots.filter(n => n.children.length).map(n => n.children.map(c => c.entry.name))};
      }
      procs[pid] = {name: data.Meta.processNames.get(pid)?.args?.name ?? null, threads};
    }
    out.push({procs, counters: parsed.traceEvents.filter(e => e.ph === 'C').length});
  }
  return JSON.stringify(out);
})()
"""


FD_TRAMPOLINE = (
    "import fcntl, os, sys\n"
    "r, w = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])\n"
    "os.dup2(r, 3)\n"
    "os.dup2(w, 4)\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


class _Cdp:
    """The Chrome DevTools Protocol over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-framed)."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.w, self.r, self.buf, self.n = write_fd, read_fd, b"", 0

    def call(self, method: str, session: str | None = None, timeout_s: float = 60, **params) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.n:
                    assert "error" not in reply, reply
                    return reply["result"]
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self.r], [], [], left)[0], f"chromium: no answer to {method}"
            chunk = os.read(self.r, 1 << 20)
            assert chunk, "chromium closed the pipe"
            self.buf += chunk


def devtools_parse(traces: list[dict], profile_dir) -> list[dict]:
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    # a small Python trampoline puts the pipes at the fds Chromium expects, by way of fds >= 10 so
    # neither lands on the other (Popen's preexec_fn could clobber Popen's own error pipe)
    argv = [sys.executable, "-c", FD_TRAMPOLINE, str(cmd_r), str(out_w), CHROMIUM, "--headless", "--no-sandbox"]
    argv += ["--disable-gpu", "--remote-debugging-pipe", f"--user-data-dir={profile_dir}", "about:blank"]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(cmd_r, out_w)
    )
    os.close(cmd_r)
    os.close(out_w)
    try:
        cdp = _Cdp(cmd_w, out_r)
        target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
        session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        cdp.call("Page.navigate", session, url="devtools://devtools/bundled/trace_app.html")
        ready = "location.protocol + document.readyState"
        while cdp.call("Runtime.evaluate", session, expression=ready)["result"]["value"] != "devtools:complete":
            time.sleep(0.1)
        cdp.call("Runtime.evaluate", session, expression=f"window.__TRACES__ = {json.dumps(traces)}; 0")
        r = cdp.call("Runtime.evaluate", session, expression=DEVTOOLS_PROBE, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in r, r["exceptionDetails"]
        return json.loads(r["result"]["value"])
    finally:
        proc.kill()
        proc.wait()
        os.close(cmd_w)
        os.close(out_r)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_chromium_trace_engine_reads_every_track(runs, tmp_path):
    """Names as written, every slice in its thread's tree (none dropped as overlapping), each
    request a root with its phases as children, every counter event kept."""
    traces = [
        trace_of(runs["base"], trace_requests=10),
        trace_of(runs["crowded"], trace="full"),
        trace_of(runs["pipeline"]),
    ]
    for trace, got in zip(traces, devtools_parse(traces, tmp_path), strict=True):
        seen = check_trace(trace)
        # its Renderer model holds slices only: instants (rejected requests) are checked above alone
        written: Counter = Counter((e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X")
        for pid, proc in got["procs"].items():
            assert proc["name"] == seen["procs"][int(pid)]
            for tid, thread in proc["threads"].items():
                key = (int(pid), int(tid))
                assert thread["name"] == seen["threads"][key] and thread["entries"] == written[key]
                if proc["name"].startswith("requests") and thread["name"].startswith("lane"):
                    tops = sum(
                        e["cat"] == "request" and e["name"].startswith("request")
                        for e in seen["slices"][f"{proc['name']} / {thread['name']}"]
                    )
                    assert thread["roots"] == tops and all(set(c) <= set(PHASES) for c in thread["children"])
                else:
                    assert thread["roots"] == thread["entries"]  # steps: nothing nested
        assert {(int(p), int(t)) for p, pr in got["procs"].items() for t in pr["threads"]} == set(written)
        assert got["counters"] == sum(e["ph"] == "C" for e in trace["traceEvents"])


def test_a_nested_slice_never_ends_past_its_parent_in_floating_point() -> None:
    """ts + dur of two slices with different starts can land an ulp apart for the same ns end: a
    request from 41,221,535 to 344,042,810 ns ends at 344042.80999999994 µs in floats, while most
    phases ending at the same ns reach 344042.81. A phase is held to its request's float end."""
    from llmsim.timeline import _ts_dur

    ts, dur = _ts_dur(41_221_535, 344_042_810)
    assert ts + dur < 344_042.81  # (the parent that cannot reach its end exactly)
    for start in range(41_221_535, 344_042_810, 1_000_003):
        unbounded = sum(_ts_dur(start, 344_042_810))
        cts, cdur = _ts_dur(start, 344_042_810, ts + dur)
        assert cts + cdur <= ts + dur <= unbounded

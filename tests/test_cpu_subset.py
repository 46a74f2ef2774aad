"""One socket, or some cores, of a CPU node (issue #16 item 3): peaks follow the cores used,
bandwidth, memory, power and price the sockets, and one socket has no NUMA traffic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import llmsim
from llmsim.errors import UserError
from llmsim.hardware import cpu_subset, load_profile
from llmsim.scenario import scenario_from_dict

NODE = load_profile("Xeon-8480+")  # 2 sockets x 56 cores


def test_one_socket_is_half_the_node() -> None:
    one = cpu_subset(NODE, 1, None)
    assert one.peak("bf16") == pytest.approx(NODE.peak("bf16") / 2)
    assert one.bandwidth == pytest.approx(NODE.bandwidth / 2)
    assert one.memory_bytes == pytest.approx(NODE.memory_bytes / 2)
    # its socket link joins the node's two 1-socket devices (tensor parallelism over UPI), no more
    assert one.cpu.sockets == 1 and one.scale_up is not None and one.scale_up.max_devices.value == 2
    assert "scaled to 1 of 2 socket(s)" in one.memory_bandwidth_bytes_per_s.source


def test_a_core_subset_scales_compute_not_the_sockets_channels() -> None:
    part = cpu_subset(NODE, 1, 32)
    assert part.peak("int8") == pytest.approx(NODE.peak("int8") * 32 / 112)
    assert part.bandwidth == pytest.approx(NODE.bandwidth / 2)


def scenario(**cluster) -> dict:
    return {
        "name": "cpu",
        "model": {"name": "llama-2-7b", "weight_dtype": "int4"},
        "hardware": "Xeon-8480+",
        "cluster": cluster,
        "workload": {
            "kind": "all_at_once",
            "num_requests": 1,
            "prompt_tokens": {"dist": "fixed", "value": 32},
            "output_tokens": {"dist": "fixed", "value": 32},
        },
        "output": {"steps": "none"},
    }


def test_decode_on_one_socket_reads_at_one_sockets_bandwidth(tmp_path: Path) -> None:
    """Batch-1 int4 decode is weight streaming: one socket (half the channels, no NUMA-crossing
    reads) is slower than the NUMA-aware node, by less than 2x for the fixed per-step costs."""
    node = llmsim.run(scenario_from_dict(scenario(), "t", tmp_path)).summary["mean_tpot_ms"]
    one = llmsim.run(scenario_from_dict(scenario(sockets=1), "t", tmp_path)).summary["mean_tpot_ms"]
    assert node < one < 2 * node


@pytest.mark.parametrize(
    ("cluster", "hardware", "fragment"),
    [
        ({"sockets": 3}, "Xeon-8480+", "cluster.sockets: 3 sockets asked of Xeon-8480+, which has 2"),
        ({"cores": 64}, "Xeon-8480+", "cluster.cores: 64 cores per socket asked of Xeon-8480+, which has 56"),
        ({"sockets": 1}, "H100-SXM", "H100-SXM is a gpu, not a CPU node"),
    ],
)
def test_a_subset_the_node_does_not_have_is_refused(cluster, hardware, fragment, tmp_path: Path) -> None:
    d = {**scenario(**cluster), "hardware": hardware, "model": "llama-2-7b"}
    with pytest.raises(UserError, match=re.escape(fragment)):
        llmsim.run(scenario_from_dict(d, "t", tmp_path))

"""Every case of the per-command bad-input catalogue (tests/catalogue.py, docs/bad_inputs.md):
exit 2, one ``llmsim: error:`` line with every expected fragment, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue import COMMANDS, DOC, load_cases, run_case

CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_gives_one_clear_message(case, tmp_path: Path) -> None:
    code, stdout, err = run_case(case, tmp_path)
    assert code == case.exit, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("llmsim: error: "), err
    for fragment in case.expect:
        assert fragment in lines[0], (fragment, lines[0])
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())


def test_every_file_is_a_case_or_used_by_one() -> None:
    listed = {(c.command, c.file) for c in CASES} | {(c.command, u) for c in CASES for u in c.uses}
    present = {(p.parent.name, p.name) for p in COMMANDS.glob("*/*") if p.name != "cases.yaml"}
    assert present == listed


def test_docs_table_lists_every_case() -> None:
    doc = DOC.read_text()
    assert f"{len(CASES)} cases." in doc
    rows = {line.split(" | ``")[0]: line for line in doc.splitlines() if line.startswith("| `")}
    for case in CASES:
        row = rows.get(f"| `{case.command}` | {case.what}")
        assert row is not None, case.id
        # its exit code and its message as the case expects them (a stale row read exit 0, no message)
        assert f"`` | {case.exit} | ``" in row, (case.id, row)
        for fragment in case.expect:
            assert fragment in row, (case.id, fragment)

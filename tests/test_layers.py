"""The import graph of llmsim/ (docs/architecture.md, "Layers"): no cycles, type-only imports
included, and nothing in the lower layers imports the simulator."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "llmsim"
LOWER = ("llmsim.costmodel", "llmsim.kvcache", "llmsim.request", "llmsim.schedulers", "llmsim.models")
SIMULATOR = ("llmsim.sim", "llmsim.replica", "llmsim.pipeline", "llmsim.disagg", "llmsim.fastpath", "llmsim.runs")


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def graph() -> dict[str, set[str]]:
    """module -> the llmsim modules it imports (anywhere in the file, TYPE_CHECKING or not)."""
    mods = {module_name(p): p for p in PKG.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            deps |= {t for t in targets if t in mods and t != name}
        # a package's own __init__ importing its modules is how packages work, not a cycle
        edges[name] = {d for d in deps if not (path.name == "__init__.py" and d.startswith(name + "."))}
    return edges


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(d) :], d]))
            if d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_lower_layers_do_not_import_the_simulator():
    for m, deps in graph().items():
        if m.startswith(LOWER):
            bad = sorted(d for d in deps if d.startswith(SIMULATOR))
            assert not bad, f"{m} imports {bad}"

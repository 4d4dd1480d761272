"""The layout holds its lines: small modules and functions, a runtime that never imports the
operator tools or the stand-ins, and no ledger write outside the ledger and streams packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50
OUTSIDE_THE_RUNTIME = ("ops", "api", "console", "standins")
"""`callgate.ops`, `callgate.api` and `callgate.console` (operator tools, the HTTP API and its web
console) and `callgate.standins` (the outside world's stand-ins)."""
WRITES = frozenset(
    {
        "hset",
        "hdel",
        "hincrby",
        "rpush",
        "lpush",
        "xadd",
        "xack",
        "zadd",
        "zrem",
        "sadd",
        "expire",
        "persist",
        "expect",
        "expect_missing",
        "expect_field_missing",
        "expect_length",
    }
)
"""Redis writes, and the guards of a step: what only the ledger (and the stream loop) does."""
WRITES_WITH_ARGUMENTS = frozenset({"set", "delete"})
"""Names an `asyncio.Event` shares: a write only when it names a key."""
RAW_BY_DESIGN = {
    "shared/ops/bench/floor.py": "the raw relay the pipeline is measured against",
    "shared/ops/bench/executors.py": "seeds allowed calls to time executors alone",
    "shared/ops/bench/provider.py": "records the in-process model's timings",
    "shared/ops/explore/possible.py": "the explorer's duplicated message, as a transport makes",
    "shared/ops/embedded_redis.py": "a probe key, written until a new replica acknowledges it",
}


def _modules() -> Iterator[tuple[Path, str]]:
    """Every module of the installed package, with its import name."""
    for top, name in (("shared", "callgate"), ("services", "callgate.services")):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT / top).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield path, ".".join([name, *parts])


def _is_runtime(module: str) -> bool:
    parts = module.split(".")
    return len(parts) < 2 or parts[1] not in OUTSIDE_THE_RUNTIME


def test_no_module_passes_400_lines_and_no_function_50() -> None:
    too_long = []
    for path, _ in _modules():
        source = path.read_text()
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length}")
    assert too_long == []


def test_the_runtime_never_imports_a_stand_in_or_an_operator_tool() -> None:
    """Import every runtime module in a fresh interpreter and look at what came along."""
    runtime = [name for _, name in _modules() if _is_runtime(name)]
    code = (
        "import importlib, sys\n"
        f"for name in {runtime!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith(('callgate.ops',"
        " 'callgate.standins')))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []


def test_only_the_ledger_and_the_stream_loop_write_to_redis() -> None:
    found = []
    for path, name in _modules():
        rel = str(path.relative_to(ROOT))
        if name.startswith(("callgate.ledger", "callgate.streams")) or rel in RAW_BY_DESIGN:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr = node.func.attr
            if attr in WRITES or (attr in WRITES_WITH_ARGUMENTS and node.args):
                found.append(f"{rel}:{node.lineno} .{attr}(…)")
    assert found == []

"""Whether this process runs the step builders compiled (`callgate compile`), and whether that
compiled copy of the package is still the sources' (an upgrade without compiling again would
run the old release: every worker refuses to start then, `callgate.streams.service`)."""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

import callgate
from callgate.errors import CallgateError

COMPILED = (
    "callgate.ledger.tx",
    "callgate.ledger.group",
    "callgate.ledger.binding",
    "callgate.hash_fields",
    "callgate.redact",
    "callgate.keys",
    "callgate.states",
)
"""The modules a step is built and encoded by; none defines a class another module
subclasses (mypyc's classes take no subclass from interpreted code)."""
BUILD_OUTPUTS = ("__pycache__", "*.so", "*.pyc")
"""What a build or an import leaves beside the sources: neither copied nor digested."""
ORIGIN = "compiled_from.json"
"""In the copy's package: the sources it was built from and their digest (`check_build`)."""


def compiled_modules() -> list[str]:
    """Which of `COMPILED` this process imports as C extensions (the benchmark says so)."""
    found = []
    for name in COMPILED:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None and spec.origin.endswith(".so"):
            found.append(name)
    return found


class StaleBuildError(CallgateError):
    """This process runs a compiled copy whose sources changed since it was built."""


def sources_digest(dirs: Sequence[Path]) -> str:
    """sha256 of every file under ``dirs`` (its path and bytes), builds and caches aside."""
    digest = hashlib.sha256()
    for root in dirs:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root)
            if any(fnmatch.filter(relative.parts, pattern) for pattern in BUILD_OUTPUTS):
                continue
            digest.update(f"{relative}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def running_copy() -> Path | None:
    """The directory of the compiled copy this process runs (what PYTHONPATH named), or None
    when it runs the sources."""
    package = Path(callgate.__file__).parent
    return package.parent if (package / ORIGIN).exists() else None


def check_build() -> None:
    """`StaleBuildError` if this process runs a compiled copy built from sources that changed
    since (an upgrade without compiling again would run the old release); else nothing."""
    copy = running_copy()
    if copy is None:
        return  # the sources themselves
    origin = json.loads((copy / "callgate" / ORIGIN).read_text())
    dirs = [Path(d) for d in origin["dirs"]]
    if all(d.is_dir() for d in dirs) and sources_digest(dirs) == origin["digest"]:
        return
    raise StaleBuildError(
        f"PYTHONPATH runs the compiled copy in {copy}, whose sources "
        f"({', '.join(origin['dirs'])}) changed since it was built: take it off PYTHONPATH, "
        f"or build it again with callgate compile --target {copy} (with it off PYTHONPATH)"
    )

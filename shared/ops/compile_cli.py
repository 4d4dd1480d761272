"""`callgate compile --target DIR`: the step builders compiled to C with mypyc, in a copy of
the package that processes run with ``PYTHONPATH=DIR``.

Building a ledger step (its guards, the fields it encodes, its events, the arguments the
script reads) is the largest part of each worker's CPU, and it is dozens of small calls a
step (README: Performance).  mypyc compiles the modules that do it, typed as they are for
``mypy --strict``, into C extensions beside their sources.  They go into a copy, so the
sources stay what runs unless a deployment asks for the build, and no edited source is ever
shadowed by an older build.  The compiled steps are encoded byte for byte as the sources
encode them; tests/e2e/test_compiled.py runs the ledger's tests on them.

Needs mypy (``pip install 'callgate[compile]'``) and a C compiler with Python's headers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import callgate
import callgate.services
from callgate.compiled import BUILD_OUTPUTS, COMPILED, ORIGIN, running_copy, sources_digest
from callgate.ops.exits import ENDED, OK, USAGE

MARKER = "callgate-compiled.txt"
"""Written last into a finished build: a directory holding it may be built over again."""
_COPY_IGNORE = shutil.ignore_patterns(*BUILD_OUTPUTS)


def cmd_compile(args: argparse.Namespace) -> int:
    target = Path(args.target).resolve()
    problem = _source_problem() or _target_problem(target) or _toolchain_problem()
    if problem is not None:
        print(f"callgate: {problem}", file=sys.stderr)
        return USAGE
    started = time.monotonic()
    print(
        f"callgate: compiling {len(COMPILED)} modules into {target} with mypyc "
        "(type-checks the package first: a minute or more)",
        file=sys.stderr,
    )
    copy_package(target)
    built = _build(target)
    if built is not None:
        print(f"callgate: mypyc failed: {built}", file=sys.stderr)
        return ENDED
    (target / MARKER).write_text("\n".join(COMPILED) + "\n")
    print(f"callgate: done in {time.monotonic() - started:.0f} s", file=sys.stderr)
    print(f"PYTHONPATH={target}")
    return OK


def _source_problem() -> str | None:
    """The copy is made from the package this command runs: that must be the sources."""
    copy = running_copy()
    if copy is None:
        return None
    return f"this callgate runs the compiled copy in {copy}: take it off PYTHONPATH to compile"


def _target_problem(target: Path) -> str | None:
    if target.is_file():
        return f"{target} is a file: give a directory for the compiled copy"
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).exists():
        return f"{target} is not empty: give a new directory, or one callgate compile made"
    return None


def _toolchain_problem() -> str | None:
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed: pip install 'callgate[compile]' (it comes with mypy)"
    compiler = os.environ.get("CC", "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) on PATH: install one (e.g. gcc) and Python's headers"
    return None


def copy_package(target: Path) -> None:
    """The package's sources, laid out by import name (``callgate/…``) as mypyc needs."""
    package = target / "callgate"
    for stale in (package, target / "build"):
        shutil.rmtree(stale, ignore_errors=True)
    for old in target.glob("*__mypyc*.so"):
        old.unlink()
    (target / MARKER).unlink(missing_ok=True)
    sources = Path(callgate.__file__).parent
    services = Path(callgate.services.__file__).parent
    shutil.copytree(sources, package, ignore=_COPY_IGNORE)
    shutil.copytree(services, package / "services", ignore=_COPY_IGNORE, dirs_exist_ok=True)
    dirs = [sources, services] if services.parent != sources else [sources]
    origin = {"dirs": [str(d) for d in dirs], "digest": sources_digest(dirs)}
    (package / ORIGIN).write_text(json.dumps(origin, indent=2) + "\n")


def _build(target: Path) -> str | None:
    """Run mypyc in ``target`` (it puts each extension beside its source); the last line of
    its output when it fails."""
    paths = [name.replace(".", "/") + ".py" for name in COMPILED]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "mypyc", *paths], cwd=target, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        errors = [line for line in lines if "error" in line.lower()]
        return (errors or lines or ["no output"])[-1]
    shutil.rmtree(target / "build", ignore_errors=True)
    return None


def add_command(sub: Any) -> None:
    text = "compile the ledger's step builders with mypyc into a copy of the package"
    cmd = sub.add_parser("compile", help=text, description=text)
    cmd.add_argument(
        "--target",
        required=True,
        help="directory for the compiled copy; run processes with PYTHONPATH=<it>",
    )
    cmd.set_defaults(handler=cmd_compile)

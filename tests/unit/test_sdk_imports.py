"""Workers that never call a provider do not import its SDK: `anthropic` alone takes seconds
to import, paid on every start of every worker (and every test that starts one)."""

import subprocess
import sys

PROBE = """
import sys
import callgate.services.executor, callgate.services.ingress
import callgate.services.reconciler, callgate.services.validator
from callgate.providers import ADAPTERS, get_adapter
histories = [get_adapter(api).initial_history("hi") for api in ADAPTERS]
print(len(histories), sorted(m for m in ("openai", "anthropic") if m in sys.modules))
"""


def test_workers_and_initial_history_import_no_provider_sdk() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "3 []"

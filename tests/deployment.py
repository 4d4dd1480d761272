"""What the deployment tests share: the repository's deployment files, read as their runners read
them, and the environment the Procfile's workers get in tests/e2e/test_deploy.py, which
docker-compose.yml must give its workers too (tests/integration/test_deploy_files.py)."""

from __future__ import annotations

from pathlib import Path

from honcho.environ import parse, parse_procfile

ROOT = Path(__file__).resolve().parents[1]
PROCFILE = ROOT / "Procfile"
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
WORKERS = ("ingress", "model_turn", "validator", "executor", "reconciler")
"""The Procfile's worker processes, which the e2e test starts (the Slack bot aside)."""

WORKER_ENV = (
    "REDIS_URL",
    "CALLGATE_KEY_PREFIX",
    "CALLGATE_TRUST_FILE",
    "CALLGATE_TOOL_MODULES",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
)
"""The deployment's variables the Procfile's workers run on in the e2e test: from the bundle's
.env (the first four) and the provider's settings.  Everything else they get is the test's
stand-ins' own (the booking service's URL) or the machine's (PATH)."""


def procfile() -> dict[str, str]:
    """Process name → command, as honcho reads the Procfile."""
    return dict(parse_procfile(PROCFILE.read_text()).processes)


def read_env(path: Path) -> dict[str, str]:
    """A .env file as honcho reads it (``honcho -e FILE``)."""
    return dict(parse(path.read_text()))

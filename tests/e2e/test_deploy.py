"""README's Deploy section, followed literally on this machine (issue 34).

`callgate deploy init` makes the bundle; Redis starts from deploy/redis (redis.conf, users.acl
rendered by acl.sh with the bundle's passwords); the workers start from the Procfile by honcho
with the bundle's .env.  The scripted model and the booking service stand in for the provider
and the system of record (README's "first try without a provider key").  The service
``frontdesk`` submits with its own key under the ``submitters`` login (`callgate run`); the run
pauses for an approval; carol, on her own machine with her key and the ``approvers`` login,
approves through the CLI; the run completes and the booking service saw exactly one write.
`callgate doctor` with the .env is all ok; then each planted fault — a wrong password, a trust
file without the submitter — makes exactly one line not ok.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from callgate.client import CallgateClient
from callgate.config import Settings
from callgate.ops.embedded_redis import EmbeddedRedis, free_port
from tests.deployment import PROCFILE, ROOT, WORKER_ENV, WORKERS, read_env

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
INIT = ["deploy", "init", "--service", "frontdesk", "--grant", "customer",
        "--person", "carol", "--role", "events-lead", "--slack"]  # fmt: skip
RUN = ["run", "--api", "openai-chat", "--model", "workshop-reserve", "--tools",
       "check_seats,check_eligibility,reserve_seat", "--identity", '{"user": "alice"}',
       "--input", "Reserve a seat at ws-101 for p-alice", "--wait", "--json",
       "--timeout", "30"]  # fmt: skip


@dataclass
class Host:
    """The deployment: its bundle, its .env, the stand-ins' settings, a home for the operator."""

    bundle: Path
    env: dict[str, str]
    standins: dict[str, str]
    home: Path

    def machine(self, **extra: str) -> dict[str, str]:
        """This machine's environment, none of the test session's callgate settings."""
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CALLGATE_", "REDIS_", "OPENAI_", "ANTHROPIC_"))
        }
        base["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
        return {**base, "CALLGATE_HOME": str(self.home), **extra}

    def callgate(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        """`callgate …` with the .env loaded (``set -a; . .env``) and ``env`` on top."""
        return subprocess.run([str(BIN / "callgate"), *argv],
                              env=self.machine(**{**self.env, **self.standins, **env}),
                              capture_output=True, text=True, timeout=60)  # fmt: skip


def _standins(tmp: Path, supervisor: list[subprocess.Popen[bytes]]) -> dict[str, str]:
    """The scripted model and the booking service, as README's first try starts them."""
    model, booking = free_port(), free_port()
    for argv in (
        ["callgate.standins.scripted_model", "--port", str(model)],
        ["callgate.standins.demo.booking_service", "--port", str(booking)],
    ):
        supervisor.append(
            subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    for port in (model, booking):
        _until(lambda p=port: _answers(f"http://127.0.0.1:{p}/"), "a stand-in to listen")
    return {
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model}/v1",
        "OPENAI_API_KEY": "scripted-local",
        "CALLGATE_BOOKING_URL": f"http://127.0.0.1:{booking}",
    }


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1)
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False
    return True


def _until(done: object, what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(done) and done():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _redis(bundle: Path, env: dict[str, str], port: int) -> EmbeddedRedis:
    """Redis from deploy/redis: users.acl rendered by acl.sh with the bundle's passwords."""
    rendered = subprocess.run(["sh", "deploy/redis/acl.sh", "deploy/redis/users.acl"], cwd=ROOT,
                              env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                              text=True, check=True, timeout=30)  # fmt: skip
    aclfile = bundle / "users.acl"
    aclfile.write_text(rendered.stdout)
    aclfile.chmod(0o600)
    return EmbeddedRedis(port=port, config_file=ROOT / "deploy" / "redis" / "redis.conf",
                         aclfile=aclfile, login=("workers", env["REDIS_WORKERS_PASSWORD"]),
                         directory=bundle / "redis").start()  # fmt: skip


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    tmp = tmp_path_factory.mktemp("deploy")
    port, bundle = free_port(), tmp / "deployment"
    (tmp / "operator").mkdir()
    draft = Host(bundle, {}, {}, tmp / "operator")
    made = draft.callgate(*INIT[:2], str(bundle), *INIT[2:], "--redis", f"127.0.0.1:{port}")
    assert made.returncode == 0, made.stderr
    env = read_env(bundle / ".env")
    (bundle / "redis").mkdir()
    children: list[subprocess.Popen[bytes]] = []
    server = _redis(bundle, env, port)
    try:
        standins = _standins(tmp, children)
        running = Host(bundle, env, standins, tmp / "operator")
        log = (tmp / "honcho.log").open("wb")
        assert set(standins) - {"CALLGATE_BOOKING_URL"} <= set(WORKER_ENV)
        children.append(subprocess.Popen(
            [str(BIN / "honcho"), "-e", str(bundle / ".env"), "-f", str(PROCFILE), "-d", str(ROOT),
             "start", *WORKERS], env=running.machine(**standins), stdout=log, stderr=log,
            start_new_session=True))  # fmt: skip
        yield running
    finally:
        for child in reversed(children):
            child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL) if child is children[-1] else child.kill()
        server.stop()


def _carol(host: Host) -> dict[str, str]:
    """Carol's machine: her key in her keyring, the approvers login, nothing else."""
    home = host.bundle.parent / "carol-home"
    (home / "keys").mkdir(parents=True, mode=0o700, exist_ok=True)
    shutil.copyfile(host.bundle / "secrets" / "carol.pem", home / "keys" / "carol.pem")
    (home / "keys" / "carol.pem").chmod(0o600)
    return {
        "CALLGATE_HOME": str(home),
        "REDIS_URL": host.env["APPROVERS_REDIS_URL"],
        "CALLGATE_KEY_PREFIX": "cg",
    }


def _as_carol(host: Host, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "callgate"), *argv], env=host.machine(**_carol(host)),
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _reserve_requests(host: Host) -> int:
    url = f"{host.standins['CALLGATE_BOOKING_URL']}/_stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return int(json.loads(answer.read())["reserve"]["requests"])


async def _settled(host: Host, run_id: str) -> dict[str, object]:
    settings = Settings(redis_url=host.env["SUBMITTERS_REDIS_URL"], key_prefix="cg")
    async with CallgateClient(settings) as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            view = await client.view(run_id)
            if view["status"] not in (
                "paused_approval",
                "executing",
                "awaiting_model",
                "validating",
            ):
                return view
            await asyncio.sleep(0.1)
    raise AssertionError(f"{run_id} did not settle")


def test_from_an_empty_host_to_a_first_approved_write(host: Host) -> None:
    submitted = host.callgate(*RUN, REDIS_URL=host.env["SUBMITTERS_REDIS_URL"])
    assert submitted.returncode == 4, submitted.stdout + submitted.stderr  # paused for carol
    run_id = json.loads(submitted.stdout)["run_id"]
    status = json.loads(
        host.callgate("status", run_id, "--json", REDIS_URL=host.env["SUBMITTERS_REDIS_URL"]).stdout
    )
    assert status["vouched_by"] == "service:frontdesk", status
    listed = _as_carol(host, "approvals", "--json")
    assert listed.returncode == 0, listed.stderr
    [approval] = [a for a in json.loads(listed.stdout) if a["run_id"] == run_id]
    approved = _as_carol(host, "approve", approval["approval_id"], "--as", "carol")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert asyncio.run(_settled(host, run_id))["status"] == "completed"
    shown = host.callgate("view", run_id, "--json", REDIS_URL=host.env["SUBMITTERS_REDIS_URL"])
    view = json.loads(shown.stdout)
    assert view["status"] == "completed" and view["calls"][0]["state"] == "succeeded", view
    assert _reserve_requests(host) == 1, "the approved write was sent exactly once"


def test_readme_deploy_says_what_these_tests_do() -> None:
    """The commands above are README's, word for word (continuation lines joined)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Deploy") : readme.index("## Architecture")]
    text = " ".join(section.replace("\\\n", " ").split())
    for command in (
        ["callgate", INIT[0], INIT[1], "./deployment", *INIT[2:]],
        ["sh", "deploy/redis/acl.sh", "deploy/redis/users.acl"],
        ["honcho", "-e", "deployment/.env", "start", *WORKERS],
        ["callgate", *RUN[: RUN.index("--timeout")]],
        ["callgate", "approve", "APPROVAL_ID", "--as", "carol"],
    ):
        assert _unquoted(" ".join(command)) in _unquoted(text), command


def _unquoted(text: str) -> str:
    return text.replace("'", "").replace('"', "")


async def _submitted_by_client(host: Host) -> dict[str, object]:
    """README step 5 from Python: `CallgateClient` with the service's own key and login."""
    key = host.bundle / "secrets" / "frontdesk.pem"
    settings = Settings(redis_url=host.env["SUBMITTERS_REDIS_URL"], key_prefix="cg",
                        submitter="frontdesk", signing_key=key, home=host.home,
                        trust_file=host.bundle / "trust.json")  # fmt: skip
    async with CallgateClient(settings) as client:
        run_id = await client.submit({"api": "openai-chat", "model": "workshop-reserve",
                                      "input": "Reserve a seat at ws-101 for p-alice",
                                      "identity": {"user": "alice"},
                                      "allowed_tools": ["reserve_seat"]})  # fmt: skip
        await client.wait(run_id, 30)
        return await client.status(run_id)


def test_another_service_submits_with_callgate_client(host: Host) -> None:
    status = asyncio.run(_submitted_by_client(host))
    assert (status["status"], status["vouched_by"]) == ("paused_approval", "service:frontdesk")


def _doctor(host: Host, **env: str) -> tuple[int, list[str], list[str]]:
    done = host.callgate("doctor", **env)
    return done.returncode, done.stdout.splitlines(), done.stderr.splitlines()


def test_doctor_is_all_ok_then_names_each_planted_fault(host: Host) -> None:
    code, ok, bad = _doctor(host)
    assert (code, bad) == (0, []), "\n".join(ok + bad)
    assert any("Redis login approvers" in line for line in ok), ok
    assert any("model_turn: 1 live process" in line for line in ok), ok
    assert any("ingress: 1 live process" in line for line in ok), ok
    wrong = host.env["APPROVERS_REDIS_URL"].replace(host.env["REDIS_APPROVERS_PASSWORD"], "0" * 64)
    code, _, bad = _doctor(host, APPROVERS_REDIS_URL=wrong)
    assert code == 1 and len(bad) == 1 and "approvers" in bad[0], bad
    assert "0" * 64 not in bad[0] and host.env["REDIS_APPROVERS_PASSWORD"] not in bad[0]
    trust_file = host.bundle / "trust.json"
    kept = trust_file.read_text()
    try:
        document = json.loads(kept)
        del document["submitters"]["frontdesk"]
        trust_file.write_text(json.dumps(document))
        code, _, bad = _doctor(host)
    finally:
        trust_file.write_text(kept)
    assert code == 1 and len(bad) == 1 and "frontdesk" in bad[0], bad

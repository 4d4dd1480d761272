"""The deployment files carry a deployment (issue 34): docker-compose.yml is valid against the
Compose Specification's JSON schema (tests/deploy_files/README.md says where it comes from), and
gives every worker of the Procfile the variables and mounts the Procfile's workers run on in
tests/e2e/test_deploy.py; .env.example documents every variable compose interpolates and every
one `callgate deploy init` writes; and `deploy init` / `keys new` write and print what a trust
file needs, never a private key."""

from __future__ import annotations

import json
import re
import shlex
import stat
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from callgate.auth.trust import load_trust
from callgate.ops.cli import main
from tests.deployment import COMPOSE, ENV_EXAMPLE, WORKER_ENV, procfile, read_env

SCHEMA = Path(__file__).resolve().parents[1] / "deploy_files" / "compose-spec.json"
TRUST_TARGET = "/run/secrets/callgate_trust"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's environment list as name → value (None: passed through from the shell)."""
    pairs = [item.partition("=") for item in service["environment"]]
    return {name: (value if sep else None) for name, sep, value in pairs}


def test_compose_is_valid_against_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft201909Validator(schema).validate(compose)
    broken = {**compose, "services": {**compose["services"], "ingress": {"imgae": "callgate"}}}
    with pytest.raises(jsonschema.ValidationError):  # the schema does catch a typo
        jsonschema.Draft201909Validator(schema).validate(broken)


def test_every_procfile_process_is_a_compose_service_with_the_same_variables_and_mounts(
    compose: dict[str, Any],
) -> None:
    services, secrets = compose["services"], compose["secrets"]
    assert secrets["callgate_trust"]["file"].startswith("${CALLGATE_DEPLOY_DIR:?")
    assert secrets["callgate_trust"]["file"].endswith("}/trust.json")
    for name, command in procfile().items():
        service = services[name]
        module = shlex.split(command)[shlex.split(command).index("-m") + 1]
        assert service["command"][:3] == ["python", "-m", module], name
        env = _environment(service)
        login = {"slack_approvals": "slack", "api": "api"}.get(name, "workers")
        # The Slack bot runs no tools and asks no model: the rest of what the workers get.
        wanted = WORKER_ENV if login == "workers" else WORKER_ENV[:3]
        assert set(wanted) <= set(env), name
        assert env["REDIS_URL"].startswith(f"redis://{login}:"), name  # type: ignore[union-attr]
        assert env["CALLGATE_TRUST_FILE"] == TRUST_TARGET, name
        assert "callgate_trust" in service["secrets"], name
        if login == "workers":
            assert str(env["CALLGATE_TOOL_MODULES"]).startswith("${CALLGATE_TOOL_MODULES:?")
    assert services["redis"]["env_file"].endswith("}/.env")  # every tenant's password too
    bot = _environment(services["slack_approvals"])
    assert (bot["CALLGATE_SUBMITTER"], bot["CALLGATE_SIGNING_KEY"]) == (
        "slack", "/run/secrets/callgate_slack_key")  # fmt: skip
    assert secrets["callgate_slack_key"]["file"].endswith("}/secrets/slack.pem")
    submit = _environment(services["submit"])
    assert submit["REDIS_URL"].startswith("redis://submitters:")  # type: ignore[union-attr]
    assert submit["CALLGATE_SIGNING_KEY"] == "/run/secrets/callgate_submitter_key"
    assert "callgate_submitter_key" in services["submit"]["secrets"]
    api = _environment(services["api"])
    assert (api["CALLGATE_SIGNING_KEY"], api["CALLGATE_API_DELEGATE_KEY"]) == (
        "/run/secrets/callgate_submitter_key", "/run/secrets/callgate_api_key")  # fmt: skip
    assert secrets["callgate_api_key"]["file"].endswith("}/secrets/api.pem")


def _deploy_init(tmp_path: Path, *args: str) -> tuple[int, Path]:
    directory = tmp_path / "deployment"
    return main(["deploy", "init", str(directory), *args]), directory


def test_env_example_documents_every_variable_compose_and_deploy_init_use(tmp_path: Path) -> None:
    documented = set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))
    interpolated = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE.read_text()))
    assert interpolated - documented == set()
    code, directory = _deploy_init(
        tmp_path, "--service", "frontdesk", "--grant", "customer", "--attribute", "tenant=acme"
    )
    assert code == 0
    written = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (directory / ".env").read_text(), re.M))
    assert written - documented == set()
    env = read_env(directory / ".env")  # as honcho reads it
    assert env["CALLGATE_TENANTS"] == "acme" and env["REDIS_APPROVERS_ACME_PASSWORD"]
    assert env["REDIS_URL"].startswith("redis://workers:" + env["REDIS_WORKERS_PASSWORD"] + "@")


def test_deploy_init_writes_a_bundle_and_never_prints_a_private_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, directory = _deploy_init(
        tmp_path,
        "--service",
        "frontdesk",
        "--grant",
        "customer",
        "--person",
        "carol",
        "--role",
        "events-lead",
        "--slack",
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    trust = load_trust(directory / "trust.json")
    assert trust.submitters["frontdesk"].grants == ["customer"]
    assert trust.people["carol"].roles == ["events-lead"]
    assert trust.delegates["slack"].signs_for == ["carol"]
    for name in ("frontdesk", "carol", "slack"):
        assert stat.S_IMODE((directory / "secrets" / f"{name}.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / ".env").stat().st_mode) == 0o600
    env = read_env(directory / ".env")
    assert all(
        re.fullmatch(r"[0-9a-f]{64}", env[f"REDIS_{u}_PASSWORD"])
        for u in ("WORKERS", "SUBMITTERS", "APPROVERS", "SLACK")
    )
    assert "PRIVATE" not in out + err and env["REDIS_WORKERS_PASSWORD"] not in out + err
    assert "honcho -e" in out and "callgate approve" in out

    before = (directory / "trust.json").read_bytes()
    code, _ = _deploy_init(tmp_path, "--service", "other")
    assert code == 3 and "--force" in capsys.readouterr().err
    assert (directory / "trust.json").read_bytes() == before
    code, _ = _deploy_init(tmp_path, "--service", "other", "--force")
    assert code == 0 and "other" in load_trust(directory / "trust.json").submitters
    assert sorted(p.name for p in (directory / "secrets").iterdir()) == ["other.pem"]


@pytest.mark.parametrize("argv", [
    ["--person", "carol"],                          # no submitting service
    ["--grant", "customer", "--service", "x"],      # a grant before any service
    ["--service", "x", "--role", "lead"],           # a role of a service
    ["--service", "x", "--attribute", "tenant"],    # not KEY=VALUE
    ["--service", "x", "--attribute", "tenant=Acme"],  # not a tenant name
    ["--service", "x", "--person", "x"],            # one name twice
    ["--service", "../x"],                          # a name that is not a file name
])  # fmt: skip
def test_deploy_init_refuses_what_the_trust_file_could_not_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    with pytest.raises(SystemExit) as parsed:
        raise SystemExit(_deploy_init(tmp_path, *argv)[0])
    err = capsys.readouterr().err
    assert parsed.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not (tmp_path / "deployment").exists()


def _keys_new(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["keys", "new", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_keys_new_prints_each_kinds_trust_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CALLGATE_HOME", str(tmp_path))
    code, out, err = _keys_new(
        capsys, "billing", "--submitter", "--grant", "customer", "--attribute", "tenant=acme"
    )
    assert code == 0, err
    public_key, line = out.splitlines()
    assert json.loads("{" + line + "}") == {
        "billing": {
            "public_key": public_key,
            "grants": ["customer"],
            "attributes": {"tenant": ["acme"]},
        }
    }
    assert '"submitters"' in err and "CALLGATE_SIGNING_KEY=" in err
    code, out, err = _keys_new(capsys, "slack", "--delegate", "--signs-for", "carol")
    assert code == 0, err
    entry = json.loads("{" + out.splitlines()[1] + "}")["slack"]
    assert entry["signs_for"] == ["carol"] and '"delegates"' in err
    code, out, err = _keys_new(capsys, "carol", "--role", "events-lead")
    assert json.loads("{" + out.splitlines()[1] + "}")["carol"]["roles"] == ["events-lead"]
    assert '"people"' in err
    for wrong in (
        ["dora", "--delegate"],
        ["dora", "--grant", "x"],
        ["dora", "--submitter", "--role", "x"],
        ["dora", "--submitter", "--grant", "a b"],
    ):
        code, out, err = _keys_new(capsys, *wrong)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (wrong, err)
    assert not (tmp_path / "keys" / "dora.pem").exists()


def test_deploy_init_api_adds_the_http_apis_delegate_key(tmp_path: Path) -> None:
    code, directory = _deploy_init(
        tmp_path, "--service", "frontdesk", "--person", "carol", "--role", "events-lead", "--api"
    )
    assert code == 0
    trust = load_trust(directory / "trust.json")
    assert trust.delegates["api"].signs_for == ["carol"]
    assert stat.S_IMODE((directory / "secrets" / "api.pem").stat().st_mode) == 0o600

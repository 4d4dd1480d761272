"""The deployment's webhook endpoints: what loads, and one line for what does not."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from callgate.webhooks.settings import WebhookConfigError, WebhookSettings, parse_endpoints

GOOD = {"name": "ops", "url": "https://ops.example.com/hook", "secret": "s" * 32}


def load(items: object) -> object:
    return parse_endpoints(orjson.dumps(items).decode(), "test")


def test_an_endpoint_receives_every_event_unless_it_names_some() -> None:
    [every, some] = load([GOOD, {**GOOD, "name": "b", "events": ["run.finished"]}])
    assert len(every.events) == 4 and some.events == {"run.finished"}
    assert "s" * 32 not in repr(every), "the secret is never printed"


def test_a_secret_may_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOK_SECRET", "e" * 20)
    [endpoint] = load([{"name": "ops", "url": "http://h/x", "secret_env": "HOOK_SECRET"}])
    assert endpoint.key() == b"e" * 20


@pytest.mark.parametrize(
    ("items", "said"),
    [
        ([{**GOOD, "secret": "short"}], "ops: the secret (secret) needs at least 16 bytes"),
        (
            [{"name": "ops", "url": "http://h/x", "secret_env": "NOT_SET_ANYWHERE_42"}],
            "secret (NOT_SET_ANYWHERE_42) needs at least 16 bytes",
        ),
        ([{**GOOD, "events": ["run.started"]}], "events"),
        ([{**GOOD, "events": []}], "at least one event"),
        ([{**GOOD, "url": "file:///etc/passwd"}], "url"),
        ([{**GOOD, "colour": "red"}], "colour"),
        ([GOOD, GOOD], "names must be unique"),
        ({"name": "ops"}, "must hold a JSON list"),
    ],
)
def test_a_bad_list_is_refused_with_the_reason(items: object, said: str) -> None:
    with pytest.raises(WebhookConfigError) as refused:
        load(items)
    assert said in refused.value.message and "\n" not in refused.value.message


def test_a_file_that_is_missing_or_not_json_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(WebhookConfigError, match="cannot read"):
        WebhookSettings(endpoints_file=tmp_path / "nope.json").load()
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(WebhookConfigError, match="is not JSON"):
        WebhookSettings(endpoints_file=broken).load()

"""Trust-file entries as a deployment registers them: one per submitter, person or delegate.

`callgate keys new` prints one for a key it made and `callgate deploy init` writes a whole
trust file of them; both build them here, and each is validated by the trust file's own model
(`callgate.auth.trust`) before anything is printed or written, so an entry that the workers
would refuse (a grant with a space, a delegate for nobody) is a usage error at the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from callgate.auth.trust import Delegate, Person, Submitter

Kind = Literal["submitter", "person", "delegate"]
SECTIONS: dict[Kind, str] = {"submitter": "submitters", "person": "people", "delegate": "delegates"}
"""The trust file's map each kind of key is registered in."""
_MODELS: dict[Kind, type[BaseModel]] = {
    "submitter": Submitter,
    "person": Person,
    "delegate": Delegate,
}


def _words(values: Sequence[str], what: str) -> list[str]:
    """Each value once, in order; one with whitespace cannot be carried (roles travel
    space-separated in tokens)."""
    for value in values:
        if not value or len(value) > 128 or value != "".join(value.split()):
            raise ValueError(f"{value!r} is not a {what}: use one word without spaces")
    return list(dict.fromkeys(values))


def parse_attributes(pairs: Sequence[str]) -> dict[str, list[str]]:
    """``["tenant=acme", "tenant=globex"]`` → ``{"tenant": ["acme", "globex"]}``."""
    attributes: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value or key in ("user", "roles"):
            raise ValueError(
                f"{pair!r} is not an attribute: use KEY=VALUE (e.g. tenant=acme); "
                "user and roles are not attributes"
            )
        attributes.setdefault(key, []).extend(_words([value], "value"))
    return {key: list(dict.fromkeys(values)) for key, values in attributes.items()}


def make_entry(kind: Kind, public_key: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The entry for a key of ``kind``: ``fields`` are its ``grants`` and ``attributes``
    (submitter), ``roles`` (person) or ``signs_for`` (delegate).  ValueError says what is
    wrong in one line."""
    entry: dict[str, Any] = {"public_key": public_key}
    if kind == "submitter":
        entry["grants"] = _words(fields.get("grants", ()), "role")
        if fields.get("attributes"):
            entry["attributes"] = dict(fields["attributes"])
    elif kind == "person":
        entry["roles"] = _words(fields.get("roles", ()), "role")
    else:
        signs_for = _words(fields.get("signs_for", ()), "person's name")
        if not signs_for:
            raise ValueError(
                "a delegate signs for someone: name them with --signs-for NAME "
                "(or '*' for every person of the trust file)"
            )
        entry["signs_for"] = signs_for
    try:
        _MODELS[kind].model_validate(entry)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise ValueError(f"{where}: {problem['msg'].removeprefix('Value error, ')}") from None
    return entry


def entry_line(name: str, entry: Mapping[str, Any]) -> str:
    """``"NAME": {…}`` on one line, to paste into the trust file's map for its kind."""
    return f"{json.dumps(name)}: {json.dumps(entry)}"

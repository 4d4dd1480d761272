"""The deployment's trust file: which keys may vouch for runs and sign decisions, and for whom.

A JSON document the deployment owns (never a message, never a run spec) naming the submitting
services, the people, the delegates that sign for people they authenticated themselves, and the
identity providers.  Each key id (the name of a submitter, person or delegate) is unique across
the three maps, so a token's ``kid`` selects exactly one entry and one rule.  Every public key
and JWKS file is read when the file is loaded, so a typo fails at start-up, not at the first
decision; a rotated JWKS takes effect when the trust file is loaded again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from jwt import PyJWKSet
from jwt.algorithms import get_default_algorithms
from jwt.exceptions import PyJWTError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from callgate.auth.keys import parse_public_key
from callgate.errors import TrustConfigError

ANY = "*"
"""In ``grants`` any role; in ``signs_for`` any person of the trust file."""

_ASYMMETRIC_ALGORITHMS = frozenset(
    name for name in get_default_algorithms() if name != "none" and not name.startswith("HS")
)
VerificationKey = tuple[Any, tuple[str, ...]]
"""A key PyJWT can verify with (a public key object or a `PyJWK`) and the algorithms it may
verify; binding each key to its own algorithms keeps an RSA key from checking an EdDSA token."""


def _checked_key(text: str) -> str:
    parse_public_key(text)
    return text


PublicKeyText = Annotated[str, AfterValidator(_checked_key)]
"""An Ed25519 public key as text (``ed25519:…`` or PEM), checked to parse."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Submitter(_Frozen):
    """A submitting service: it signs the runs it enqueues and vouches for their identity."""

    public_key: PublicKeyText
    """The key its submissions are signed with (``ed25519:…`` or PEM)."""
    grants: list[str] = Field(default_factory=list)
    """Roles it may put into an identity it vouches for; ``"*"`` means any role."""
    users: list[str] | None = None
    """Users it may vouch for; None means any user."""
    attributes: dict[str, list[str]] = Field(default_factory=dict)
    """Identity fields besides ``user`` and ``roles`` it may assert (a tenant, say), each with
    the values it may give (``"*"``: any); a field not named here is refused."""


class Person(_Frozen):
    """An approver, resolver or operator: someone whose decisions move a paused run."""

    roles: list[str] = Field(default_factory=list)
    """The callgate roles the person holds; the only source of their roles (never a token)."""
    public_key: PublicKeyText | None = None
    """The key they sign with themselves (the CLI); None when they act only through a delegate."""


class Delegate(_Frozen):
    """A service that signs decisions for people it authenticated itself (the Slack bot)."""

    public_key: PublicKeyText
    """The key its decisions are signed with."""
    signs_for: list[str]
    """The people (names in ``people``) it may sign for; ``"*"`` means any of them."""


class Issuer(_Frozen):
    """An identity provider whose JWTs vouch for a user; keyed in the trust file by its ``iss``."""

    audience: str = Field(min_length=1)
    """The ``aud`` its tokens must carry for this deployment."""
    jwks_file: Path | None = None
    """A JWKS document with its signing keys; a relative path is taken from the trust file's
    folder."""
    public_keys: list[str] = Field(default_factory=list)
    """Its signing keys as PEM public keys (RSA, EC or Ed25519) or ``ed25519:…`` text."""
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])
    """The signature algorithms accepted from it; asymmetric only."""
    user_claim: str = "sub"
    """The claim that names the user."""
    roles_claim: str = "roles"
    """The claim listing the user's roles (a list, or a space-separated string)."""
    role_map: dict[str, str] | None = None
    """Claim value → callgate role; None takes the values as roles, a value not in a map is
    dropped."""

    _keys: list[VerificationKey] = PrivateAttr(default_factory=list)

    @field_validator("algorithms")
    @classmethod
    def _asymmetric_only(cls, value: list[str]) -> list[str]:
        refused = [name for name in value if name not in _ASYMMETRIC_ALGORITHMS]
        if refused or not value:
            raise ValueError(
                f"algorithms must be non-empty and among {sorted(_ASYMMETRIC_ALGORITHMS)}, "
                f"not {refused}"
            )
        return value

    @field_validator("jwks_file")
    @classmethod
    def _relative_to_trust_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        base = (info.context or {}).get("base_dir")
        if value is None or value.is_absolute() or base is None:
            return value
        return Path(base) / value

    @model_validator(mode="after")
    def _load_keys(self) -> Issuer:
        if self.jwks_file is None and not self.public_keys:
            raise ValueError("an issuer needs jwks_file or public_keys")
        keys = [_bound_key(text, self.algorithms) for text in self.public_keys]
        if self.jwks_file is not None:
            keys.extend(_jwks_keys(self.jwks_file, self.algorithms))
        self._keys = keys
        return self

    def verification_keys(self, kid: object, alg: object) -> list[VerificationKey]:
        """The keys that may have signed a token whose header names ``kid`` and ``alg``."""
        return [
            (key, algorithms)
            for key, algorithms in self._keys
            if alg in algorithms and (kid is None or getattr(key, "key_id", None) in (kid, None))
        ]

    def user_and_roles(self, claims: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
        """The user and callgate roles in a verified token's claims; ValueError on a claim of
        the wrong shape."""
        user, value = claims.get(self.user_claim), claims.get(self.roles_claim)
        if not isinstance(user, str) or not user:
            raise ValueError(f"claim {self.user_claim!r} must be a non-empty string")
        if isinstance(value, str):
            value = value.split()
        elif value is None:
            value = []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(
                f"claim {self.roles_claim!r} is neither a list of strings nor a string"
            )
        if self.role_map is not None:
            value = [self.role_map[item] for item in value if item in self.role_map]
        return user, tuple(dict.fromkeys(value))


class TrustConfig(_Frozen):
    """Everything the deployment trusts, by key id."""

    submitters: dict[str, Submitter] = Field(default_factory=dict)
    """Services that submit runs, by name (their key id)."""
    people: dict[str, Person] = Field(default_factory=dict)
    """People who decide, by name (their key id when they sign themselves)."""
    delegates: dict[str, Delegate] = Field(default_factory=dict)
    """Services that sign decisions for people, by name (their key id)."""
    issuers: dict[str, Issuer] = Field(default_factory=dict)
    """Identity providers, by the exact ``iss`` their tokens carry."""
    operator_role: str = "operator"
    """The role that may act on any run (resume, cancel, resolve) regardless of its approver."""

    _public_keys: dict[str, Ed25519PublicKey] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_key_ids(self) -> TrustConfig:
        owners: dict[str, str] = {}
        for section in ("submitters", "people", "delegates"):
            for name in getattr(self, section):
                if not name or name == ANY:
                    raise ValueError(f"{section}: {name!r} cannot be a key id")
                if name in owners:
                    raise ValueError(f"key id {name!r} is used twice ({owners[name]}, {section})")
                owners[name] = section
        for name, delegate in self.delegates.items():
            unknown = [p for p in delegate.signs_for if p != ANY and p not in self.people]
            if unknown:
                raise ValueError(f"delegate {name!r} signs for unknown people {unknown}")
        self._public_keys = {
            name: parse_public_key(entry.public_key)
            for section in (self.submitters, self.people, self.delegates)
            for name, entry in section.items()
            if entry.public_key is not None
        }
        return self

    def roles_of(self, person: str) -> frozenset[str]:
        """The roles the trust file gives ``person``; empty for someone it does not list."""
        entry = self.people.get(person)
        return frozenset(entry.roles) if entry is not None else frozenset()

    def public_key_of(self, key_id: str) -> Ed25519PublicKey | None:
        """The public key of a submitter, person or delegate; None when ``key_id`` has none."""
        return self._public_keys.get(key_id)


def _bound_key(text: str, algorithms: list[str]) -> VerificationKey:
    if not text.strip().startswith("-----BEGIN"):
        key: Any = parse_public_key(text)
    else:
        try:
            key = serialization.load_pem_public_key(text.strip().encode("ascii"))
        except (ValueError, TypeError, UnicodeEncodeError):
            raise ValueError("an issuer public key is not a valid PEM public key") from None
    usable = tuple(name for name in algorithms if _verifies_with(name, key))
    if not usable:
        raise ValueError(f"an issuer public key ({type(key).__name__}) fits none of {algorithms}")
    return key, usable


def _verifies_with(algorithm: str, key: Any) -> bool:
    try:
        get_default_algorithms()[algorithm].prepare_key(key)
    except (PyJWTError, TypeError, ValueError):
        return False
    return True


def _jwks_keys(path: Path, algorithms: list[str]) -> list[VerificationKey]:
    try:
        document = json.loads(path.read_text())
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        key_set = PyJWKSet.from_dict(document)
    except OSError as exc:
        raise ValueError(f"jwks_file {path} cannot be read ({exc.strerror or exc})") from None
    except (PyJWTError, ValueError) as exc:
        raise ValueError(f"jwks_file {path} is not a usable JWKS ({exc})") from None
    keys: list[VerificationKey] = [
        (key, (key.algorithm_name,)) for key in key_set if key.algorithm_name in algorithms
    ]
    if not keys:
        raise ValueError(f"jwks_file {path} has no key for the algorithms {algorithms}")
    return keys


def read_trust_document(path: Path) -> dict[str, Any]:
    """The trust file's JSON object as it is on disk (for editing without rewriting entries)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrustConfigError(
            f"trust file {path} does not exist: create it or set the right path"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrustConfigError(f"trust file {path} cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrustConfigError(
            f"trust file {path} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(document, dict):
        raise TrustConfigError(f"trust file {path} must hold a JSON object")
    return document


def trust_from_document(document: dict[str, Any], *, path: Path) -> TrustConfig:
    """Validate a trust document read from ``path`` (relative JWKS paths start at its folder)."""
    try:
        return TrustConfig.model_validate(document, context={"base_dir": path.parent})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'top level'}: "
            f"{error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors()
        )
        raise TrustConfigError(f"trust file {path} is invalid: {problems}") from None


def load_trust(path: Path) -> TrustConfig:
    """Read and validate the trust file; any problem is one `TrustConfigError` line."""
    return trust_from_document(read_trust_document(path), path=path)

"""Signed tokens through PyJWT: submissions, decisions and identity providers' tokens.

A submission binds a run id and the digest of the exact spec to a submitter's key; a decision
binds a person's action to a key the trust file knows for that person (theirs, or a delegate's
that may sign for them).  Roles a token claims are ignored: they come from the trust file, or
from an identity provider's mapped claim.  PyJWT checks signatures, algorithms, audience, issuer
and required claims; it reads the wall clock, so ``exp`` / ``iat`` / ``nbf`` are checked here
against the caller's ``now``.  Verifying remembers nothing: a decision's ``jti`` is the caller's
to record once, with the decision it applied (reserve, then consume); so is an identity
token's (`VerifiedIdentity.token_id`: each starts one run).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from callgate.auth.trust import ANY, TrustConfig, VerificationKey
from callgate.clock import now_ms
from callgate.errors import AuthError
from callgate.tools.canonical import canonical_bytes, hash_bytes

ALGORITHM = "EdDSA"
CLOCK_SKEW_S = 30.0
MAX_LIFETIME_S = 86_400.0
DEFAULT_TTL_S = 300.0
SUBMISSION_TYPE = "callgate.submission"
DECISION_TYPE = "callgate.decision"
ACCESS_TYPE = "callgate.access"
ACCESS_TTL_S = 900.0
"""How long `callgate keys token` makes a bearer token live by default."""
ACCESS_MAX_LIFETIME_S = 3600.0
"""The longest a bearer token signed with one's own key may live: a lifted one dies soon."""
_SUBMISSION_CLAIMS = ("sub", "run", "spec", "typ", "iat", "exp", "jti")
_DECISION_CLAIMS = ("sub", "act", "run", "iat", "exp", "jti", "typ")
_ACCESS_CLAIMS = ("sub", "typ", "iat", "exp", "jti")
_CLOCK_CHECKED_HERE = {"verify_exp": False, "verify_iat": False, "verify_nbf": False}


@dataclass(frozen=True)
class Signer:
    """A key and the key id the trust file knows it by."""

    key_id: str
    key: Ed25519PrivateKey


@dataclass(frozen=True)
class VerifiedDecision:
    """A decision whose signature and signer's authority held."""

    signer: str
    """The key id that signed: the person, or the delegate that signed for them."""
    person: str
    """Who decided (the token's ``sub``)."""
    roles: frozenset[str]
    """The person's roles from the trust file, never from the token."""
    claims: dict[str, Any]
    """Every claim of the token (``act``, ``run`` and whatever the action needs)."""


@dataclass(frozen=True)
class VerifiedIdentity:
    """A user an identity provider vouched for."""

    user: str
    roles: tuple[str, ...]
    """The roles claim's values mapped through the issuer's ``role_map``, in token order."""
    issuer: str
    token_id: str = field(default="", compare=False)
    """Names this token once: a hash of the issuer and ``jti``, or of the token if it has none."""
    expires_at: float = field(default=0.0, compare=False)
    """The token's ``exp``: until then a second use must be refused."""


def sign(signer: Signer, claims: Mapping[str, Any], ttl_s: float) -> str:
    """A compact EdDSA JWT of ``claims`` with ``kid``, ``iat``, ``exp`` and a random ``jti``
    (unless ``claims`` has one); ``ttl_s`` must be in (0, 1 day]."""
    if not 0 < ttl_s <= MAX_LIFETIME_S:
        raise ValueError(f"ttl_s must be in (0, {MAX_LIFETIME_S:.0f}], not {ttl_s}")
    if "iat" in claims or "exp" in claims:
        raise ValueError("iat and exp are set by sign(), not passed in claims")
    issued_at = now_ms() // 1000
    payload = {"jti": secrets.token_urlsafe(16), **claims, "iat": issued_at}
    payload["exp"] = issued_at + math.ceil(ttl_s)
    try:
        return jwt.encode(payload, signer.key, algorithm=ALGORITHM, headers={"kid": signer.key_id})
    except TypeError as exc:
        raise TypeError(f"claims must be JSON-able: {exc}") from None


def spec_digest(spec: Mapping[str, Any]) -> str:
    """sha256 hex of the spec's canonical JSON: equal for equal specs in any key order."""
    return hash_bytes(canonical_bytes(dict(spec)))


def sign_submission(
    signer: Signer, *, run_id: str, spec: Mapping[str, Any], ttl_s: float = DEFAULT_TTL_S
) -> str:
    """What a submitting service attaches to a run it enqueues."""
    claims = dict(sub=signer.key_id, run=run_id, spec=spec_digest(spec), typ=SUBMISSION_TYPE)
    return sign(signer, claims, ttl_s)


def verify_submission(
    token: str, trust: TrustConfig, *, run_id: str, spec: Mapping[str, Any], now: float
) -> str:
    """The name of the submitter that signed exactly this run id and spec; else `AuthError`."""
    kid = _key_id(token)
    if kid not in trust.submitters:
        raise AuthError(_not_a("submitter", kid, trust))
    claims = _verified_claims(token, [_own_key(trust, kid)], required=_SUBMISSION_CLAIMS, now=now)
    _expect_shape(claims, _SUBMISSION_CLAIMS[:4], SUBMISSION_TYPE)
    if claims["sub"] != kid:
        raise AuthError(f"{kid} may not submit as {claims['sub']}")
    if claims["run"] != run_id:
        raise AuthError("signed for another run")
    if claims["spec"] != spec_digest(spec):
        raise AuthError("spec changed after signing")
    return kid


def check_grant(trust: TrustConfig, service: str, identity: Mapping[str, Any]) -> None:
    """`AuthError` unless ``service`` may vouch for this user with these roles and fields: a
    field besides user and roles reaches every tool hook (`ToolContext.identity`), so it is
    authority like a role and needs the trust entry's leave too."""
    submitter = trust.submitters.get(service)
    if submitter is None:
        raise AuthError(f"unknown submitter {service!r}")
    roles = identity.get("roles", [])
    if not isinstance(roles, list | tuple) or not all(isinstance(r, str) for r in roles):
        raise AuthError("identity roles must be a list of strings")
    if ANY not in submitter.grants:
        refused = [role for role in roles if role not in submitter.grants]
        if refused:
            raise AuthError(f"{service} may not grant {', '.join(map(repr, refused))}")
    user = identity.get("user")
    if submitter.users is not None and user not in submitter.users:
        raise AuthError(f"{service} may not vouch for user {user!r}")
    for name, value in identity.items():
        if name in ("user", "roles"):
            continue
        allowed = submitter.attributes.get(name)
        if allowed is None:
            raise AuthError(
                f"{service} may not assert the identity field {name!r} "
                "(list it under the submitter's attributes in the trust file)"
            )
        if ANY not in allowed and value not in allowed:
            raise AuthError(f"{service} may not assert {name} = {value!r}")


def sign_decision(
    signer: Signer, *, person: str, claims: Mapping[str, Any], ttl_s: float = DEFAULT_TTL_S
) -> str:
    """A person's decision, signed by their own key or by a delegate's for them."""
    fixed = {"sub": person, "typ": DECISION_TYPE}
    clashing = [name for name, value in fixed.items() if claims.get(name, value) != value]
    if clashing:
        raise ValueError(f"claims {clashing} clash with the decision's own")
    return sign(signer, {**claims, **fixed}, ttl_s)


def verify_decision(token: str, trust: TrustConfig, *, now: float) -> VerifiedDecision:
    """The decision, if a key the trust file knows for its person signed it; else `AuthError`."""
    kid = _key_id(token)
    if kid in trust.people and trust.public_key_of(kid) is None:
        raise AuthError(f"{kid} has no key of their own in the trust file")
    if kid not in trust.people and kid not in trust.delegates:
        raise AuthError(_not_a("person or delegate", kid, trust))
    claims = _verified_claims(token, [_own_key(trust, kid)], required=_DECISION_CLAIMS, now=now)
    _expect_shape(claims, ("sub", "act", "run", "jti", "typ"), DECISION_TYPE)
    person = claims["sub"]
    _check_signs_for(trust, kid, person)
    return VerifiedDecision(signer=kid, person=person, roles=trust.roles_of(person), claims=claims)


def sign_access(signer: Signer, ttl_s: float = ACCESS_TTL_S) -> str:
    """A bearer token for the HTTP API: who holds ``signer``'s key, for ``ttl_s`` seconds."""
    if ttl_s > ACCESS_MAX_LIFETIME_S:
        raise ValueError(f"a bearer token lives at most {ACCESS_MAX_LIFETIME_S:.0f} s")
    return sign(signer, {"sub": signer.key_id, "typ": ACCESS_TYPE}, ttl_s)


def verify_access(token: str, trust: TrustConfig, *, now: float) -> str:
    """The submitter or person whose own key signed this bearer token; else `AuthError`.
    A delegate's key is refused: it speaks for people only inside a signed decision."""
    kid = _key_id(token)
    if kid not in trust.submitters and kid not in trust.people:
        raise AuthError(_not_a("submitter or person", kid, trust))
    if trust.public_key_of(kid) is None:
        raise AuthError(f"{kid} has no key of their own in the trust file")
    claims = _verified_claims(
        token,
        [_own_key(trust, kid)],
        required=_ACCESS_CLAIMS,
        now=now,
        max_lifetime_s=ACCESS_MAX_LIFETIME_S,
    )
    _expect_shape(claims, ("sub", "jti", "typ"), ACCESS_TYPE)
    if claims["sub"] != kid:
        raise AuthError(f"{kid} may not speak as {claims['sub']}")
    return kid


def issuer_of(token: str) -> str | None:
    """The ``iss`` a token names, unverified: for its holder's own token, never to trust one."""
    with _reasons():
        issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
    return issuer if isinstance(issuer, str) else None


def verify_identity_token(
    token: str, trust: TrustConfig, *, now: float, max_lifetime_s: float
) -> VerifiedIdentity:
    """The user (and mapped roles) a trusted identity provider's token vouches for.  It must
    say when it was issued and live at most ``max_lifetime_s``: a lifted token is then
    worthless soon, and its use is recorded until it expires (`VerifiedIdentity.token_id`)."""
    with _reasons():
        unverified = jwt.decode(token, options={"verify_signature": False})
        header = jwt.get_unverified_header(token)
    name = unverified.get("iss")
    if not isinstance(name, str) or name not in trust.issuers:
        raise AuthError(f"unknown issuer {name!r}")
    issuer = trust.issuers[name]
    candidates = issuer.verification_keys(header.get("kid"), header.get("alg"))
    if not candidates:
        raise AuthError(f"no key of {name} fits the token's kid and alg")
    claims = _verified_claims(
        token, candidates, required=("exp", "iat", issuer.user_claim), now=now,
        audience=issuer.audience, issuer=name, max_lifetime_s=max_lifetime_s,
    )  # fmt: skip
    try:
        user, roles = issuer.user_and_roles(claims)
    except ValueError as exc:
        raise AuthError(str(exc)) from None
    jti = claims.get("jti")
    named = f"{name}\0{jti}" if isinstance(jti, str) and jti else token
    return VerifiedIdentity(
        user=user,
        roles=roles,
        issuer=name,
        token_id=hashlib.sha256(named.encode()).hexdigest(),
        expires_at=float(claims["exp"]),
    )


def _check_signs_for(trust: TrustConfig, signer: str, person: str) -> None:
    if signer in trust.people:
        if person != signer:
            raise AuthError(f"{signer} may not sign for {person}")
        return
    if person not in trust.people:
        raise AuthError(f"unknown person {person!r}")
    allowed = trust.delegates[signer].signs_for
    if ANY not in allowed and person not in allowed:
        raise AuthError(f"{signer} may not sign for {person}")


def _key_id(token: str) -> str:
    with _reasons():
        kid = jwt.get_unverified_header(token).get("kid")
    if not isinstance(kid, str) or not kid:
        raise AuthError("token names no key (kid)")
    return kid


def _own_key(trust: TrustConfig, kid: str) -> VerificationKey:
    return trust.public_key_of(kid), (ALGORITHM,)


def _not_a(what: str, kid: str, trust: TrustConfig) -> str:
    known = kid in trust.submitters or kid in trust.people or kid in trust.delegates
    return f"key {kid!r} is not a {what}" if known else f"unknown key {kid!r}"


def _verified_claims(
    token: str,
    candidates: Sequence[VerificationKey],
    *,
    required: Sequence[str],
    now: float,
    audience: str | None = None,
    issuer: str | None = None,
    max_lifetime_s: float | None = MAX_LIFETIME_S,
) -> dict[str, Any]:
    """Claims of a token one of ``candidates`` signed, checked for time against ``now``."""
    options: Any = {**_CLOCK_CHECKED_HERE, "require": list(required)}
    failure: jwt.InvalidTokenError = jwt.InvalidSignatureError()
    with _reasons():
        for key, algorithms in candidates:
            try:
                claims = jwt.decode(
                    token, key, algorithms=list(algorithms), options=options,
                    audience=audience, issuer=issuer,
                )  # fmt: skip
            except jwt.InvalidSignatureError as exc:
                failure = exc  # a key that did not sign it; the next one may have
                continue
            _check_times(claims, now, max_lifetime_s)
            return claims
        raise failure


def _check_times(claims: Mapping[str, Any], now: float, max_lifetime_s: float | None) -> None:
    exp, iat, nbf = (_number(claims, name) for name in ("exp", "iat", "nbf"))
    if exp is None:
        raise AuthError("missing claim 'exp'")
    if exp <= now - CLOCK_SKEW_S:
        raise AuthError("expired")
    if any(start is not None and start > now + CLOCK_SKEW_S for start in (iat, nbf)):
        raise AuthError("not yet valid")
    if max_lifetime_s is not None and (iat is None or exp - iat > max_lifetime_s):
        limit = "1 day" if max_lifetime_s == MAX_LIFETIME_S else f"{max_lifetime_s:g} s"
        raise AuthError(f"token lifetime exceeds {limit}")


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    """A time claim as a finite number; NaN would slip through every comparison."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AuthError(f"claim {name!r} must be a finite number")
    return float(value)


def _expect_shape(claims: Mapping[str, Any], texts: Sequence[str], expected: str) -> None:
    for name in texts:
        if not isinstance(claims.get(name), str) or not claims[name]:
            raise AuthError(f"claim {name!r} must be a non-empty string")
    if claims["typ"] != expected:
        raise AuthError(f"token type is {claims['typ']!r}, not {expected!r}")


_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.InvalidSignatureError, "signature does not verify"),
    (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.DecodeError, "malformed token"),
)


@contextlib.contextmanager
def _reasons() -> Iterator[None]:
    """PyJWT's errors as `AuthError` reasons, mapped once at the boundary."""
    try:
        yield
    except jwt.MissingRequiredClaimError as exc:
        raise AuthError(f"missing claim {exc.claim!r}") from None
    except jwt.PyJWTError as exc:
        reason = next((text for kind, text in _REASONS if isinstance(exc, kind)), None)
        raise AuthError(reason or f"invalid token ({exc})") from None

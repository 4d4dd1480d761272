"""What a person's decision says, signed: the claims of a decision token.

A decision reaches the validator as a `callgate.envelopes.SignedDecision` holding nothing but a
token (`callgate.auth.tokens.sign_decision`); everything that matters — which run, which
approval, for which exact arguments, approve or deny, why — is inside the signature, so no
field of a stream message can stand in for a person.  The signer's key and the person it speaks
for are checked by `verify_decision`; the person's roles come from the trust file.
"""

from __future__ import annotations

from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from callgate.errors import AuthError

DecisionKind = Literal["approve", "deny"]
C = TypeVar("C", bound=BaseModel)


class ApprovalClaims(BaseModel):
    """Approve or deny one pending approval, for the arguments the person was shown."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    act: DecisionKind
    run: str = Field(min_length=1, max_length=128)
    apr: str = Field(min_length=1, max_length=128)
    """The approval id."""
    call: str = Field(min_length=1, max_length=128)
    hash: str = Field(min_length=1, max_length=128)
    """The canonical-argument hash the person saw; must be the approval's."""
    reason: str | None = Field(default=None, max_length=2000)
    jti: str = Field(min_length=1, max_length=128)
    """The token's own id: a decision applies once."""


def approval_claims(
    act: DecisionKind, *, run: str, apr: str, call: str, hash: str, reason: str | None, jti: str
) -> dict[str, object]:
    """The claims to sign for one approval decision."""
    claims = ApprovalClaims(act=act, run=run, apr=apr, call=call, hash=hash, reason=reason, jti=jti)
    return claims.model_dump(exclude_none=True)


def read_claims(model: type[C], claims: dict[str, object], what: str) -> C:
    """A verified token's claims as ``model``; `AuthError` ("not <what>") if they are not."""
    try:
        return model.model_validate(claims)
    except ValidationError as exc:
        raise AuthError(f"not {what}: {exc.errors()[0]['msg']}") from exc


def read_approval_claims(claims: dict[str, object]) -> ApprovalClaims:
    return read_claims(ApprovalClaims, claims, "an approval decision")


ResolveOutcome = Literal["applied", "not_applied", "recheck"]


class ResolveClaims(BaseModel):
    """A person's answer for a write whose outcome stayed unknown: it was applied (with its
    result), it was not, or ask the authoritative system again.  Bound to the call and its
    operation id, so it cannot be replayed onto another write."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    act: Literal["resolve"]
    run: str = Field(min_length=1, max_length=128)
    call: str = Field(min_length=1, max_length=128)
    op: str = Field(min_length=1, max_length=256)
    """The call's operation id, as the person was shown it."""
    outcome: ResolveOutcome
    result: dict[str, object] | None = None
    """With ``applied``: the result the model is told (default: an empty object)."""
    reason: str | None = Field(default=None, max_length=2000)
    jti: str = Field(min_length=1, max_length=128)


def resolve_claims(
    *,
    run: str,
    call: str,
    op: str,
    outcome: ResolveOutcome,
    result: dict[str, object] | None,
    reason: str | None,
    jti: str,
) -> dict[str, object]:
    """The claims to sign for one resolution."""
    claims = ResolveClaims(
        act="resolve",
        run=run,
        call=call,
        op=op,
        outcome=outcome,
        result=result,
        reason=reason,
        jti=jti,
    )
    return claims.model_dump(exclude_none=True)


def read_resolve_claims(claims: dict[str, object]) -> ResolveClaims:
    return read_claims(ResolveClaims, claims, "a resolution")


class ControlClaims(BaseModel):
    """A person cancels a run, or resumes one paused incomplete or handed off at its budget
    (with the same or a larger budget)."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    act: Literal["cancel", "resume"]
    run: str = Field(min_length=1, max_length=128)
    reason: str | None = Field(default=None, max_length=2000)
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    """With ``resume``: the run's new turn budget (default: one more turn than it used)."""
    deadline_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    """With ``resume``: a new wall-clock deadline, from the moment it applies."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """With ``resume``: the run's new token budget (usage so far is kept)."""
    jti: str = Field(min_length=1, max_length=128)


def control_claims(**fields: object) -> dict[str, object]:
    """The claims to sign for one cancel or resume."""
    return ControlClaims.model_validate(fields).model_dump(exclude_none=True)


def read_control_claims(claims: dict[str, object]) -> ControlClaims:
    return read_claims(ControlClaims, claims, "a cancel or resume")

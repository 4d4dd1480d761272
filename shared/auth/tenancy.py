"""Tenants: a tenant's logins read its own runs only, because its run ids carry its name.

A run whose verified identity has ``tenant: T`` gets a run id starting ``T.``; every key of the
run (`callgate.keys`: ``cg:{pN}:<kind>:<run id>…``), its arq job and result, and the tenant's
runs index then match the key patterns deploy/redis/acl.sh renders for the tenant's Redis users
(``submitters_T``, ``approvers_T``), and no other run's keys do.  Redis does the refusing; this
module keeps the names honest where runs are created (`callgate.auth.admission.admit`): a
tenant's run has its prefix, and a prefix that names a tenant the trust file knows belongs to
that tenant's runs alone.  Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from callgate.auth.trust import ANY, TrustConfig
from callgate.envelopes import new_id
from callgate.errors import AuthError
from callgate.keys import TENANT_PATTERN

TENANT_FIELD = "tenant"
"""The identity field (granted through a submitter's ``attributes``) naming the run's tenant."""
TENANT_NAME = re.compile(TENANT_PATTERN)
SEPARATOR = "."


def is_tenant_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and TENANT_NAME.fullmatch(name) is not None


def tenant_of(identity: Mapping[str, Any] | None) -> str | None:
    """The tenant an identity names, None when it names none; `AuthError` for a value that
    cannot be a tenant's name."""
    value = (identity or {}).get(TENANT_FIELD)
    if value is None:
        return None
    if not is_tenant_name(value):
        raise AuthError(f"tenant {value!r} is not a tenant name ({TENANT_NAME.pattern})")
    return value


def run_id_prefix(tenant: str) -> str:
    """What every run id of ``tenant`` starts with."""
    return f"{tenant}{SEPARATOR}"


def prefix_tenant(run_id: str) -> str | None:
    """The tenant ``run_id``'s prefix names (``acme`` for ``acme.7f3a``), None if none."""
    head, dot, _ = run_id.partition(SEPARATOR)
    return head if dot and is_tenant_name(head) else None


def job_id(run_id: str, kind: str) -> str:
    """A new arq job id for ``kind`` work on ``run_id`` (``reply-…``), under the run's tenant
    prefix when it has one: its tenant's login may enqueue it and read its result, no other's."""
    tenant = prefix_tenant(run_id)
    return f"{run_id_prefix(tenant) if tenant else ''}{kind}-{new_id()}"


def tenants(trust: TrustConfig) -> list[str]:
    """Every tenant the trust file names: the values submitters may give the tenant field."""
    names = {
        value
        for submitter in trust.submitters.values()
        for value in submitter.attributes.get(TENANT_FIELD, [])
        if value != ANY
    }
    return sorted(names)


def issuer_identity_tenant(
    trust: TrustConfig, service: str, claimed: object, identity: dict[str, Any]
) -> dict[str, Any]:
    """An identity provider's user, with the tenant the submitting service names for the run
    (``identity.tenant`` of the spec): a service may name only a tenant its trust entry gives."""
    tenant = claimed.get(TENANT_FIELD) if isinstance(claimed, dict) else None
    if tenant is None:
        return identity
    allowed = trust.submitters[service].attributes.get(TENANT_FIELD, [])
    if ANY not in allowed and tenant not in allowed:
        raise AuthError(f"{service} may not assert {TENANT_FIELD} = {tenant!r}")
    return {**identity, TENANT_FIELD: tenant}


def check_tenant_named(trust: TrustConfig, service: str, identity: Mapping[str, Any]) -> None:
    """A service given particular tenants speaks only for them: each of its runs names one, so
    none lands outside every tenant's reach (and inside the untenanted logins')."""
    allowed = trust.submitters[service].attributes.get(TENANT_FIELD)
    if allowed and ANY not in allowed and identity.get(TENANT_FIELD) is None:
        raise AuthError(
            f"{service} starts runs of {', '.join(allowed)} only: name the tenant "
            f"as identity.{TENANT_FIELD}"
        )


def check_tenancy(trust: TrustConfig, identity: Mapping[str, Any], run_id: str) -> None:
    """`AuthError` unless ``run_id`` is named for the identity's tenant: a tenant's run starts
    with ``<tenant>.``, and a run id starting with a known tenant's name belongs to it."""
    tenant = tenant_of(identity)
    if tenant is not None and not run_id.startswith(run_id_prefix(tenant)):
        raise AuthError(
            f"a run of tenant {tenant} needs a run id starting {run_id_prefix(tenant)!r}"
        )
    named = prefix_tenant(run_id)
    if named is not None and named != tenant and named in tenants(trust):
        raise AuthError(f"run ids starting {run_id_prefix(named)!r} belong to tenant {named}")

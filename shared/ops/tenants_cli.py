"""`callgate tenants`: the tenants the trust file names, as deploy/redis/acl.sh takes them.

    CALLGATE_TENANTS="$(callgate tenants)" sh deploy/redis/acl.sh deploy/redis/users.acl

prints the values any submitter may give the identity field ``tenant`` (its ``attributes``),
space-separated on one line, so the Redis users rendered per tenant (``submitters_<tenant>``,
``approvers_<tenant>``) follow the trust file.  A value that cannot be a tenant's name (Redis
users and key patterns are built from it) is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from callgate.auth.tenancy import TENANT_NAME, is_tenant_name, tenants
from callgate.auth.trust import load_trust
from callgate.config import Settings
from callgate.ops.exits import OK, USAGE


def cmd_tenants(args: argparse.Namespace) -> int:
    names = tenants(load_trust(Settings().trust_path))
    unusable = [name for name in names if not is_tenant_name(name)]
    if unusable:
        print(
            f"callgate: the trust file names tenants {unusable} that are not tenant names "
            f"({TENANT_NAME.pattern}): rename them",
            file=sys.stderr,
        )
        return USAGE
    print(" ".join(names))
    return OK


def add_command(sub: Any) -> None:
    text = "the trust file's tenants, for CALLGATE_TENANTS (deploy/redis/acl.sh)"
    cmd = sub.add_parser("tenants", help=text, description=text)
    cmd.set_defaults(handler=cmd_tenants)

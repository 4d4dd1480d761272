#!/bin/sh
# Render Redis's ACL file from the rules in users.acl:  sh acl.sh users.acl > ACL_FILE
#
# Each `user NAME rules…` gets NAME's password from the environment, REDIS_<NAME>_PASSWORD,
# stored as its SHA-256 (`#<hex>`), so the rendered file holds no password in the clear.  A
# missing or empty password stops with an error; so does a default user that is missing or not
# `off`.  Used by docker-compose.yml's redis service and by the tests.
#
# Tenants: for each tenant in CALLGATE_TENANTS (names split by spaces or commas, as
# `callgate tenants` prints the trust file's), the users `submitters` and `approvers` are
# rendered once more as `submitters_<tenant>` / `approvers_<tenant>` (password
# REDIS_SUBMITTERS_<TENANT>_PASSWORD …): the same rules, their key patterns narrowed to the
# tenant's runs, whose ids start `<tenant>.` (callgate.auth.tenancy).  `cg:*` becomes each
# per-run key kind of callgate.keys for those ids (`cg:{pN}:run:<tenant>.*` …) and the tenant's
# own copies of the partitions' indices (its runs, its pending approvals, its unresolved calls:
# `cg:{pN}:runs:<tenant>.` …), never the partitions' indices themselves, which name every
# tenant's runs; `arq:NAME:*` becomes `arq:NAME:<tenant>.*`; a pattern without a wildcard is
# kept; any other wildcard pattern stops with an error rather than pass unnarrowed.
set -euf  # -f: the rules are full of `*`, which must never be expanded as file names

rules=${1:?usage: sh acl.sh RULES_FILE > ACL_FILE}
tenants=$(printf '%s' "${CALLGATE_TENANTS:-}" | tr ',' ' ')
TENANT_BASES='submitters approvers'
# Exactly a partition's tag, as users.acl's header explains (never `{p*}`).
PARTITIONS='{p[0-9]} {p[1-9][0-9]} {p[1-9][0-9][0-9]} {p1[0-9][0-9][0-9]}'
# Every key kind named `cg:{pN}:<kind>:<run id>…`, and every partition index a tenant has its
# own copy of, `cg:{pN}:<index>:<tenant>.` (tests/unit/test_tenancy.py keeps both in step with
# callgate.keys).
RUN_KINDS='run hist raw call index events appr dseen whcur whask'
TENANT_INDICES='runs approvals:pending calls:unresolved'

fail() {
    echo "acl.sh: $*" >&2
    exit 1
}

user_line() {  # user_line NAME RULES…: the rendered line, with NAME's password hash
    name=$1
    shift
    var=REDIS_$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')_PASSWORD
    eval "password=\${$var:-}"
    [ -n "$password" ] || fail "$var is not set (the password of Redis user $name)"
    hash=$(printf '%s' "$password" | sha256sum | cut -d ' ' -f 1)
    printf 'user %s #%s %s\n' "$name" "$hash" "$*"
}

narrow() {  # narrow BASE TENANT RULE: append RULE, its keys cut to TENANT's, to $narrowed
    case $3 in
        *~*) ;;
        allkeys | *allkeys) fail "cannot narrow $3 of user $1 to a tenant" ;;
        *) narrowed="$narrowed $3"; return 0 ;;
    esac
    perm=${3%%~*}~
    pattern=${3#*~}
    case $pattern in
        'cg:*')
            for p in $PARTITIONS; do
                for kind in $RUN_KINDS; do narrowed="$narrowed ${perm}cg:$p:$kind:$2.*"; done
                for index in $TENANT_INDICES; do narrowed="$narrowed ${perm}cg:$p:$index:$2."; done
            done ;;
        arq:*:'*') narrowed="$narrowed ${perm}${pattern%'*'}$2.*" ;;
        *'*'* | *'?'*) fail "cannot narrow key pattern $3 of user $1 to a tenant" ;;
        *) narrowed="$narrowed $3" ;;
    esac
}

emit_tenants() {  # emit_tenants BASE RULES…: BASE's rules once per tenant, narrowed
    base=$1
    shift
    for tenant in $tenants; do
        case $tenant in
            [a-z]*) ;;
            *) fail "tenant names start with a lower case letter: $tenant" ;;
        esac
        case $tenant in
            *[!a-z0-9_]*) fail "tenant names are lower case letters, digits and _: $tenant" ;;
        esac
        [ ${#tenant} -le 32 ] || fail "tenant names have at most 32 characters: $tenant"
        narrowed=
        for rule in "$@"; do narrow "$base" "$tenant" "$rule"; done
        # shellcheck disable=SC2086  # one word per rule; globbing is off (set -f)
        user_line "${base}_$tenant" $narrowed
    done
}

emit() {
    [ -n "$entry" ] || return 0
    # shellcheck disable=SC2086  # word splitting is the point; globbing is off (set -f)
    set -- $entry
    entry=
    [ "$1" = user ] && [ $# -ge 3 ] || fail "expected 'user NAME rules...', got: $*"
    name=$2
    shift 2
    case $name in
        default)
            state=on  # the last of `on` / `off` wins
            for rule in "$@"; do
                case $rule in on | off) state=$rule ;; esac
            done
            [ "$state" = off ] || fail "the default user must be off"
            default_seen=1
            printf 'user default %s\n' "$*"
            ;;
        *[!a-z0-9_]*) fail "user names are lower case letters, digits and _: $name" ;;
        *)
            user_line "$name" "$@"
            case " $TENANT_BASES " in
                *" $name "*) emit_tenants "$name" "$@" ;;
            esac
            ;;
    esac
}

entry=
default_seen=
while IFS= read -r line || [ -n "$line" ]; do
    trimmed=$(printf '%s\n' "$line" | sed 's/^[[:space:]]*//')
    case $trimmed in
        '' | '#'*) continue ;;
    esac
    case $line in
        [[:space:]]*) [ -n "$entry" ] || fail "continued line before any user: $trimmed"
                      entry="$entry $trimmed" ;;
        *) emit; entry=$line ;;
    esac
done <"$rules"
emit
# Redis would otherwise create the default user as it ships: no password, every command.
[ -n "$default_seen" ] || fail "no 'user default off' line: the default user would be open"

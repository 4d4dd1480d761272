#!/bin/sh
# Render Redis's ACL file from the rules in users.acl:  sh acl.sh users.acl > ACL_FILE
#
# Each `user NAME rules…` gets NAME's password from the environment, REDIS_<NAME>_PASSWORD,
# stored as its SHA-256 (`#<hex>`), so the rendered file holds no password in the clear.  A
# missing or empty password stops with an error; so does a default user that is missing or not
# `off`.  Used by docker-compose.yml's redis service and by the tests.
set -euf  # -f: the rules are full of `*`, which must never be expanded as file names

rules=${1:?usage: sh acl.sh RULES_FILE > ACL_FILE}

fail() {
    echo "acl.sh: $*" >&2
    exit 1
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
            var=REDIS_$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')_PASSWORD
            eval "password=\${$var:-}"
            [ -n "$password" ] || fail "$var is not set (the password of Redis user $name)"
            hash=$(printf '%s' "$password" | sha256sum | cut -d ' ' -f 1)
            printf 'user %s #%s %s\n' "$name" "$hash" "$*"
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

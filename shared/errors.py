"""The one error tree of callgate.

Whether to retry is data on the error, so a worker decides ack / retry / dead-letter
from the error alone::

    CallgateError                  retryable=False unless stated
    ├── EnvelopeError              a stream message that is not a valid envelope
    │   └── NewerSchemaError       a message or record of a newer ledger schema (refused)
    ├── TransitionError            a state change the state machine forbids
    ├── TxRejectedError            the ledger's script refused an op (a bug, never retried)
    ├── ConflictError              a compare-and-set lost ("already taken")
    │   ├── SpecConflictError      a run id submitted again with a different spec
    │   └── RunBusyError           a follow-up input for a run that has not completed
    ├── NotFoundError              a run, call or approval that does not exist
    ├── RunSpecError               a run spec that does not validate; lists every problem
    ├── JobFailedError             the ``start_run`` job failed; no run exists
    ├── RedisUnavailableError      the store did not answer (retryable)
    ├── AuthError                  a token, signature or grant that does not hold
    ├── KeyFileError               a private key file that cannot be used
    ├── TrustConfigError           the deployment's trust file is missing or invalid
    ├── TracingConfigError         an ``OTEL_*`` setting callgate cannot honour
    ├── DurabilityError            Redis cannot give the write durability the deployment asks
    ├── ToolError                  a tool's own failure, carried to the model as a result
    └── ProviderError              a model request that failed, classified
        ├── ProviderTimeoutError       retryable
        ├── ProviderTransportError     retryable (connection dropped mid-stream)
        ├── ProviderRateLimitedError   retryable, honours retry_after_s
        ├── ProviderOverloadedError    retryable, honours retry_after_s
        ├── ProviderServerError        retryable
        └── ProviderBadRequestError    the API rejected our request; carries its message
"""

from __future__ import annotations


class CallgateError(Exception):
    """Base of every error callgate raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = retry_after_s


class EnvelopeError(CallgateError):
    """A stream message failed decoding or validation; it goes to the dead-letter stream."""


class NewerSchemaError(EnvelopeError):
    """A message or record written by a newer callgate than this worker reads: it is
    dead-lettered with this reason for a newer worker, and fails nothing (`LEDGER_SCHEMA`)."""

    def __init__(
        self, what: str, version: object, known: int, then: str = "nothing was failed"
    ) -> None:
        super().__init__(
            f"{what} is of ledger schema {version}, newer than this worker reads (up to "
            f"{known}): upgrade this worker; {then}"
        )


class TransitionError(CallgateError):
    """An illegal transition; names the machine and both states."""

    def __init__(self, machine: str, from_state: str, to_state: str) -> None:
        super().__init__(f"illegal {machine} transition {from_state} -> {to_state}")
        self.machine = machine
        self.from_state = from_state
        self.to_state = to_state


class TxRejectedError(CallgateError):
    """The ledger's script refused an op before writing anything (e.g. the key has another
    type).  A programming or data error, not a lost race, so it is never retried."""


class ConflictError(CallgateError):
    """Somebody else already made this transition; the loser must not act."""

    def __init__(self, what: str, actual: str | None, message: str | None = None) -> None:
        super().__init__(message or f"{what}: already taken (found {actual!r})")
        self.what = what
        self.actual = actual


class SpecConflictError(ConflictError):
    """A run id submitted again with a different spec or for another identity.  Submitting is
    idempotent only for the same request: a different one under a taken id is refused, and the
    existing run is untouched.  Never retried: the same job would conflict again."""

    def __init__(self, run_id: str, detail: str | None = None) -> None:
        super().__init__(
            f"run {run_id}",
            None,
            detail
            or f"run {run_id} exists with a "
            "different spec or identity; submit the new spec under a new run id",
        )
        self.run_id = run_id


class RunBusyError(ConflictError):
    """A follow-up input for a run that is not completed (its policy was ``reject``), or one
    that moved on while the input was being admitted.  Nothing changed; send it again later,
    or with the ``enqueue`` policy."""

    def __init__(self, run_id: str, detail: str) -> None:
        super().__init__(f"run {run_id}", None, detail)


class NotFoundError(CallgateError):
    """The record a message refers to does not exist."""


class RunSpecError(CallgateError):
    """A run spec that does not validate; ``problems`` lists ``field: message`` lines."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid run spec: " + "; ".join(problems))
        self.problems = problems


class JobFailedError(CallgateError):
    """The ``start_run`` job failed (e.g. a spec the ingress refused); no run exists."""


class RedisUnavailableError(CallgateError):
    retryable = True


class AuthError(CallgateError):
    """A token or a grant that does not hold; ``reason`` is short, loggable and never holds
    the token itself."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"not trusted: {reason}")
        self.reason = reason


class KeyFileError(CallgateError):
    """A private key file that cannot be used; the message names the file and what to do."""


class TrustConfigError(CallgateError):
    """The trust file is missing, not JSON or not a valid trust configuration."""


class TracingConfigError(CallgateError):
    """Tracing is on and an ``OTEL_*`` setting asks for what callgate does not do (README
    "Tracing"): the worker does not start."""


class DurabilityError(CallgateError):
    """``CALLGATE_WRITE_DURABILITY=fsync`` and Redis does not fsync every write (or will not
    say): an executor does not start, since a write's intent could be lost after its request
    went out."""


class ToolError(CallgateError):
    """A tool failed; the message is what the model is told."""

    def __init__(self, message: str, *, code: str = "tool_error") -> None:
        super().__init__(message)
        self.code = code


class ProviderError(CallgateError):
    """A model request failed; `kind` is the classification recorded on the turn."""

    kind = "provider_error"

    def __init__(
        self, message: str, *, retry_after_s: float | None = None, status: int | None = None
    ) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.status = status


class ProviderTimeoutError(ProviderError):
    kind = "timeout"
    retryable = True


class ProviderTransportError(ProviderError):
    kind = "transport_error"
    retryable = True


class ProviderRateLimitedError(ProviderError):
    kind = "rate_limited"
    retryable = True


class ProviderOverloadedError(ProviderError):
    kind = "overloaded"
    retryable = True


class ProviderServerError(ProviderError):
    kind = "server_error"
    retryable = True


class ProviderBadRequestError(ProviderError):
    kind = "bad_request"

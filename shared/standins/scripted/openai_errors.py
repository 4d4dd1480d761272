"""OpenAI error bodies (`{"error": {message, type, param, code}}`), shared by Responses and Chat.

Texts are the recorded ones (tests/provider_fixtures/openai-*/error-*.json) where a recording
exists; the 503 "overloaded" text is the one OpenAI users quote in issues.
"""

from __future__ import annotations

from callgate.standins.scripted.common import ApiError, openai_request_id
from callgate.standins.scripted.rules import Violation
from callgate.standins.scripted.scenario import Fault

_RATE = (
    "Rate limit reached for {model} in organization org-scripted000000000000000 on requests per "
    "min (RPM): Limit 3, Used 3, Requested 1. Please try again in {s}s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
_QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors."
)
_SERVER = (
    "The server had an error processing your request. Sorry about that! You can retry your "
    "request, or contact us through our help center at help.openai.com if you keep seeing this "
    "error. (Please include the request ID {rid} in your email.)"
)
_OVERLOADED = "The server is overloaded or not ready yet."


def error(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ApiError:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return ApiError(status, body, headers or {})


def missing_parameter(param: str) -> ApiError:
    """The 400 both OpenAI APIs answer when a required request field is absent."""
    return error(
        400,
        f"Missing required parameter: '{param}'.",
        param=param,
        code="missing_required_parameter",
    )


def bad_request(v: Violation) -> ApiError:
    return error(400, v.message, param=v.param, code=v.code)


def rate_limited(fault: Fault, model: str) -> ApiError:
    retry = fault.retry_after_s
    headers = {
        "retry-after": str(max(1, round(retry))),
        "retry-after-ms": str(int(retry * 1000)),
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{retry:g}s",
    }
    if fault.code == "insufficient_quota":
        return error(429, _QUOTA, "insufficient_quota", None, "insufficient_quota", headers)
    msg = _RATE.format(model=model, s=f"{retry:g}")
    return error(429, msg, "requests", None, "rate_limit_exceeded", headers)


def server_error() -> ApiError:
    return error(500, _SERVER.format(rid=openai_request_id()), "server_error")


def overloaded() -> ApiError:
    return error(503, _OVERLOADED, "server_error")


def stream_error_payload() -> dict[str, object]:
    """The `error` object a failing stream carries (Chat: as a whole `data:` chunk)."""
    msg = _SERVER.format(rid=openai_request_id())
    return {"message": msg, "type": "server_error", "param": None, "code": "server_error"}

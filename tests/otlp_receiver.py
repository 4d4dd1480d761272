"""An OTLP/HTTP trace receiver for the tests: what real workers export, decoded with the
official ``opentelemetry-proto`` messages, served from a thread so it answers whatever the
test's own event loop is doing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    raw: str
    """The whole span as its JSON mapping: what to search for anything that must not be there."""


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found = []
    for resource_spans in request.resource_spans:
        service = str(_attributes(resource_spans.resource.attributes).get("service.name"))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    ReceivedSpan(
                        service,
                        span.name,
                        span.trace_id.hex(),
                        span.span_id.hex(),
                        span.parent_span_id.hex(),
                        span.kind,
                        _attributes(span.attributes),
                        [(e.name, _attributes(e.attributes)) for e in span.events],
                        str(MessageToDict(span)) + str(_attributes(span.attributes)),
                    )
                )
    return found


@dataclass
class Receiver:
    """``endpoint`` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` names; `spans` all that came."""

    endpoint: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        spans = decode(body)
        with self._lock:
            self.bodies.append(body)
            self.spans.extend(spans)

    def until(self, check: Callable[[list[ReceivedSpan]], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if check(list(self.spans)):
                    return
            time.sleep(0.05)
        raise TimeoutError(f"spans never matched; got {[s.name for s in self.spans]}")


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/traces":
            self.receiver.add(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
        else:
            answer = b""
            self.send_response(404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class OtlpServer:
    """A running `Receiver` on a free loopback port (a context manager)."""

    def __init__(self) -> None:
        self.receiver = Receiver()
        handler = type("Handler", (_Handler,), {"receiver": self.receiver})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.receiver.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self.receiver

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

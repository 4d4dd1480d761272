"""Provider adapters, one per wire protocol, behind the neutral `ProviderAdapter` protocol."""

from __future__ import annotations

import importlib
from typing import Any

from callgate.providers.adapter import SdkAdapter
from callgate.providers.anthropic_messages import AnthropicMessagesAdapter
from callgate.providers.base import ProviderAdapter
from callgate.providers.openai_chat import OpenAIChatAdapter
from callgate.providers.openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, type[OpenAIResponsesAdapter | OpenAIChatAdapter | AnthropicMessagesAdapter]] = {
    "openai-responses": OpenAIResponsesAdapter,
    "openai-chat": OpenAIChatAdapter,
    "anthropic-messages": AnthropicMessagesAdapter,
}


def adapter_for(api: str, factory: str | None = None) -> ProviderAdapter:
    """The adapter for `api`: built by ``factory`` ("module:function", taking the api) when
    given, e.g. the benchmark's in-process provider, else the official SDK adapter."""
    if factory is None:
        return get_adapter(api)
    module, _, name = factory.partition(":")
    build = getattr(importlib.import_module(module), name, None)
    if not callable(build):
        raise ValueError(f"adapter factory {factory!r} is not 'module:function'")
    adapter: ProviderAdapter = build(api)
    return adapter


def get_adapter(api: str, *, stream: bool = True) -> SdkAdapter[Any, Any]:
    """A new adapter (with its own SDK client, created on first use) for `api`."""
    try:
        cls = ADAPTERS[api]
    except KeyError:
        raise ValueError(f"unknown provider api {api!r}; known: {sorted(ADAPTERS)}") from None
    return cls(stream=stream)


__all__ = ["ADAPTERS", "ProviderAdapter", "adapter_for", "get_adapter"]

"""Provider adapters, one per wire protocol, behind the neutral `ProviderAdapter` protocol."""

from __future__ import annotations

from shared.providers.anthropic_messages import AnthropicMessagesAdapter
from shared.providers.base import ProviderAdapter
from shared.providers.openai_chat import OpenAIChatAdapter
from shared.providers.openai_responses import OpenAIResponsesAdapter

ADAPTERS: dict[str, type[OpenAIResponsesAdapter | OpenAIChatAdapter | AnthropicMessagesAdapter]] = {
    "openai-responses": OpenAIResponsesAdapter,
    "openai-chat": OpenAIChatAdapter,
    "anthropic-messages": AnthropicMessagesAdapter,
}


def get_adapter(api: str, *, stream: bool = True) -> ProviderAdapter:
    """A new adapter (with its own SDK client, created on first use) for `api`."""
    try:
        cls = ADAPTERS[api]
    except KeyError:
        raise ValueError(f"unknown provider api {api!r}; known: {sorted(ADAPTERS)}") from None
    return cls(stream=stream)


__all__ = ["ADAPTERS", "ProviderAdapter", "get_adapter"]

"""Chat messages and the two ways to get a reply to them: a local model or an HTTP server.

    ChatMessage / SamplingParams / Completion        webrl.chat.messages
    ChatClient (any OpenAI-compatible server)         webrl.chat.client, raises ChatClientError
    LocalChatEngine (transformers, in process)        webrl.chat.local

Policies (`EndpointPolicy`, LOCI roles), judges (`webrl.reward`) and the server (`webrl serve`)
all build on this package; it depends on none of them.
"""
from webrl.chat.client import ERROR_CATEGORIES, ChatClient, ChatClientError, image_data_url, openai_messages
from webrl.chat.local import ChatEngine, LocalChatEngine, PreparedPrompt
from webrl.chat.messages import ROLES, ChatMessage, Completion, Part, SamplingParams

__all__ = ["ERROR_CATEGORIES", "ChatClient", "ChatClientError", "image_data_url", "openai_messages", "ChatEngine",
           "LocalChatEngine", "PreparedPrompt", "ROLES", "ChatMessage", "Completion", "Part", "SamplingParams"]

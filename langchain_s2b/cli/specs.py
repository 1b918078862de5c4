"""``--embedding`` strings: ``provider:model``, checked without importing any model.

``local:e5`` (alias ``e5``) is the offline default, ``fake`` the hashing model
for tests, and ``openai:text-embedding-3-small``, ``ollama:nomic-embed-text``,
``huggingface:sentence-transformers/all-MiniLM-L6-v2`` ... any provider that
``langchain.embeddings.init_embeddings`` knows, from its integration package
(the ``langchain`` package itself is not needed: the table below is its table).
:mod:`langchain_s2b.cli.models` makes the model a string names.
"""

from __future__ import annotations

from langchain_s2b.cli.errors import UserError

DEFAULT = "local:e5"
FAKE = "fake"
ALIASES = {"e5": DEFAULT, "fake:hashing": FAKE}
LOCAL_MODELS = ("e5",)
"""The offline models (``local:<name>``)."""
PROVIDERS: dict[str, tuple[str, str, str]] = {
    "azure_openai": ("langchain_openai", "AzureOpenAIEmbeddings", "model"),
    "bedrock": ("langchain_aws", "BedrockEmbeddings", "model_id"),
    "cohere": ("langchain_cohere", "CohereEmbeddings", "model"),
    "google_vertexai": ("langchain_google_vertexai", "VertexAIEmbeddings", "model"),
    "huggingface": ("langchain_huggingface", "HuggingFaceEmbeddings", "model_name"),
    "mistralai": ("langchain_mistralai", "MistralAIEmbeddings", "model"),
    "ollama": ("langchain_ollama", "OllamaEmbeddings", "model"),
    "openai": ("langchain_openai", "OpenAIEmbeddings", "model"),
}
"""provider -> (module, class, name of its model argument), as ``init_embeddings`` has them."""


def parse_spec(text: str) -> str:
    """The normalised ``provider:model`` string; a one-line ``UserError`` if it is not one."""
    spec = ALIASES.get(text.strip(), text.strip())
    if spec == FAKE:
        return spec
    provider, sep, model = spec.partition(":")
    provider, model = provider.strip().lower(), model.strip()
    allowed = ["local", *PROVIDERS]
    if not sep or not model or provider not in allowed:
        msg = (
            f"--embedding {text!r} is not 'provider:model' with a known provider; use "
            f"{DEFAULT} (the default), {FAKE}, or one of {', '.join(p + ':MODEL' for p in allowed)}"
        )
        raise UserError(msg)
    if provider == "local" and model not in LOCAL_MODELS:
        msg = (
            f"--embedding {text!r}: the offline models are "
            f"{', '.join('local:' + m for m in LOCAL_MODELS)}"
        )
        raise UserError(msg)
    return f"{provider}:{model}"


def parse_chat_spec(text: str, flag: str = "--context-model") -> str:
    """A ``--context-model`` (or ``flag``) string: ``provider:model`` for ``init_chat_model``.

    The providers are ``init_chat_model``'s own (it says which package each
    needs); here only the shape is checked, so that a typo is one line before
    anything is read.
    """
    provider, sep, model = text.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if not sep or not model or not provider.replace("_", "").replace("-", "").isalnum():
        msg = (
            f"{flag} {text!r} is not 'provider:model', e.g. "
            "anthropic:claude-3-5-haiku-latest or openai:gpt-4o-mini (init_chat_model names)"
        )
        raise UserError(msg)
    return f"{provider}:{model}"

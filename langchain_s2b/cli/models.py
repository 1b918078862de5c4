"""``--embedding``: ``provider:model`` strings, as LangChain's ``init_embeddings`` reads them.

``local:e5`` (alias ``e5``) is the offline default, ``fake`` the hashing model
for tests, and ``openai:text-embedding-3-small``, ``ollama:nomic-embed-text``,
``huggingface:sentence-transformers/all-MiniLM-L6-v2`` ... any provider that
``langchain.embeddings.init_embeddings`` knows, from its integration package
(the ``langchain`` package itself is not needed: the table below is its table).
"""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError
from langchain_s2b.embeddings import HashingEmbeddings, LocalE5Embeddings

DEFAULT = "local:e5"
FAKE = "fake"
ALIASES = {"e5": DEFAULT, "fake:hashing": FAKE}
LOCAL = {"e5": LocalE5Embeddings}
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
    if provider == "local" and model not in LOCAL:
        msg = (
            f"--embedding {text!r}: the offline models are {', '.join('local:' + m for m in LOCAL)}"
        )
        raise UserError(msg)
    return f"{provider}:{model}"


def make_embedding(spec: str) -> Embeddings:
    """The embedding model a normalised spec names (its package must be installed)."""
    spec = parse_spec(spec)
    if spec == FAKE:
        return HashingEmbeddings()
    provider, _, model = spec.partition(":")
    if provider == "local":
        return LOCAL[model]()
    module_name, class_name, argument = PROVIDERS[provider]
    try:
        module: Any = importlib.import_module(module_name)
    except ImportError:
        package = module_name.replace("_", "-")
        msg = f"--embedding {spec} needs the package {package}: pip install {package}"
        raise UserError(msg) from None
    try:
        embedding: Embeddings = getattr(module, class_name)(**{argument: model})
    except Exception as err:  # any provider error becomes one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = f"--embedding {spec}: {class_name} could not start: {first}"
        raise UserError(msg) from None
    return embedding

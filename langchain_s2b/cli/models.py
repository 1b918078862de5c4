"""``--embedding``, ``--context-model``, ``--proxy-model``: the models ``provider:model`` names.

The strings are checked in :mod:`.specs`; a chat model is made by LangChain's
``init_chat_model`` (the ``langchain`` package, and the provider's own).
"""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.specs import (
    ALIASES,
    DEFAULT,
    FAKE,
    PROVIDERS,
    parse_chat_spec,
    parse_spec,
)
from langchain_s2b.embeddings import HashingEmbeddings, LocalE5Embeddings

__all__ = [
    "ALIASES",
    "DEFAULT",
    "FAKE",
    "LOCAL",
    "PROVIDERS",
    "make_chat_model",
    "make_embedding",
    "parse_chat_spec",
    "parse_spec",
]

LOCAL = {"e5": LocalE5Embeddings}
"""The offline models by name (the names are ``specs.LOCAL_MODELS``)."""


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


def make_chat_model(spec: str, flag: str = "--context-model") -> BaseChatModel:
    """The chat model ``--context-model provider:model`` names (its package must be installed).

    ``flag``: the option named in an error (``--proxy-model``).
    """
    spec = parse_chat_spec(spec, flag)
    try:
        chat_models: Any = importlib.import_module("langchain.chat_models")
    except ImportError:
        msg = (
            f"{flag} {spec} needs langchain's init_chat_model: pip install "
            f"langchain langchain-{spec.partition(':')[0].replace('_', '-')}"
        )
        raise UserError(msg) from None
    try:
        model: BaseChatModel = chat_models.init_chat_model(spec)
    except ImportError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = f"{flag} {spec} needs the provider's package: {first}"
        raise UserError(msg) from None
    except Exception as err:  # any provider error (an unknown provider, a missing key)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        msg = f"{flag} {spec} could not start: {first}"
        raise UserError(msg) from None
    return model

"""``--embedding``: the model a ``provider:model`` string names (checked in :mod:`.specs`)."""

from __future__ import annotations

import importlib
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.specs import ALIASES, DEFAULT, FAKE, PROVIDERS, parse_spec
from langchain_s2b.embeddings import HashingEmbeddings, LocalE5Embeddings

__all__ = ["ALIASES", "DEFAULT", "FAKE", "LOCAL", "PROVIDERS", "make_embedding", "parse_spec"]

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

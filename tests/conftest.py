"""Shared fixtures: hypothesis profiles, and the real servers that ``.ci/servers.sh start`` runs.

A server's URL comes from the environment or from ``.ci/servers.env``. When a
server is absent its tests are skipped, except under ``CI=true``, where they
fail: CI must never pass by skipping what it was meant to test.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis profiles: "ci" (selected when the CI variable is set, as .ci/run does) runs the
# differential tests 500 times each; "dev" keeps a local run short. Tests that set their own
# max_examples keep it.
settings.register_profile(
    "ci", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)

SERVERS_ENV = Path(__file__).resolve().parents[1] / ".ci" / "servers.env"


def server_url(var: str) -> str | None:
    """``var`` from the environment, else from ``.ci/servers.env``, else ``None``."""
    if os.environ.get(var):
        return os.environ[var]
    if SERVERS_ENV.is_file():
        for line in SERVERS_ENV.read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            if key.strip() == var and value.strip():
                return value.strip()
    return None


def _reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 0), 2):
            return True
    except OSError:
        return False


def require_server(var: str, name: str) -> str:
    """The server's URL; skip (locally) or fail (``CI=true``) when it is not running."""
    url = server_url(var)
    problem = None
    if url is None:
        problem = f"{name} is not configured ({var} unset)"
    elif not _reachable(url):
        problem = f"{name} at {url} does not answer"
    if problem is None:
        assert url is not None
        return url
    msg = f"{problem}; start it with `.ci/servers.sh start`."
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """SQLAlchemy URL of the test PostgreSQL (``postgresql+psycopg://...``)."""
    return require_server("S2B_PG_URL", "PostgreSQL")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """libpq DSN of the test PostgreSQL; ``CREATE EXTENSION vector`` (pgvector) works."""
    return require_server("S2B_PG_DSN", "PostgreSQL")


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the test Redis (``redis://127.0.0.1:<port>/0``)."""
    return require_server("S2B_REDIS_URL", "Redis")

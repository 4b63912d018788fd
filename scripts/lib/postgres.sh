# shellcheck shell=bash
#
# postgres.sh - finds a PostgreSQL server for the tests and the demo, or
# starts a private one, and creates and drops databases on it. Needs
# common.sh and deps.sh.
#
# Discovery, in order:
#   1. a connection string the caller was given (STEWARD_TEST_DATABASE_URL
#      for the tests, STEWARD_DATABASE_URL for the demo);
#   2. a server answering on 127.0.0.1:5432 that lets user postgres (or
#      $PGUSER) in without a password prompt;
#   3. a private cluster: Debian's postgresql binaries, initdb -A trust in a
#      temporary directory, on a free loopback port, stopped at the end.
# STEWARD_TEST_PG_PRIVATE=1 skips step 2, to exercise step 3 on a machine
# that has a server on 5432.

# psql without ~/.psqlrc, quiet, stopping at the first error, and never
# prompting for a password (CI has no terminal; PGPASSWORD or a password in
# the given connection string still work).
pg_psql() {
    psql -X -q -w -v ON_ERROR_STOP=1 "$@"
}

# True when discovery will end in a private cluster (so the caller installs
# the server package first). Needs pg_isready (postgresql-client).
pg_needs_private() {
    local given="$1"
    [[ -z $given ]] || return 1
    [[ ${STEWARD_TEST_PG_PRIVATE:-} == 1 ]] && return 0
    ! pg_isready -q -h 127.0.0.1 -p 5432 -t 3
}

# pg_with_db CONNINFO DB: the same connection string naming database DB.
# Handles both forms libpq takes: a URI (the path is the database) and
# keyword/value (a repeated keyword overrides the earlier one).
pg_with_db() {
    local url="$1" db="$2"
    if [[ $url =~ ^(postgres(ql)?://[^/?]*)(/[^?]*)?(\?.*)?$ ]]; then
        printf '%s/%s%s' "${BASH_REMATCH[1]}" "$db" "${BASH_REMATCH[4]}"
    else
        printf "%s dbname='%s'" "$url" "$db"
    fi
}

# pg_discover GIVEN_URL: sets PG_ADMIN_URL (a connection string to a
# database we may run CREATE/DROP DATABASE from) and prints where it is.
# Never prints the given string itself: it may hold a password.
pg_discover() {
    local given="$1" what
    if [[ -n $given ]]; then
        PG_ADMIN_URL="$given"
        what="the given connection string"
    elif [[ ${STEWARD_TEST_PG_PRIVATE:-} != 1 ]] && pg_isready -q -h 127.0.0.1 -p 5432 -t 3 &&
        pg_psql -At -d "host=127.0.0.1 port=5432 user=${PGUSER:-postgres} dbname=postgres" \
            -c 'SELECT 1' >/dev/null 2>&1; then
        PG_ADMIN_URL="host=127.0.0.1 port=5432 user=${PGUSER:-postgres} dbname=postgres"
        what="127.0.0.1:5432"
    else
        # Nothing on 5432, or a server there that will not let us in
        # (password or peer authentication): a cluster of our own.
        pg_start_private
        what="private cluster on 127.0.0.1:$PG_PRIVATE_PORT"
    fi
    local version
    version="$(pg_psql -At -d "$PG_ADMIN_URL" -c 'SHOW server_version' 2>&1)" ||
        die "postgres: cannot connect to $what: $version"
    say "postgres: using $what (server ${version%% *})"
}

# The newest installed PostgreSQL server's bin directory (Debian keeps
# initdb and pg_ctl off PATH, in /usr/lib/postgresql/VERSION/bin).
pg_bindir() {
    local dir
    dir="$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/initdb' 2>/dev/null |
        sort -V | tail -n 1)"
    if [[ -n $dir ]]; then
        dirname "$dir"
    elif command -v initdb >/dev/null; then
        dirname "$(command -v initdb)"
    else
        die "postgres: no initdb found (is the postgresql package installed?)"
    fi
}

# Starts a throw-away cluster: trust authentication, loopback only, its
# socket in its own directory, durability off (test data only). As root it
# runs as the postgres user (initdb refuses root), so the directory is owned
# by postgres and lives directly under /tmp where that user can reach it.
pg_start_private() {
    install_packages postgresql
    local bindir
    bindir="$(pg_bindir)"
    PG_PRIVATE_DIR="$(mktemp -d /tmp/steward-pg.XXXXXX)"
    at_exit rm -rf "$PG_PRIVATE_DIR"
    PG_AS=()
    if ((EUID == 0)); then
        chown postgres:postgres "$PG_PRIVATE_DIR"
        PG_AS=(runuser -u postgres --)
    fi
    pick_free_port PG_PRIVATE_PORT
    if ! "${PG_AS[@]}" "$bindir/initdb" -D "$PG_PRIVATE_DIR/data" -A trust -U postgres \
        -E UTF8 --no-locale --no-sync >"$PG_PRIVATE_DIR/initdb.log" 2>&1; then
        cat "$PG_PRIVATE_DIR/initdb.log" >&2
        die "postgres: initdb failed"
    fi
    local t0
    t0="$(mark)"
    at_exit pg_stop_private "$bindir"
    if ! "${PG_AS[@]}" "$bindir/pg_ctl" -D "$PG_PRIVATE_DIR/data" -l "$PG_PRIVATE_DIR/server.log" \
        -w -t 60 -o "-c listen_addresses=127.0.0.1 -c port=$PG_PRIVATE_PORT \
-c unix_socket_directories=$PG_PRIVATE_DIR -c fsync=off -c synchronous_commit=off \
-c full_page_writes=off -c max_connections=200" start >/dev/null; then
        cat "$PG_PRIVATE_DIR/server.log" >&2
        die "postgres: private cluster did not start"
    fi
    say "postgres: private cluster started in $(since "$t0") ($PG_PRIVATE_DIR)"
    PG_ADMIN_URL="host=127.0.0.1 port=$PG_PRIVATE_PORT user=postgres dbname=postgres"
}

# Stops the private cluster (fast shutdown: tests are over, sessions are
# cut), falling back to killing its postmaster, which this run started.
pg_stop_private() {
    local bindir="$1" data="$PG_PRIVATE_DIR/data"
    [[ -f $data/postmaster.pid ]] || return 0
    if ! "${PG_AS[@]}" "$bindir/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1; then
        local pid
        pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
        [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
        warn "postgres: private cluster killed"
        return 0
    fi
    say "postgres: private cluster stopped"
}

# pg_create_db ADMIN_URL DB: creates DB (a name we generated: plain
# lower-case letters, digits and underscores).
pg_create_db() {
    pg_psql -d "$1" -v db="$2" <<'SQL'
CREATE DATABASE :"db";
SQL
}

# pg_ensure_db ADMIN_URL DB: creates DB unless it exists.
pg_ensure_db() {
    pg_psql -d "$1" -v db="$2" <<'SQL'
SELECT format('CREATE DATABASE %I', :'db')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL
}

# pg_drop_run_dbs ADMIN_URL DB: drops DB and every database named DB_...
# (the per-suite databases testlib's tl_db_create makes), cutting off any
# session a crashed test left behind. Prints how many it dropped.
pg_drop_run_dbs() {
    local out
    out="$(pg_psql -At -d "$1" -v db="$2" <<'SQL'
SELECT current_setting('server_version_num')::int >= 130000 AS has_force \gset
SELECT count(*) FROM pg_database
 WHERE datname = :'db' OR left(datname, length(:'db') + 1) = :'db' || '_';
\if :has_force
SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', datname) FROM pg_database
 WHERE datname = :'db' OR left(datname, length(:'db') + 1) = :'db' || '_' \gexec
\else
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = :'db' OR left(datname, length(:'db') + 1) = :'db' || '_';
SELECT format('DROP DATABASE IF EXISTS %I', datname) FROM pg_database
 WHERE datname = :'db' OR left(datname, length(:'db') + 1) = :'db' || '_' \gexec
\endif
SQL
)" || {
        warn "postgres: could not drop $2 and its suite databases"
        return 1
    }
    say "postgres: dropped $2 and its suite databases (${out%%$'\n'*} in all)"
}

# shellcheck shell=bash
#
# deps.sh - installs the Debian packages a script needs, and only those that
# are missing, so a second run (or a developer's machine that has them all)
# never touches apt. Needs common.sh.

# What building Steward needs (compiler, CMake, and the -dev packages that
# CMakeLists.txt finds with pkg-config).
STEWARD_BUILD_PACKAGES=(build-essential cmake pkg-config librdkafka-dev libpq-dev
    libjansson-dev check libcurl4-openssl-dev libmicrohttpd-dev libsystemd-dev libavro-dev)

# The alerting tests' Alertmanager (scripts/lib/alertmanager.sh), and the
# curl its readiness check uses.
STEWARD_ALERTMANAGER_PACKAGES=(prometheus-alertmanager curl)

# The JSON Schema validator unit.schema (tests/schema_check.sh) judges the
# definition schema with.
STEWARD_SCHEMA_PACKAGES=(python3-jsonschema)

# The model checker unit.model (tests/model_check.sh) runs the ownership
# protocol's model through.
STEWARD_MODEL_PACKAGES=(spin)

# The package, image and manifest checks (integration.package,
# integration.image, unit.kubernetes): debootstrap for the Debian root,
# dpkg-shlibdeps (dpkg-dev) for the package's dependencies, umoci to commit
# the image, podman and runc to start it (crun, podman's default, cannot
# start a container where the cgroup v2 hierarchy has controllers beside
# v1's, as on this kind of machine), kcat to feed it events, curl for its
# probes.
STEWARD_DEPLOY_PACKAGES=(debootstrap dpkg-dev umoci podman runc kcat curl)

STEWARD_APT_UPDATED=0

# True when dpkg knows the package as fully installed ("deinstall" or
# "config-files" states, which dpkg -s also reports, do not count).
pkg_installed() {
    dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

# install_packages PKG...: installs those of PKG that are missing, running
# `apt-get update` once per script run first (a fresh machine's package
# lists may be empty or stale).
install_packages() {
    local missing=() p
    for p in "$@"; do
        pkg_installed "$p" || missing+=("$p")
    done
    ((${#missing[@]} > 0)) || return 0

    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "missing packages (${missing[*]}) and not root: install them"
        sudo=(sudo)
    fi
    say "deps: installing ${missing[*]}"
    if ((STEWARD_APT_UPDATED == 0)); then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        STEWARD_APT_UPDATED=1
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# need_command CMD PKG: installs PKG unless CMD is already on PATH (for tools
# such as psql that several packages provide).
need_command() {
    command -v "$1" >/dev/null 2>&1 || install_packages "$2"
}

# The Java major version of `java` on PATH (or JAVA_HOME), 0 when none.
java_major() {
    local java="${JAVA_HOME:+$JAVA_HOME/bin/}java" v
    command -v "$java" >/dev/null 2>&1 || {
        echo 0
        return
    }
    v="$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n 1)"
    echo "${v:-0}"
}

# Kafka 4.x brokers need Java 17 or newer; Debian 12's default JRE is 17.
need_java17() {
    if (($(java_major) < 17)); then
        install_packages default-jre-headless
        (($(java_major) >= 17)) || die "Kafka 4 needs Java 17+; java on PATH is $(java_major)"
    fi
}

install_build_deps() {
    install_packages "${STEWARD_BUILD_PACKAGES[@]}"
}

# A Python 3 that can import jsonschema (any: a developer's own will do),
# else the Debian package.
install_schema_deps() {
    python3 -c 'import jsonschema' >/dev/null 2>&1 ||
        /usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1 ||
        install_packages "${STEWARD_SCHEMA_PACKAGES[@]}"
    # Graphviz's dot, which unit.graph_docs feeds `steward graph`'s DOT to.
    need_command dot graphviz
    # spin, so that unit.model never skips in a full run.
    need_command spin "${STEWARD_MODEL_PACKAGES[@]}"
}

# What the deploy checks need: the packages above, and the manifests'
# validator, installed by npm from tests/kubernetes/package-lock.json into
# tests/kubernetes/node_modules, again only when the lock file changed
# (unit.kubernetes fails without it). The kubectl that renders the overlays
# comes from there too, pinned: Debian's kubernetes-client is too old for
# them.
install_deploy_deps() {
    install_packages "${STEWARD_DEPLOY_PACKAGES[@]}"
    # unit.install runs `systemd-analyze verify` on the installed unit.
    need_command systemd-analyze systemd
    need_command python3 python3
    need_command node nodejs
    need_command npm npm
    local dir="$STEWARD_ROOT/tests/kubernetes" sum
    sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
    if [[ $(cat "$dir/node_modules/.steward-lock" 2>/dev/null) != "$sum" ]]; then
        say "deps: npm ci in tests/kubernetes (the manifests' validator)"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
            die "npm ci in tests/kubernetes failed"
        echo "$sum" >"$dir/node_modules/.steward-lock"
    fi
}

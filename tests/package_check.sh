#!/bin/bash
# package_check.sh SOURCE_DIR - the Debian package (scripts/package) installs
# with apt into a fresh Debian root (an overlay over scripts/debian-root's
# cached one, in namespaces of its own) and works there: its dependencies,
# computed by dpkg-shlibdeps, are enough for both binaries to load; the
# steward system user and /etc/steward are made; `steward --help` and
# `steward check` on the installed examples run, as root and as steward;
# every file is where docs/operations.md says; a purge leaves no file but
# the user.
#
# Exit 77 (skipped) only when no Debian root can be built here (not root,
# no debootstrap, no mirror), with the reason; any other failure fails.
set -euo pipefail
src=$1

log_dir=$(mktemp -d "${TMPDIR:-/tmp}/package_check.XXXXXX")
trap 'rm -rf "$log_dir"' EXIT
t0=$SECONDS

if ! root=$("$src/scripts/debian-root" 2>"$log_dir/root.log" | tail -n 1) || [[ ! -d $root ]]; then
    echo "package_check: SKIPPED: no Debian root can be built here:"
    sed 's/^/  /' "$log_dir/root.log"
    exit 77
fi
echo "package_check: Debian root $root ($(cat "$root/.steward-root"))"

deb=$("$src/scripts/package" | tail -n 1)
echo "package_check: $deb"
# The dependencies dpkg-shlibdeps computed: one per library the binaries
# link, and adduser for the maintainer scripts.
depends=$(dpkg-deb -f "$deb" Depends)
names=$(tr ',' '\n' <<<"$depends" | awk '{print $1}')
for lib in libc6 libpq5 librdkafka1 libjansson4 libcurl4 libmicrohttpd12 libsystemd0 libavro23 adduser; do
    grep -qx "$lib" <<<"$names" || {
        echo "package_check: Depends lacks $lib: $depends" >&2
        exit 1
    }
done
cp "$deb" "$log_dir/steward.deb"

# Runs on the host side of the fresh root ($DEBROOT), in its namespaces.
cat >"$log_dir/in-root.sh" <<'EOS'
set -euo pipefail
in_root() { chroot "$DEBROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
fail() { echo "package_check: $*" >&2; exit 1; }

in_root dpkg -s steward >/dev/null 2>&1 && fail "the fresh root already holds steward"
cp "$1" "$DEBROOT/tmp/steward.deb"
in_root apt-get install -y -q /tmp/steward.deb >"$2/apt.log" 2>&1 || {
    cat "$2/apt.log" >&2
    fail "apt-get install of the package failed (above)"
}
grep -E '^(Setting up|Unpacking) ' "$2/apt.log" | sed 's/^/  /' | head -n 40

# Both binaries load with what apt brought: no library is missing.
for bin in /usr/bin/steward /usr/bin/steward-sim; do
    if in_root ldd "$bin" | grep 'not found'; then fail "$bin: a library is missing"; fi
done

for f in /usr/bin/steward /usr/bin/steward-sim /usr/lib/systemd/system/steward.service \
    /usr/share/man/man1/steward.1 /usr/share/man/man1/steward-sim.1 \
    /usr/share/steward/schema/steward-definition.schema.json \
    /usr/share/steward/monitoring/steward-rules.yml \
    /usr/share/steward/monitoring/steward-dashboard.json; do
    [[ -s $DEBROOT$f ]] || fail "$f not installed"
done
ls "$DEBROOT"/usr/share/steward/examples/*.json >/dev/null
grep -qx 'ExecStart=/usr/bin/steward run --config /etc/steward/steward.json' \
    "$DEBROOT/usr/lib/systemd/system/steward.service" || fail "the unit does not run /usr/bin/steward"

# The system user the maintainer script made, and its configuration folder.
entry=$(in_root getent passwd steward) || fail "no steward user"
IFS=: read -r _ _ uid gid _ home shell <<<"$entry"
((uid > 0 && uid < 1000)) || fail "steward is not a system user: $entry"
[[ $shell == /usr/sbin/nologin && $home == /nonexistent ]] || fail "steward can log in: $entry"
in_root getent group steward >/dev/null || fail "no steward group"
[[ $(in_root stat -c '%U:%G %a' /etc/steward) == "root:steward 750" ]] ||
    fail "/etc/steward is $(in_root stat -c '%U:%G %a' /etc/steward), not root:steward 750"
echo "package_check: user $entry"

in_root steward --help >"$2/help.txt" || fail "steward --help failed"
grep -q '^usage: steward ' "$2/help.txt" || fail "steward --help printed no usage"
in_root steward version
in_root steward check /usr/share/steward/examples || fail "steward check refused the installed examples"
chroot --userspec="$uid:$gid" --groups="$gid" "$DEBROOT" /usr/bin/env -i PATH=/usr/bin:/bin \
    steward check /usr/share/steward/examples/order_fulfilment.json ||
    fail "steward check failed as the steward user"

# A purge removes every file of the package and the empty /etc/steward; the
# user stays, as Debian keeps system users.
in_root apt-get purge -y -q steward >"$2/purge.log" 2>&1 || {
    cat "$2/purge.log" >&2
    fail "apt-get purge steward failed"
}
for f in /usr/bin/steward /usr/lib/systemd/system/steward.service /usr/share/steward /etc/steward; do
    [[ ! -e $DEBROOT$f ]] || fail "$f is left after a purge"
done
in_root getent passwd steward >/dev/null || fail "the purge removed the steward user"
EOS

cache=$(dirname "$root")/archives
mkdir -p "$cache/partial"
# apt's downloads are kept beside the cached root, so a second run fetches
# nothing; the root itself is only read (held shared against a refresh).
flock -s "$(dirname "$root")/.lock" "$src/scripts/lib/debroot-enter" \
    --bind "$cache:/var/cache/apt/archives" "$root" "$log_dir/fresh" -- \
    bash "$log_dir/in-root.sh" "$log_dir/steward.deb" "$log_dir"
echo "package_check: installed, ran and purged in a fresh Debian root in $((SECONDS - t0))s"

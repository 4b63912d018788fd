# shellcheck shell=bash
#
# debroot.sh - a minimal Debian root of the host's release, built once by
# debootstrap from Debian's packages and kept under .cache/debian-root/, for
# the package test and the image (scripts/debian-root, scripts/image). What
# runs in it runs in a fresh root over the cached one (scripts/lib/debroot-enter):
# the cache itself is never changed but by debroot_build. Needs common.sh
# and deps.sh.

DEBROOT_CACHE="$STEWARD_ROOT/.cache/debian-root"
# The package lists of the cached root are refreshed (apt-get update and
# upgrade) when older than this: a week-old list may name packages the
# mirror has replaced.
DEBROOT_MAX_AGE_DAYS=7

# The host's release (bookworm): the package's dependencies are computed
# against the host's libraries, so it installs on that release.
debroot_release() {
    # shellcheck disable=SC1091
    (. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")
}

# Where the main archive is: $STEWARD_DEBIAN_MIRROR, else the host's own
# (the first deb URI of its sources that is not the security archive).
debroot_mirror() {
    if [[ -n ${STEWARD_DEBIAN_MIRROR:-} ]]; then
        printf '%s' "$STEWARD_DEBIAN_MIRROR"
        return
    fi
    local uri
    uri=$(cat /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null |
        sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' \
            -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}\([^[:space:]]*\).*/\2/p' |
        grep -v -e security -e '^$' | grep -m 1 '/debian/\{0,1\}$' || true)
    printf '%s' "${uri:-http://deb.debian.org/debian}"
}

debroot_path() {
    printf '%s/%s-%s' "$DEBROOT_CACHE" "$(debroot_release)" "$(dpkg --print-architecture)"
}

# Prints why no root can be built here, or nothing when one can be.
debroot_why_not() {
    if ((EUID != 0)); then
        echo "not root: debootstrap, chroot and the mounts of a fresh root need root"
        return
    fi
    if [[ -z $(debroot_release) ]]; then
        echo "/etc/os-release names no VERSION_CODENAME: not a Debian release debootstrap knows"
        return
    fi
    local out
    if ! out=$(unshare --mount --propagation private true 2>&1); then
        echo "unshare --mount fails here: $out"
        return
    fi
}

# Runs CMD... in ROOT as root with a clean environment (apt's and dpkg's
# needs only), in a mount namespace of its own with /proc and /dev; the
# network is the host's (apt reaches the mirror).
debroot_chroot() {
    local root=$1
    shift
    "$STEWARD_ROOT/scripts/lib/debroot-enter" --chroot "$root" -- "$@"
}

# Builds the cached root unless it is there; refreshes its package lists
# when older than DEBROOT_MAX_AGE_DAYS. Safe against a second run at once (a
# lock; fresh roots over the cache take it shared). On failure prints the
# reason on stderr and returns 1, leaving no half-built root behind.
debroot_build() {
    local why
    why=$(debroot_why_not)
    if [[ -n $why ]]; then
        warn "debian-root: $why"
        return 1
    fi
    need_command debootstrap debootstrap || {
        warn "debian-root: debootstrap is not installed and could not be installed"
        return 1
    }
    local dir release mirror
    dir=$(debroot_path)
    release=$(debroot_release)
    mirror=$(debroot_mirror)
    mkdir -p "$DEBROOT_CACHE/archives/partial"
    (
        flock 9
        if [[ -f $dir/.steward-root ]]; then
            if [[ -n $(find "$dir/.steward-root" -mtime -"$DEBROOT_MAX_AGE_DAYS") ]]; then
                exit 0
            fi
            say "debian-root: refreshing the package lists of ${dir#"$STEWARD_ROOT"/}"
            # A mirror that cannot be reached now leaves the root as it was,
            # still usable (apt's downloads are kept beside it), and the
            # refresh is tried again next time.
            if debroot_chroot "$dir" sh -c 'apt-get update -q && apt-get -y -q dist-upgrade && apt-get clean' \
                >"$DEBROOT_CACHE/refresh.log" 2>&1; then
                date -u +%FT%TZ >"$dir/.steward-root"
            else
                tail -n 5 "$DEBROOT_CACHE/refresh.log" >&2
                warn "debian-root: refreshing the cached root failed (above); using it as it is"
            fi
            exit 0
        fi
        say "debian-root: debootstrap --variant=minbase $release from $mirror into ${dir#"$STEWARD_ROOT"/}"
        local t0=$SECONDS
        rm -rf "$dir.new"
        if ! debootstrap --variant=minbase --components=main "$release" "$dir.new" "$mirror" \
            >"$DEBROOT_CACHE/debootstrap.log" 2>&1; then
            tail -n 20 "$DEBROOT_CACHE/debootstrap.log" >&2
            rm -rf "$dir.new"
            warn "debian-root: debootstrap $release from $mirror failed (above; all of it in ${DEBROOT_CACHE#"$STEWARD_ROOT"/}/debootstrap.log)"
            exit 1
        fi
        # A Debian system's sources: the release, its updates and its
        # security archive, so what is installed in it is current.
        {
            echo "deb $mirror $release main"
            echo "deb $mirror $release-updates main"
            case $mirror in
            */debian | */debian/) echo "deb ${mirror%/}-security $release-security main" ;;
            esac
        } >"$dir.new/etc/apt/sources.list"
        # No recommends: a root holds what is asked for and what it depends on.
        printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
            >"$dir.new/etc/apt/apt.conf.d/90steward-no-recommends"
        if ! debroot_chroot "$dir.new" sh -c 'apt-get update -q && apt-get -y -q dist-upgrade && apt-get clean' \
            >"$DEBROOT_CACHE/update.log" 2>&1; then
            tail -n 20 "$DEBROOT_CACHE/update.log" >&2
            rm -rf "$dir.new"
            warn "debian-root: apt-get update/upgrade in the new root failed (above)"
            exit 1
        fi
        date -u +%FT%TZ >"$dir.new/.steward-root"
        rm -rf "$dir"
        mv "$dir.new" "$dir"
        say "debian-root: built in $((SECONDS - t0))s ($(du -sh "$dir" | cut -f1))"
    ) 9>"$DEBROOT_CACHE/.lock"
}

#!/bin/sh
# Builds the agent's image (vswitch-cni:0.1.0, the name k8s/base/vswitch.yaml uses) from this
# checkout's Dockerfile with buildah, without a registry, and imports it into the node's containerd.
#
# Usage: tests/k8s_tier/build-image.sh
# Needs buildah and ctr; with BASE_ROOTFS also podman, and debootstrap while BASE_ROOTFS holds no
# root yet. Checked before anything is built, as are the containerd sockets.
# Env:
#   BASE_ROOTFS       a Debian bookworm root, imported as the Dockerfile's base in place of
#                     debian:bookworm-slim, for machines that cannot pull it; a directory without
#                     one is made one first (`debootstrap --variant=minbase bookworm`, from
#                     DEBIAN_MIRROR when set) and kept for the next build; unset: the FROM image
#                     is pulled as usual
#   BUILD_CA_BUNDLE   a CA bundle pip must trust during the build (a TLS-intercepting proxy; pip
#                     then fails with "No matching distribution found for setuptools>=68", and
#                     this script says to set it); mounted for the build only, never in the image
#   CONTAINERD_SOCKET the node's containerd socket (default /run/containerd/containerd.sock);
#                     several, separated by spaces, for several nodes (node-join.sh)
set -eu
cd "$(dirname "$0")/../.."
IMAGE=docker.io/library/vswitch-cni:0.1.0
SOCKETS=${CONTAINERD_SOCKET:-/run/containerd/containerd.sock}

# A build takes minutes: whatever it will lack is said before it starts.
fail() { echo "build-image.sh: $*" >&2; exit 1; }
need() {  # command, what it is for
    command -v "$1" >/dev/null 2>&1 || fail "$1 is missing: $2"
}
need buildah "it builds the image from the Dockerfile (Debian: apt-get install buildah)"
need ctr "it imports the image into the nodes' containerd (it comes with containerd)"
if [ -n "${BASE_ROOTFS:-}" ]; then
    need podman "it imports BASE_ROOTFS as the base image (Debian: apt-get install podman)"
    [ -e "$BASE_ROOTFS/etc/debian_version" ] || need debootstrap \
        "BASE_ROOTFS ($BASE_ROOTFS) holds no Debian root yet (Debian: apt-get install debootstrap)"
fi
[ -z "${BUILD_CA_BUNDLE:-}" ] || [ -f "$BUILD_CA_BUNDLE" ] ||
    fail "BUILD_CA_BUNDLE ($BUILD_CA_BUNDLE) is not a file"
for socket in $SOCKETS; do
    [ -S "$socket" ] || fail "no containerd at $socket (CONTAINERD_SOCKET: node-up.sh and" \
        "node-join.sh print theirs)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

set --
if [ -n "${BASE_ROOTFS:-}" ]; then
    if [ ! -e "$BASE_ROOTFS/etc/debian_version" ]; then
        debootstrap --variant=minbase bookworm "$BASE_ROOTFS" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"}
    fi
    # Without the apt archives debootstrap leaves behind: the slim image has none either.
    tar -C "$BASE_ROOTFS" --exclude=./var/cache/apt/archives -c . \
        | podman import - localhost/vswitch-base:bookworm >/dev/null
    set -- --from localhost/vswitch-base:bookworm
fi
if [ -n "${BUILD_CA_BUNDLE:-}" ]; then
    printf '[global]\ncert = /run/build-ca.pem\n' >"$work/pip.conf"
    set -- "$@" -v "$work/pip.conf:/etc/pip.conf:ro" -v "$BUILD_CA_BUNDLE:/run/build-ca.pem:ro"
fi
# Logged as well as shown: pip's last line hides a TLS failure, its earlier ones name it.
{
    status=0
    buildah bud --isolation chroot --network host "$@" -t "$IMAGE" -f Dockerfile . 2>&1 ||
        status=$?
    echo "$status" >"$work/status"
} | tee "$work/build.log"
status=$(cat "$work/status")
if [ "$status" -ne 0 ]; then
    if grep -q -e CERTIFICATE_VERIFY_FAILED -e SSLError -e 'confirming the ssl certificate' \
        "$work/build.log"; then
        if [ -z "${BUILD_CA_BUNDLE:-}" ]; then
            echo "build-image.sh: pip could not reach the package index over TLS (its" \
                "certificate is not trusted: a TLS-intercepting proxy?): set BUILD_CA_BUNDLE" \
                "to a CA bundle that trusts it (e.g. the machine's own) and run again" >&2
        else
            echo "build-image.sh: pip could not reach the package index over TLS even with" \
                "BUILD_CA_BUNDLE ($BUILD_CA_BUNDLE): that bundle lacks the CA the index's" \
                "certificate chains to" >&2
        fi
    fi
    exit "$status"
fi
buildah push "$IMAGE" "docker-archive:$work/image.tar:$IMAGE"
for socket in $SOCKETS; do
    ctr -a "$socket" -n k8s.io images import "$work/image.tar"
    echo "imported $IMAGE into $socket"
done

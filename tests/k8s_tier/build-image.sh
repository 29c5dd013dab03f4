#!/bin/sh
# Builds the agent's image (vswitch-cni:0.1.0, the name k8s/base/vswitch.yaml uses) from this
# checkout's Dockerfile with buildah, without a registry, and imports it into the node's containerd.
#
# Usage: tests/k8s_tier/build-image.sh
# Env:
#   BASE_ROOTFS       a Debian bookworm root (e.g. `debootstrap --variant=minbase bookworm DIR`),
#                     imported as the Dockerfile's base in place of debian:bookworm-slim, for
#                     machines that cannot pull it; unset: the FROM image is pulled as usual
#   BUILD_CA_BUNDLE   a CA bundle pip must trust during the build (a TLS-intercepting proxy);
#                     mounted for the build only, never part of the image
#   CONTAINERD_SOCKET the node's containerd socket (default /run/containerd/containerd.sock);
#                     several, separated by spaces, for several nodes (node-join.sh)
set -eu
cd "$(dirname "$0")/../.."
IMAGE=docker.io/library/vswitch-cni:0.1.0
SOCKETS=${CONTAINERD_SOCKET:-/run/containerd/containerd.sock}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

set --
if [ -n "${BASE_ROOTFS:-}" ]; then
    # Without the apt archives debootstrap leaves behind: the slim image has none either.
    tar -C "$BASE_ROOTFS" --exclude=./var/cache/apt/archives -c . \
        | podman import - localhost/vswitch-base:bookworm >/dev/null
    set -- --from localhost/vswitch-base:bookworm
fi
if [ -n "${BUILD_CA_BUNDLE:-}" ]; then
    printf '[global]\ncert = /run/build-ca.pem\n' >"$work/pip.conf"
    set -- "$@" -v "$work/pip.conf:/etc/pip.conf:ro" -v "$BUILD_CA_BUNDLE:/run/build-ca.pem:ro"
fi
buildah bud --isolation chroot --network host "$@" -t "$IMAGE" -f Dockerfile .
buildah push "$IMAGE" "docker-archive:$work/image.tar:$IMAGE"
for socket in $SOCKETS; do
    ctr -a "$socket" -n k8s.io images import "$work/image.tar"
    echo "imported $IMAGE into $socket"
done

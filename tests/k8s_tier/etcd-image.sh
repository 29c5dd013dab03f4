#!/bin/bash
# Builds an etcd image for k8s/base/etcd.yaml from an etcd binary of this machine (Debian's
# etcd-server, for one), for machines that cannot pull the manifest's image: the binary, and the
# shared libraries and loader `ldd` names for it (Debian's etcd is not static), nothing else.
# Writes it as a docker archive, to import into the nodes' containerd like the other images
# (docs/k8s-tier.md, "Running it"), and prints the VSWITCH_TEST_K8S_ETCD_IMAGE that names it.
#
# Usage: tests/k8s_tier/etcd-image.sh ARCHIVE        e.g. etcd.tar
# Env: ETCD (the binary; default: etcd on PATH), IMAGE (localhost/vswitch-test/etcd:<its version>)
# Needs buildah and ldd.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 ARCHIVE" >&2
    exit 2
fi
ARCHIVE=$1
fail() { echo "etcd-image.sh: $*" >&2; exit 1; }
command -v buildah >/dev/null || fail "buildah is missing (Debian: apt-get install buildah)"
ETCD=${ETCD:-$(command -v etcd || true)}
if [ -z "$ETCD" ] || [ ! -x "$ETCD" ]; then
    fail "no etcd binary: set ETCD, or install one (Debian: apt-get install etcd-server)"
fi
version=$("$ETCD" --version | awk '/^etcd Version:/ {print $3}')
[ -n "$version" ] || fail "$ETCD --version names no etcd version"
IMAGE=${IMAGE:-localhost/vswitch-test/etcd:$version}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

root=$work/root
# The manifest runs `etcd` by name: it is found on the image's PATH.
install -D -m 0755 "$ETCD" "$root/usr/local/bin/etcd"
# Every path ldd names, at the same path in the image (the loader's is fixed in the binary);
# a static binary has none.
libs=$(ldd "$ETCD" 2>/dev/null | grep -o '/[^ ]*') || true
for lib in $libs; do
    cp -L --parents "$lib" "$root"
done
# Missing pieces show here rather than as a crash-looping etcd pod.
chroot "$root" /usr/local/bin/etcd --version >/dev/null ||
    fail "etcd does not start in the image's root (libraries: ${libs:-none})"

c=$(buildah from scratch)
buildah copy "$c" "$root" / >/dev/null
buildah config --env PATH=/usr/local/bin:/usr/bin:/bin --cmd '["etcd"]' "$c"
buildah commit --rm "$c" "$IMAGE" >/dev/null
rm -f "$ARCHIVE"  # buildah does not overwrite an archive
buildah push "$IMAGE" "docker-archive:$ARCHIVE:$IMAGE"
echo "export VSWITCH_TEST_K8S_ETCD_IMAGE=$IMAGE"

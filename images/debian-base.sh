#!/usr/bin/env bash
# Make the images' Python base from Debian's packages, for machines that reach Debian's mirror
# but no container registry (so `python:3.11.13-slim-bookworm` cannot be pulled).
#
#   images/debian-base.sh ENGINE IMAGE
#
# ENGINE is docker, podman or buildah; IMAGE the name to give the base. Needs root (debootstrap
# creates device nodes and files owned by other users) and debootstrap (apt-get install debootstrap).
# The result is Debian bookworm (minbase) with its security updates, python3 (3.11), python3-venv
# and python3-pip, a `python` link and no EXTERNALLY-MANAGED marker: what the Dockerfiles expect of
# the official python image. About a minute and 110 MB compressed.
set -euo pipefail

engine="${1:?usage: debian-base.sh ENGINE IMAGE}"
image="${2:?usage: debian-base.sh ENGINE IMAGE}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
suite=bookworm

if [[ "$(id -u)" != 0 ]]; then
  echo "debian-base.sh: building the base from Debian's packages needs root (debootstrap)." >&2
  echo "  run as root, or pull/provide a python:3.11 bookworm image and pass --base IMAGE" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "debian-base.sh: debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/var/tmp}/vsbench-base.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

echo "[base] debootstrap $suite (minbase) from $mirror"
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  "$suite" "$rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; echo "debian-base.sh: debootstrap failed (log above)" >&2; exit 1; }

echo "[base] security and point-release updates"
cat > "$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  sh -c 'apt-get update -qq && apt-get upgrade -y -qq > /dev/null && apt-get clean' \
  || { echo "debian-base.sh: apt-get upgrade inside the new root failed" >&2; exit 1; }

# What the official python image gives and the Dockerfiles rely on.
rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
ln -sf python3 "$rootfs/usr/bin/python"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/log/*.log \
  "$rootfs"/var/cache/debconf/*-old "$rootfs"/tmp/* "$rootfs"/root/.cache

echo "[base] import as $image"
changes=(--change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]')
case "$engine" in
  docker|podman)
    tar -C "$rootfs" --numeric-owner -c . | "$engine" import "${changes[@]}" - "$image" > /dev/null ;;
  buildah)
    container="$(buildah from scratch)"
    mountpoint="$(buildah mount "$container")"
    tar -C "$rootfs" --numeric-owner -c . | tar -C "$mountpoint" --numeric-owner -x
    buildah umount "$container" > /dev/null
    buildah config --env LANG=C.UTF-8 --cmd python3 "$container"
    buildah commit --quiet "$container" "$image" > /dev/null
    buildah rm "$container" > /dev/null ;;
  *) echo "debian-base.sh: unknown engine $engine" >&2; exit 2 ;;
esac
echo "[base] $image: $(chroot "$rootfs" python3 --version)"

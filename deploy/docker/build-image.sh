#!/usr/bin/env bash
# Builds the `raftlock:local` image FROM scratch out of a root filesystem made here:
# the raftlock binary, the shared libraries ldd reports for it, and minimal /etc files.
#   deploy/docker/build-image.sh [path/to/raftlock] [tag]
set -euo pipefail
root_dir="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${1:-$root_dir/target/release/raftlock}"
tag="${2:-raftlock:local}"
if [ ! -x "$bin" ]; then
    (cd "$root_dir" && cargo build --release --bin raftlock)
fi
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
rootfs="$context/rootfs"
mkdir -p "$rootfs" "$context/data"
chmod 0755 "$context" "$rootfs"
install -D -m 0755 "$bin" "$rootfs/usr/local/bin/raftlock"
# Every shared library the binary needs, at the path the dynamic loader expects.
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u | while read -r lib; do
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done
mkdir -p "$rootfs/etc" "$rootfs/tmp"
echo 'hosts: files dns' > "$rootfs/etc/nsswitch.conf"
echo 'raftlock:x:65532:65532::/data:/usr/local/bin/raftlock' > "$rootfs/etc/passwd"
echo 'raftlock:x:65532:' > "$rootfs/etc/group"
touch "$context/data/.keep"
chmod 1777 "$rootfs/tmp"
docker build -q -t "$tag" -f "$root_dir/deploy/docker/Dockerfile" "$context"
echo "built $tag"

#!/usr/bin/env bash
# Builds the FROM-scratch Garage image (deploy/garage/Dockerfile) around an installed `garage`
# binary and the shared libraries it links, with nothing pulled and nothing compiled.
#
#   deploy/build-garage-image.sh [TAG [BINARY]]   image tagged TAG (default snug-garage:dev) and
#                                                 snug-garage:<content tag>, from BINARY (default
#                                                 $SNUG_TEST_GARAGE, else the one .ci/run installs)
#   deploy/build-garage-image.sh --context DIR [BINARY]
#                                                 the build context in DIR (no docker); prints the
#                                                 content tag
#
# The binary is the one `cargo install garage` made for the tests (.ci/run): dynamically linked
# against glibc, so the image carries the libraries and the loader `ldd` lists, at their paths.
# A static rebuild would be a second half-hour compile of Garage in every cold CI run for a few
# MiB less image; deploy/README.md has the comparison. The content tag (`ctx-` + 16 hex digits)
# is a digest of every file of the context: an image with that tag is exactly this binary and
# these files, so a test reuses it when it exists.
set -euo pipefail
cd "$(dirname "$0")/.."

context_only=""
tag="snug-garage:dev"
case "${1:-}" in
  --context)
    context_only="${2:?usage: deploy/build-garage-image.sh --context DIR [BINARY]}"
    shift 2
    ;;
  -h | --help)
    sed -n '2,11p' "$0"
    exit 0
    ;;
  "") ;;
  *)
    tag="$1"
    shift
    ;;
esac
binary="${1:-${SNUG_TEST_GARAGE:-/var/tmp/snug-hub-tools/bin/garage}}"
[ -x "$binary" ] || { echo "build-garage-image: no garage binary at $binary (.ci/run installs one)" >&2; exit 1; }

if [ -n "$context_only" ]; then
  rm -rf "$context_only"
  mkdir -p "$context_only"
  context="$(cd "$context_only" && pwd)"
else
  context="$(mktemp -d)"
  trap 'rm -rf "$context"' EXIT
fi
rootfs="$context/rootfs"
mkdir -p "$rootfs/etc"
strip -o "$rootfs/garage" "$binary"
# Every library `ldd` resolves (`name => /path (addr)`) and the loader (`/path (addr)`), copied
# to the same path (symlinks resolved); the kernel's vDSO has no file.
if file -L "$binary" | grep -q 'dynamically linked'; then
  ldd "$binary" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u |
    while read -r lib; do
      mkdir -p "$rootfs$(dirname "$lib")"
      cp -L "$lib" "$rootfs$lib"
    done
  [ -n "$(find "$rootfs" -name 'ld-linux*')" ] || { echo "build-garage-image: ldd listed no loader" >&2; exit 1; }
fi
cp deploy/garage/Dockerfile "$context/Dockerfile"
cp deploy/garage/garage.toml "$rootfs/etc/garage.toml"
# glibc resolves names through these (its files and dns modules are built into libc.so.6).
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$rootfs/etc/hosts"
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/garage\nnonroot:x:65532:65532:nonroot:/var/lib/garage:/garage\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
rm -rf "$context/data"
mkdir "$context/data"

# sha256sum's listing of every regular file by path, sorted, digested again.
content_tag="ctx-$(cd "$context" && LC_ALL=C find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"

if [ -n "$context_only" ]; then
  echo "$content_tag"
  exit 0
fi
docker build --pull=false -t "$tag" -t "snug-garage:$content_tag" "$context" >&2
echo "built $tag (snug-garage:$content_tag)"

#!/usr/bin/env bash
# Builds the static snug-hub binary and the FROM-scratch image around it, with nothing pulled.
#
#   deploy/build-image.sh [TAG]        (default tag: snug-hub:dev)
#
# Works on a fresh machine of this kind: the Debian Rust toolchain's glibc links statically with
# crt-static, and `FROM scratch` needs no base image.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-snug-hub:dev}"
target=x86_64-unknown-linux-gnu
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target}"

# --target keeps RUSTFLAGS away from build scripts and proc-macros.
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --locked --target "$target" -p snug-hub
binary="$CARGO_TARGET_DIR/$target/release/snug-hub"
if ! file "$binary" | grep -q 'static'; then
  echo "build-image: $binary is not statically linked" >&2
  exit 1
fi

context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/snug-hub"
strip "$context/snug-hub" 2>/dev/null || true
cp deploy/Dockerfile "$context/Dockerfile"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$context/hosts"
printf 'hosts: files dns\n' > "$context/nsswitch.conf"
printf 'root:x:0:0:root:/:/snug-hub\nnonroot:x:65532:65532:nonroot:/data:/snug-hub\n' > "$context/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$context/group"
docker build --pull=false -t "$tag" "$context"
echo "built $tag"

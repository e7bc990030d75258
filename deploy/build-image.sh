#!/usr/bin/env bash
# Builds the static snug-hub binary and the FROM-scratch image around it, with nothing pulled.
#
#   deploy/build-image.sh [TAG]          binary + image, tagged TAG (default snug-hub:dev) and
#                                        snug-hub:<content tag>
#   deploy/build-image.sh --context DIR  binary + the image's build context in DIR (no docker);
#                                        prints the content tag (snug-testcontainers builds from it)
#
# The content tag (`ctx-` + 16 hex digits) is a digest of every file of the build context, the
# Dockerfile and the stripped binary included: an image with that tag is exactly this source, so
# a test suite reuses it when it exists and builds it when it does not (or is stale).
#
# Works on a fresh machine of this kind: the Debian Rust toolchain's glibc links statically with
# crt-static, and `FROM scratch` needs no base image. The release build has a target directory of
# its own (SNUG_STATIC_TARGET_DIR): it takes minutes on two cores, and in a shared target
# directory it would hold the lock every debug build and test run waits on.
set -euo pipefail
cd "$(dirname "$0")/.."

context_only=""
tag="snug-hub:dev"
case "${1:-}" in
  --context)
    context_only="${2:?usage: deploy/build-image.sh --context DIR}"
    ;;
  -h | --help)
    sed -n '2,9p' "$0"
    exit 0
    ;;
  "") ;;
  *) tag="$1" ;;
esac

if [ -z "${SNUG_STATIC_TARGET_DIR:-}" ]; then
  if mkdir -p /work/target-static 2>/dev/null && [ -w /work/target-static ]; then
    SNUG_STATIC_TARGET_DIR=/work/target-static
  else
    SNUG_STATIC_TARGET_DIR=/var/tmp/snug-hub-target-static
  fi
fi
target=x86_64-unknown-linux-gnu

# --target keeps RUSTFLAGS away from build scripts and proc-macros. Progress goes to stderr, so
# --context's stdout is the tag alone.
CARGO_TARGET_DIR="$SNUG_STATIC_TARGET_DIR" RUSTFLAGS='-C target-feature=+crt-static' \
  cargo build --release --locked --target "$target" -p snug-hub >&2
binary="$SNUG_STATIC_TARGET_DIR/$target/release/snug-hub"
if ! file "$binary" | grep -q 'static'; then
  echo "build-image: $binary is not statically linked" >&2
  exit 1
fi

if [ -n "$context_only" ]; then
  mkdir -p "$context_only"
  context="$(cd "$context_only" && pwd)"
else
  context="$(mktemp -d)"
  trap 'rm -rf "$context"' EXIT
fi
cp "$binary" "$context/snug-hub"
strip "$context/snug-hub"
cp deploy/Dockerfile "$context/Dockerfile"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$context/hosts"
printf 'hosts: files dns\n' > "$context/nsswitch.conf"
printf 'root:x:0:0:root:/:/snug-hub\nnonroot:x:65532:65532:nonroot:/data:/snug-hub\n' > "$context/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$context/group"
# The build machine's CA bundle (Debian's ca-certificates). The S3 client's certificate verifier
# (rustls-platform-verifier, through reqwest) loads the system roots when the client is built and
# refuses to build without any, even for an http:// endpoint; an https:// bucket or collector
# signed by a public CA needs them anyway. AWS_CA_BUNDLE, sslrootcert and
# OTEL_EXPORTER_OTLP_CERTIFICATE add a private CA on top.
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca_bundle" ] || { echo "build-image: no $ca_bundle (apt-get install ca-certificates)" >&2; exit 1; }
cp "$ca_bundle" "$context/ca-certificates.crt"
# The mount point of the /data volume: a new volume copies its owner (65532) from here, so the
# non-root process can write its data without a chown at start (a scratch image has no shell).
rm -rf "$context/data"
mkdir "$context/data"

# sha256sum's own listing of the regular files, sorted by name, digested again; the Rust side
# (snug-testcontainers) only reads this tag and never recomputes it.
content_tag="ctx-$(cd "$context" && LC_ALL=C find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort \
  | xargs sha256sum | sha256sum | cut -c1-16)"

if [ -n "$context_only" ]; then
  echo "$content_tag"
  exit 0
fi
docker build --pull=false -t "$tag" -t "snug-hub:$content_tag" "$context"
echo "built $tag (snug-hub:$content_tag)"

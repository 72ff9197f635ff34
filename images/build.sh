#!/usr/bin/env bash
# Build (and optionally push) the vsbench container images.
#
# The image names and the tag are read from vsbench.runtime.images (CPU_IMAGE, GPU_IMAGE), the one place
# that names them, so the images built here are exactly the ones the compiled pipelines and the
# k8s manifests refer to. Set VSBENCH_IMAGE_REGISTRY to build for (and push to) your registry.
#
#   images/build.sh                  build both images      (what `make images` runs)
#   images/build.sh --only cpu       just one of them (cpu | cuda)
#   images/build.sh --push           build, push, and write the digests the registry returned into
#                                    k8s/components/images (the prod overlay and training use them)
#   images/build.sh --base debian    build on a Python base made from Debian's packages
#   images/build.sh --torch pypi     the CPU image's torch from PyPI (see images/README.md)
#   images/build.sh --dry-run        print the commands instead of running them
#   images/build.sh --print          print the two image names and exit
#   images/build.sh --lock           re-resolve images/constraints.txt, then the hashed lock-*.txt
#                                    (needs PyPI, no engine)
#   images/build.sh --lock-hashes    only the hashed lock-*.txt, for the pins constraints.txt holds
#
# --base auto (default): the pinned python image when it is present or can be pulled, else one
#   made from Debian's packages (images/debian-base.sh); pull: the pinned image only; debian: the
#   Debian-made one; any other value: that image.
# --torch auto (default): PyTorch's CPU index when it answers, else PyPI; cpu-index; pypi.
#
# Engine: DOCKER=docker|podman|buildah, else docker when its daemon answers, else podman, else
# buildah. With none, root on Debian/Ubuntu gets podman and buildah installed from the
# distribution's packages; anyone else is told which packages to install.
# Environment: PYTHON (default: the repository's .venv/bin/python if present, else python3),
# PLATFORM (default: linux/amd64), VSBENCH_IMAGE_REGISTRY (default in src/vsbench/runtime/images.py),
# PIP_CERT (a CA bundle pip inside the build needs; default: the host pip's `cert` setting),
# VSBENCH_BUILD_LOGS (default: build/images, one full log per image, and digests.txt after a push),
# VSBENCH_IMAGES_COMPONENT (default: k8s/components/images/kustomization.yaml, what --push rewrites).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLATFORM="${PLATFORM:-linux/amd64}"
PINNED_BASE="python:3.11.13-slim-bookworm"   # the Dockerfiles' ARG PYTHON_IMAGE default
DEBIAN_BASE="localhost/vsbench-debian-python:bookworm"
TORCH_INDEX_URL="https://download.pytorch.org/whl/cpu"
ENGINE_PACKAGES="podman buildah uidmap runc debootstrap"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

usage() { sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "build.sh: $*" >&2; exit 1; }

push=0 dry_run=0 print_only=0 lock=0 only=all base=auto torch=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    --push) push=1 ;;
    --dry-run) dry_run=1 ;;
    --print) print_only=1 ;;
    --lock) lock=1 ;;
    --lock-hashes) lock=2 ;;
    --only) shift; only="${1:-}" ;;
    --only=*) only="${1#--only=}" ;;
    --base) shift; base="${1:-}" ;;
    --base=*) base="${1#--base=}" ;;
    --torch) shift; torch="${1:-}" ;;
    --torch=*) torch="${1#--torch=}" ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
case "$only" in all|cpu|cuda) ;; *) echo "build.sh: --only takes cpu or cuda, not '$only'" >&2; exit 2 ;; esac
case "$torch" in auto|cpu-index|pypi) ;; *) echo "build.sh: --torch takes auto, cpu-index or pypi, not '$torch'" >&2; exit 2 ;; esac
[[ -n "$base" ]] || { echo "build.sh: --base needs a value" >&2; exit 2; }

# The names come from the package (src/ first on the path, so a bare python3 works too).
names="$(PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -c \
  'from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE, TAG; print(CPU_IMAGE, GPU_IMAGE, TAG)')"
read -r CPU_IMAGE GPU_IMAGE TAG <<<"$names"

if [[ $print_only == 1 ]]; then
  printf '%s\n%s\n' "$CPU_IMAGE" "$GPU_IMAGE"
  exit 0
fi

# pip inside the build trusts the same CA bundle as pip here (networks that inspect TLS need it);
# it is handed over as a build secret, so it never lands in a layer.
pip_cert() {
  local cert="${PIP_CERT:-}"
  if [[ -z "$cert" ]]; then cert="$("$PYTHON" -m pip config get global.cert 2>/dev/null || true)"; fi
  if [[ -n "$cert" && -s "$cert" ]]; then echo "$cert"; fi
}

if [[ $lock != 0 ]]; then
  # Resolve against the index the image builds use (PyPI; VSBENCH_LOCK_INDEX_URL to use a mirror of
  # it), never this machine's pip configuration (local wheel folders or extra indexes would put
  # their files' hashes in the locks). Linux x86_64 / CPython 3.11 only, as in the images.
  "$PYTHON" -c 'import platform, sys; sys.exit(not (sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info[:2] == (3, 11)))' \
    || die "--lock resolves for the images' Linux x86_64 CPython 3.11: run it on such a machine"
  report="$(mktemp)"
  trap 'rm -f "$report"' EXIT
  lock_cert="$(pip_cert)"
  lock_pip() {  # lock_pip <pip install arguments...>: a dry-run resolution reported to $report
    env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_NO_INDEX -u PIP_CONSTRAINT -u PIP_REQUIRE_HASHES \
      PIP_CONFIG_FILE=/dev/null PIP_INDEX_URL="${VSBENCH_LOCK_INDEX_URL:-https://pypi.org/simple}" \
      ${lock_cert:+PIP_CERT="$lock_cert"} \
      "$PYTHON" -m pip install --dry-run --ignore-installed --quiet --report "$report" "$@"
  }

  # 1. constraints.txt: the union of both images' requirements, every resolved version except
  #    the torch builds that differ per image. The development environment installs with it too.
  extra="$(grep -E '^(faiss-cpu|psycopg2-binary)==' "$ROOT/images/requirements-cpu.txt")"
  # shellcheck disable=SC2086
  if [[ $lock == 1 ]]; then lock_pip -r "$ROOT/images/requirements-cuda.txt" $extra; fi
  [[ $lock == 2 ]] || "$PYTHON" - "$report" "$ROOT/images/constraints.txt" <<'EOF'
import json, re, sys
report, out = sys.argv[1:]
pins = {}
for item in json.load(open(report))["install"]:
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    if name not in ("torch", "torchvision"):
        pins[name] = item["metadata"]["version"]
header = (
    "# Transitive pins for both images (Linux x86_64, CPython 3.11), used as `pip install -c`.\n"
    "# Generated by `images/build.sh --lock` from requirements-cuda.txt plus the CPU image's\n"
    "# faiss-cpu and psycopg2-binary; torch and torchvision are pinned in torch-*.txt instead.\n"
    "# Do not edit by hand: change a requirements-*.txt file and re-run --lock.\n"
)
with open(out, "w") as fh:
    fh.write(header + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
print(f"wrote {len(pins)} pins to {out}")
EOF

  # 2. lock-*.txt: what each image installs, every file's sha256 as the index served it. The
  #    Dockerfiles install with --require-hashes and these as constraints, so a file that differs
  #    from the one locked here (or a package missing from the lock) fails the build.
  write_lock() {  # write_lock <lock file> <what it is for and how pip takes it>
    "$PYTHON" - "$report" "$ROOT/images/$1" "$2" <<'EOF'
import json, re, sys
try:
    from packaging.tags import compatible_tags, cpython_tags
    from packaging.utils import parse_wheel_filename
except ImportError:  # a bare python3: pip's own copy
    from pip._vendor.packaging.tags import compatible_tags, cpython_tags
    from pip._vendor.packaging.utils import parse_wheel_filename
report, out, purpose = sys.argv[1:]
# What pip in the images accepts: CPython 3.11 on Debian bookworm (glibc 2.36), x86_64.
platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
supported = {*cpython_tags((3, 11), abis=["cp311", "abi3", "none"], platforms=platforms),
             *compatible_tags((3, 11), "cp311", platforms)}
lines, sdists = [], []
for item in sorted(json.load(open(report))["install"], key=lambda i: i["metadata"]["name"].lower()):
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    info = item["download_info"]
    url, hashes = info["url"], info.get("archive_info", {}).get("hashes", {})
    filename = url.rsplit("/", 1)[-1].split("#", 1)[0]
    if not url.startswith("https://") or "sha256" not in hashes:
        sys.exit(f"build.sh: {name} resolved to {url} with no sha256: the locks take files from an index only")
    if filename.endswith(".whl"):
        if not supported & set(parse_wheel_filename(filename)[3]):
            sys.exit(f"build.sh: {filename} does not install in the images (CPython 3.11, glibc 2.36, "
                     "x86_64); run --lock on Debian bookworm or older")
    else:
        sdists.append(name)
    lines.append(f"{name}=={item['metadata']['version']} --hash=sha256:{hashes['sha256']}  # {filename}\n")
header = (
    f"# Hashed pins for {purpose}.\n"
    "# Every package, with the sha256 of the one file the image installs (Linux x86_64, CPython 3.11,\n"
    "# glibc 2.36). Generated by `images/build.sh --lock` from the requirements files and\n"
    "# constraints.txt; do not edit by hand. pip installs with --require-hashes: a file that differs\n"
    "# from the one locked here, or a package missing from it, fails the build.\n"
)
if sdists:
    header += (f"# Built from source in the image with --no-build-isolation (the locked setuptools, no\n"
               f"# unpinned build dependencies): {', '.join(sdists)}.\n")
with open(out, "w") as fh:
    fh.write(header + "".join(lines))
print(f"wrote {len(lines)} hashed pins to {out}")
EOF
  }
  lock_pip -r "$ROOT/images/requirements-tools.txt" -c "$ROOT/images/constraints.txt"
  write_lock lock-tools.txt "the build tools of both Dockerfiles (requirements-tools.txt), installed with -r"
  lock_pip -r "$ROOT/images/requirements-cpu.txt" -r "$ROOT/images/torch-pypi.txt" -c "$ROOT/images/constraints.txt"
  write_lock lock-cpu-pypi.txt "Dockerfile.cpu with TORCH=pypi, passed as constraints (-c)"
  lock_pip -r "$ROOT/images/requirements-cuda.txt" -c "$ROOT/images/constraints.txt"
  write_lock lock-cuda.txt "Dockerfile.cuda, passed as constraints (-c)"
  if "$PYTHON" - "$TORCH_INDEX_URL/" <<'EOF' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).read(1)
EOF
    lock_pip --extra-index-url "$TORCH_INDEX_URL" -r "$ROOT/images/requirements-cpu.txt" \
      -r "$ROOT/images/torch-cpu-index.txt" -c "$ROOT/images/constraints.txt"
    write_lock lock-cpu-cpu-index.txt "Dockerfile.cpu with TORCH=cpu-index, passed as constraints (-c)"
  else
    # A stale lock would pin other versions than constraints.txt: write one that locks nothing, which
    # build.sh and the Dockerfile refuse with this explanation.
    cat > "$ROOT/images/lock-cpu-cpu-index.txt" <<EOF
# Hashed pins for Dockerfile.cpu with TORCH=cpu-index: NONE. $TORCH_INDEX_URL
# did not answer when \`images/build.sh --lock\` last ran, so no hashes could be taken from it. This
# variant cannot be built until --lock runs where it answers; --torch auto takes pypi meanwhile.
EOF
    echo "build.sh: $TORCH_INDEX_URL does not answer: images/lock-cpu-cpu-index.txt locks nothing" >&2
  fi
  exit 0
fi

run() {
  printf '+'; printf ' %q' "$@"; printf '\n'
  if [[ $dry_run == 0 ]]; then "$@"; fi
}

# ---- the engine -----------------------------------------------------------------------------
install_engine() {
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    die "no container engine found (docker with a running daemon, podman or buildah).
  Install podman and buildah, e.g. on Debian/Ubuntu: sudo apt-get install $ENGINE_PACKAGES"
  fi
  echo "build.sh: no container engine; installing $ENGINE_PACKAGES from the distribution's packages" >&2
  apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $ENGINE_PACKAGES > /dev/null \
    || die "could not install $ENGINE_PACKAGES with apt-get (see above)"
}

pick_engine() {
  if [[ -n "${DOCKER:-}" ]]; then
    command -v "$DOCKER" >/dev/null || [[ $dry_run == 1 ]] || die "DOCKER=$DOCKER is not on PATH"
    echo "$DOCKER"; return
  fi
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; return; fi
  if command -v podman >/dev/null; then echo podman; return; fi
  if command -v buildah >/dev/null; then echo buildah; return; fi
  if [[ $dry_run == 1 ]]; then echo docker; return; fi
  install_engine
  echo podman
}

ENGINE="$(pick_engine)"
ENGINE_NAME="$(basename "$ENGINE")"
if [[ "$ENGINE_NAME" != docker && -z "${CONTAINERS_CONF:-}" ]]; then
  export CONTAINERS_CONF="$ROOT/images/podman/containers.conf"   # see the comments in that file
fi

image_exists() {
  case "$ENGINE_NAME" in
    buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
    *) "$ENGINE" image inspect "$1" >/dev/null 2>&1 ;;
  esac
}

# ---- the base and torch ---------------------------------------------------------------------
resolve_base() {
  case "$base" in
    pull)
      if [[ $dry_run == 0 ]] && ! image_exists "$PINNED_BASE"; then
        "$ENGINE" pull "$PINNED_BASE" >&2 || die "could not pull $PINNED_BASE; try --base debian"
      fi
      echo "$PINNED_BASE" ;;
    debian)
      if [[ $dry_run == 1 ]]; then echo "$DEBIAN_BASE"; return; fi
      if ! image_exists "$DEBIAN_BASE"; then
        command -v debootstrap >/dev/null || install_engine
        bash "$ROOT/images/debian-base.sh" "$ENGINE_NAME" "$DEBIAN_BASE" >&2
      fi
      echo "$DEBIAN_BASE" ;;
    auto)
      if [[ $dry_run == 1 ]] || image_exists "$PINNED_BASE"; then echo "$PINNED_BASE"; return; fi
      if timeout 60 "$ENGINE" pull "$PINNED_BASE" >/dev/null 2>&1; then echo "$PINNED_BASE"; return; fi
      echo "build.sh: $PINNED_BASE cannot be pulled here; building on a base from Debian's packages" >&2
      base=debian; resolve_base ;;
    *) echo "$base" ;;
  esac
}

# Each variant installs from its hashed lock; one that locks nothing (PyTorch's index did not
# answer when --lock ran) cannot be built.
locked() { grep -q -- '--hash=sha256:' "$ROOT/images/lock-cpu-$1.txt" 2>/dev/null; }
resolve_torch() {
  if [[ "$torch" != auto ]]; then
    locked "$torch" || die "images/lock-cpu-$torch.txt locks nothing (see its first lines): run images/build.sh --lock where $TORCH_INDEX_URL answers, or use --torch pypi"
    echo "$torch"; return
  fi
  if ! locked cpu-index; then
    echo "build.sh: images/lock-cpu-cpu-index.txt locks nothing; the CPU image takes PyPI's torch (a CUDA build, ~5 GB more)" >&2
    echo pypi; return
  fi
  if [[ $dry_run == 1 ]]; then echo cpu-index; return; fi
  if "$PYTHON" - "$TORCH_INDEX_URL/" <<'EOF' 2>/dev/null; then echo cpu-index; else
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=10).read(1)
EOF
    echo "build.sh: $TORCH_INDEX_URL does not answer; the CPU image takes PyPI's torch (a CUDA build, ~5 GB more)" >&2
    echo pypi
  fi
}

BASE_IMAGE="$(resolve_base)"
cert="$(pip_cert)"
secret=()
if [[ -n "$cert" ]]; then secret=(--secret "id=pip-cert,src=$cert"); fi

LOG_DIR="${VSBENCH_BUILD_LOGS:-$ROOT/build/images}"
build() {  # build <Dockerfile> <image> [build args...]
  local dockerfile="$1" image="$2"; shift 2
  local command=()
  case "$ENGINE_NAME" in
    docker) command=("$ENGINE" build --platform "$PLATFORM") ;;
    podman) command=("$ENGINE" build --platform "$PLATFORM" --format docker --layers
                     --ignorefile "$ROOT/images/$dockerfile.dockerignore") ;;
    buildah) command=("$ENGINE" bud --platform "$PLATFORM" --format docker --layers --isolation chroot
                      --ignorefile "$ROOT/images/$dockerfile.dockerignore") ;;
    *) command=("$ENGINE" build --platform "$PLATFORM") ;;
  esac
  command+=(--file "$ROOT/images/$dockerfile" --build-arg "VSBENCH_VERSION=$TAG"
            --build-arg "VSBENCH_IMAGE=$image" --build-arg "PYTHON_IMAGE=$BASE_IMAGE" "$@" "${secret[@]}"
            --tag "$image" "$ROOT")
  if [[ $dry_run == 1 ]]; then run "${command[@]}"; return; fi
  mkdir -p "$LOG_DIR"
  local log="$LOG_DIR/${dockerfile#Dockerfile.}.log" started=$SECONDS
  printf '+'; printf ' %q' "${command[@]}"; printf '\n'
  if ! "${command[@]}" 2>&1 | tee "$log"; then
    # Name the stage and the instruction that failed (podman/buildah: "[2/3] STEP 7/9: RUN ...";
    # BuildKit: "#12 [venv 5/7] RUN ...").
    local step
    step="$(grep -E '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+: |^#[0-9]+ \[[^]]+\] ' "$log" | tail -1 | cut -c1-240)"
    die "building $image from images/$dockerfile failed at: ${step:-(no step line; see the log)}
  full log: $log"
  fi
  echo "build.sh: built $image in $((SECONDS - started)) s (log: $log)"
}

if [[ $only == all || $only == cpu ]]; then
  TORCH_VARIANT="$(resolve_torch)"  # an assignment, so that a refusal stops the script
  build Dockerfile.cpu "$CPU_IMAGE" --build-arg "TORCH=$TORCH_VARIANT"
fi
if [[ $only == all || $only == cuda ]]; then build Dockerfile.cuda "$GPU_IMAGE"; fi

# ---- push, and the digests the registry returned ----------------------------------------------
# A tag can be moved; a digest names one manifest. The k8s images component (used by the prod
# overlay and the training jobs) is rewritten to name each pushed image by its digest: review it
# and commit it with the release.
COMPONENT="${VSBENCH_IMAGES_COMPONENT:-$ROOT/k8s/components/images/kustomization.yaml}"
declare -A DIGESTS=()
push_image() {  # push_image <image>: push it and record the manifest digest the registry stores
  local image="$1" repository="${1%:*}" digest_file digest
  digest_file="$LOG_DIR/$(basename "$repository").digest"
  if [[ $dry_run == 0 ]]; then mkdir -p "$LOG_DIR"; rm -f "$digest_file"; fi
  case "$ENGINE_NAME" in
    podman|buildah) run "$ENGINE" push --digestfile "$digest_file" "$image" ;;
    *) run "$ENGINE" push "$image"
       if [[ $dry_run == 0 ]]; then
         "$ENGINE" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" \
           | awk -F@ -v r="$repository" '$1 == r { print $2; exit }' > "$digest_file"
       fi ;;
  esac
  [[ $dry_run == 0 ]] || return 0
  digest="$(tr -d '[:space:]' < "$digest_file" 2>/dev/null || true)"
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "pushed $image, but $ENGINE_NAME reported no digest ('$digest')"
  DIGESTS[$repository]="$digest"
  echo "build.sh: pushed $image as $repository@$digest"
}

if [[ $push == 1 ]]; then
  if [[ $only == all || $only == cpu ]]; then push_image "$CPU_IMAGE"; fi
  if [[ $only == all || $only == cuda ]]; then push_image "$GPU_IMAGE"; fi
  if [[ $dry_run == 1 ]]; then
    echo "build.sh: would write the pushed digests to $LOG_DIR/digests.txt and $COMPONENT"
    exit 0
  fi
  for repository in "${!DIGESTS[@]}"; do echo "$repository@${DIGESTS[$repository]}"; done | sort > "$LOG_DIR/digests.txt"
  # Each pushed image's entry becomes newName (the registry pushed to) + digest; the others stay.
  "$PYTHON" - "$COMPONENT" "$LOG_DIR/digests.txt" <<'EOF'
import re, sys
component, digests = sys.argv[1:]
pushed = {}
for line in open(digests).read().split():
    repository, digest = line.rsplit("@", 1)
    pushed[repository.rsplit("/", 1)[1]] = (repository, digest)
text = open(component).read()
header, found, body = text.partition("\nimages:\n")
if not found:
    sys.exit(f"build.sh: {component} has no images: list to update")
keys = re.compile(r"^[ -]*(name|newName|newTag|digest):\s*\"?([^\"\s]+)\"?\s*$")
entries = []
for line in body.splitlines():
    match = keys.match(line)
    if match and match.group(1) == "name":
        entries.append({})
    if match and entries:
        entries[-1][match.group(1)] = match.group(2)
for entry in entries:
    base = entry["name"].rsplit("/", 1)[1]
    if base in pushed:
        repository, digest = pushed.pop(base)
        entry.pop("newTag", None)
        entry.update(newName=repository, digest=digest)
if pushed:
    sys.exit(f"build.sh: {component} has no entry for {sorted(pushed)}; add one named as in k8s/base")
lines = [header, "images:"]
for entry in entries:
    lines.append(f"  - name: {entry['name']}")
    lines += [f"    {key}: " + (f'"{entry[key]}"' if key == "newTag" else entry[key])
              for key in ("newName", "newTag", "digest") if key in entry]
with open(component, "w") as fh:
    fh.write("\n".join(lines) + "\n")
print(f"build.sh: {component} names the pushed images by digest; review it and commit it with the release")
EOF
fi

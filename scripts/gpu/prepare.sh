#!/usr/bin/env bash
# Before a GPU window, on this machine, from the checkout root (docs/gpu.md):
#
#   scripts/gpu/prepare.sh [--python-version X.Y] [--wandb] [--nanogpt DIR]
#
# Puts what the GPU machine lacks and cannot fetch (it reaches no network, and only the
# checkout travels) into two ignored folders of the checkout:
#   .whl/       the wheels of scripts/gpu/wheels.txt (pydantic and what it needs), for CPython
#               X.Y (default 3.12, the machine's) on manylinux x86-64, with every dependency
#               pip resolves that the image lacks (scripts/gpu/image-packages.txt); --wandb adds
#               scripts/gpu/wheels-wandb.txt (~21 MB). Earlier wheels in .whl/ are removed:
#               two versions of one package would stop the install there.
#   .gpu-data/  tinyshakespeare/input.txt, from $ABLATE_DATA_DIR, else ../shared/data
#   .nanogpt/   with --nanogpt DIR: a checkout of karpathy/nanoGPT (its files, no .git and no
#               out-* folders; never committed), for window.sh to run nanoGPT's own GPU config
#               beside the reference study (python -m ablate.bench.nanogpt_own --gpu)
#   .gpu-git/   head.bundle: the whole history of the checkout's HEAD (git bundle), from which
#               window.sh makes the device's git HEAD this one: the device's .git can be an
#               older snapshot than the working tree it gets (or missing), and then `ablate run
#               confirm` refuses registrations committed since and runs record the old commit
# checks that they and the rest of the working tree fit the device's 64 MiB, and prints the
# `carry` line and the command to run there. Uncommitted changes are warned of: the device
# gets them, but HEAD does not hold them (runs record git_dirty for ablate's code; a study file
# or registration not committed makes its confirmation refuse).
#
# Environment: PYTHON [.venv/bin/python, else python3] the pip that downloads (pip's own
# PIP_* variables apply: PIP_NO_INDEX and PIP_FIND_LINKS make it offline); PLATFORMS [the
# manylinux x86-64 tags below] the platform tags asked for, split on spaces.
set -uo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "prepare.sh: $*" >&2; exit 2; }

PYV=3.12
REQS=(scripts/gpu/wheels.txt)
NANOGPT=
while [ $# -gt 0 ]; do
    case $1 in
        --python-version)
            [ $# -ge 2 ] || die "--python-version needs X.Y"
            PYV=$2
            shift 2
            ;;
        --wandb) REQS+=(scripts/gpu/wheels-wandb.txt) && shift ;;
        --nanogpt)
            [ $# -ge 2 ] && [ -f "$2/train.py" ] || die "--nanogpt needs a nanoGPT checkout (DIR/train.py)"
            NANOGPT=$(cd "$2" && pwd)
            shift 2
            ;;
        -h | --help) usage ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
[[ $PYV =~ ^3\.[0-9]+$ ]] || die "--python-version must be 3.X, got '$PYV'"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 2
if [ -z "${PYTHON:-}" ]; then
    PYTHON=python3
    [ -x .venv/bin/python ] && PYTHON=.venv/bin/python
fi
PLATFORMS=${PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64}
DATA=${ABLATE_DATA_DIR:-$ROOT/../shared/data}
DATASET=tinyshakespeare/input.txt # every shipped study reads it
MiB=$((1024 * 1024))

log() { echo "[prepare] $*"; }
# a PyPI project name as pip compares them: lower case, runs of -_. as one -
normal() { tr '[:upper:]' '[:lower:]' | sed -E 's/[-_.]+/-/g'; }
# the project names in requirement files, normalised
requested() { sed -E 's/#.*//; s/[ ;<>=!~\[].*//' "$@" | grep -v '^$' | normal; }

download_wheels() {
    local stage args=() p r w name keep have
    stage=$(mktemp -d) || return 1
    for p in $PLATFORMS; do args+=(--platform "$p"); done
    for r in "${REQS[@]}"; do args+=(-r "$r"); done
    log "pip download for CPython $PYV (${PLATFORMS}): ${REQS[*]}"
    "$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: \
        --python-version "$PYV" --implementation cp -d "$stage" "${args[@]}" ||
        { rm -rf "$stage"; return 1; }
    keep=$(requested "${REQS[@]}")
    have=$(requested scripts/gpu/image-packages.txt)
    mkdir -p .whl && rm -f .whl/*.whl
    for w in "$stage"/*.whl; do
        name=$(basename "$w" | cut -d- -f1 | normal)
        if grep -qxF "$name" <<< "$keep" || ! grep -qxF "$name" <<< "$have"; then
            cp "$w" .whl/
        else
            log "not carried (the image has it): $(basename "$w")"
        fi
    done
    rm -rf "$stage"
    log ".whl: $(cd .whl && ls -- *.whl | tr '\n' ' ')"
}

copy_data() {
    [ -f "$DATA/$DATASET" ] || { log "no $DATA/$DATASET (set ABLATE_DATA_DIR)"; return 1; }
    mkdir -p ".gpu-data/$(dirname "$DATASET")" && cp "$DATA/$DATASET" ".gpu-data/$DATASET" ||
        return 1
    log ".gpu-data: $DATASET from $DATA"
}

copy_nanogpt() {
    rm -rf .nanogpt
    [ -n "$NANOGPT" ] || return 0
    mkdir -p .nanogpt && tar -C "$NANOGPT" --exclude=.git --exclude='out-*' -cf - . |
        tar -C .nanogpt -xf - || return 1
    # its own .git only: a folder inside another checkout would give that one's commit
    local commit=unknown
    [ -e "$NANOGPT/.git" ] && commit=$(git -C "$NANOGPT" rev-parse HEAD 2> /dev/null || echo unknown)
    echo "$commit" > .nanogpt/COMMIT
    log ".nanogpt: $NANOGPT (commit $commit)"
}

# .gpu-git/head.bundle: HEAD with all its history (window.sh points the device's git at it)
bundle_head() {
    rm -rf .gpu-git
    if ! git rev-parse --verify -q HEAD > /dev/null 2>&1; then
        log "no git commit here: no .gpu-git (the device's git stays as it is)"
        return 0
    fi
    mkdir -p .gpu-git && git bundle create -q .gpu-git/head.bundle HEAD || return 1
    log ".gpu-git: head.bundle, HEAD $(git log --oneline -1 | cut -c1-72)" \
        "($(($(wc -c < .gpu-git/head.bundle) / 1024)) KiB)"
    local changed
    changed=$(git status --porcelain --untracked-files=normal | wc -l)
    [ "$changed" = 0 ] ||
        log "warning: $changed uncommitted changes (git status): the device gets them but" \
            "HEAD does not hold them: runs record git_dirty when ablate's code is among them," \
            "and a confirmation refuses a study file or registration not committed"
}

# bytes of what a device call sends: the files git shows (tracked, untracked not ignored) and
# the carried folders; outside a git checkout the carried folders alone
tree_bytes() {
    {
        if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
            git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- \
                2> /dev/null
        fi
        find .whl .gpu-data $CARRY_NANOGPT $CARRY_GIT -type f -printf '%s\n'
    } | awk '{t += $1} END {print t + 0}'
}

download_wheels || { log "cannot download the wheels (above)"; exit 1; }
copy_data || exit 1
copy_nanogpt || { log "cannot copy $NANOGPT"; exit 1; }
bundle_head || { log "cannot write .gpu-git/head.bundle"; exit 1; }
CARRY_NANOGPT='' CARRY_GIT=''
[ -n "$NANOGPT" ] && CARRY_NANOGPT=.nanogpt
[ -f .gpu-git/head.bundle ] && CARRY_GIT=.gpu-git
CARRIED=".whl .gpu-data${CARRY_NANOGPT:+ $CARRY_NANOGPT}${CARRY_GIT:+ $CARRY_GIT}"
total=$(tree_bytes)
log "the working tree with $CARRIED: $((total / 1024)) KiB (the device takes 64 MiB)"
[ "$total" -lt $((64 * MiB)) ] || { log "over 64 MiB: the device would refuse it"; exit 1; }
echo "carry: $CARRIED"
echo "command (a device run with timeout_s 600): scripts/gpu/window.sh \"\$OUT\" 540"

#!/usr/bin/env bash
# One GPU window: everything one command on a lent GPU machine does (docs/gpu.md). Run it from
# the checkout root there, with the machine's python3, after scripts/gpu/prepare.sh here:
#
#   scripts/gpu/window.sh OUT [SECONDS]
#
#   OUT      the device's output folder: gets at most 8 files, all directly in it: stores.tgz
#            (every study's store without checkpoints, W&B files, leases or temporary files:
#            commit it as it is as reports/gpu/stores/stores.tgz), window.log, status.txt
#            (`ablate status` of the studies), what the probe writes (probe.md, probe.json)
#            and, with a carried nanoGPT, nanogpt_own_next.json and nanogpt.log
#   SECONDS  the whole command's wall-clock budget (default 540, inside the device's 600 s).
#            The studies get what the install and the probe leave, less GRACE + FINISH: at
#            their deadline `ablate run` gets SIGINT, as from Ctrl-C (each run in flight saves
#            a checkpoint at its step and stops), and is killed GRACE seconds later
#
# Steps: the checkout's git HEAD made the commit of the carried .gpu-git/head.bundle
# (prepare.sh), the working tree's files left as they are: the machine's .git can be an older
# snapshot than the files it gets (or missing), and ablate would then refuse confirmations
# committed since and record the old commit; the carried wheels (.whl/) installed into SITE
# without a venv or an index; every import a run needs checked (exit 3 listing what is missing);
# the archives committed under reports/gpu/stores/ restored into STORE (files already there are
# kept: a warm machine's newer state is never rolled back); `ablate bench --probe`, whose
# verdicts set the studies' `ablate run` arguments in this same command (its verdict, solo, pack
# or stack, for a study whose profile leaves train.stack at its default; its unstacked verdict,
# solo or pack, for one whose profile pins train.stack, as the reference's gpu profile pins 1);
# nanoGPT's own GPU config beside the studies when a nanoGPT checkout is carried (NANOGPT); then
# each study in order: with `run confirm` when its registration for PROFILE exists (the
# registered seeds), else exploratory.
#
# Environment (defaults in brackets):
#   STUDIES          [studies/reference_nanogpt_cpu.yaml: tier 1] the study YAMLs, in order
#   PROFILE          [gpu] the study profile; empty: the study's default
#   PYTHON           [python3] the machine's Python, whose torch the runs use
#   ABLATE_ARGS      extra `ablate run` arguments, split on spaces; set, they replace the
#                    probe's verdicts (e.g. "--workers 4 --runs-per-gpu 4")
#   PROBE            [1] 0: no probe (and no verdict: ABLATE_ARGS alone)
#   PROBE_SECONDS    [180] the probe's own limit, given to it as --seconds too (cut, it
#                    leaves the verdicts of the rows it finished; a failing probe is logged and
#                    the studies run solo). Its plan takes ~161 s, ~177 s with the pack it runs
#                    if time is left (docs/gpu.md)
#   TORCHINDUCTOR_CACHE_DIR [.gpu-cache/inductor] inductor's compiled kernels (FX graph and
#                    autograd caches on): the probe's compiles are reused by the studies after
#                    it and by later commands on one warm machine; never archived
#   NANOGPT          [.nanogpt] a carried nanoGPT checkout (scripts/gpu/prepare.sh --nanogpt):
#                    its GPU config runs beside the studies, one seed, NANOGPT_ITERS [2500]
#                    iterations of its 5000-iteration schedule (its best comes near 1750)
#   STORE            [runs/gpu] the run store, kept between commands on one warm machine
#   SITE             [.gpu-site] where the wheels are installed (put on PYTHONPATH)
#   ABLATE_DATA_DIR  [.gpu-data] the data prepare.sh copied into the checkout
#   WANDB_MODE       [disabled] W&B's files would not come back (the archive leaves them out)
#   GRACE            [30] seconds between a study's SIGINT and its kill
#   FINISH           [30] seconds kept at the end for status.txt and the archive
#   GIT_BUNDLE       [.gpu-git/head.bundle] the carried history whose head becomes HEAD; none
#                    there: the machine's .git stays as it is
#
# Exit status: 0 when every study finished or was cut by the budget (the files are written
# either way), 1 when a study failed or what comes back breaks the device's limits, 2 for bad
# arguments, 3 when this machine cannot run ablate.
set -uo pipefail

usage() { sed -n '2,59p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
die() { echo "window.sh: $*" >&2; exit 2; }
whole() { case $2 in '' | *[!0-9]*) die "$1 must be a whole number of seconds, got '$2'" ;; esac; }

[ $# -ge 1 ] && [ $# -le 2 ] || usage
BUDGET=${2:-540}
whole SECONDS "$BUDGET"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1" || die "cannot create $1"
OUT=$(cd "$1" && pwd)
cd "$ROOT" || exit 2

# tier 1 (reports/gpu/README.md): the reference study, with nanoGPT's own run beside it
TIER1="studies/reference_nanogpt_cpu.yaml"
read -r -a STUDY_FILES <<< "${STUDIES:-$TIER1}"
[ ${#STUDY_FILES[@]} -gt 0 ] || die "STUDIES names no study"
for s in "${STUDY_FILES[@]}"; do [ -f "$s" ] || die "$s: no such study file"; done
PROFILE=${PROFILE-gpu}
PYTHON=${PYTHON:-python3}
PROBE=${PROBE:-1}
PROBE_SECONDS=${PROBE_SECONDS:-180}
NANOGPT=${NANOGPT:-$ROOT/.nanogpt}
NANOGPT_ITERS=${NANOGPT_ITERS:-2500}
USER_ARGS=${ABLATE_ARGS-}
VERDICT=none
VERDICT_ARGS=
UNSTACKED=none
UNSTACKED_ARGS=
STORE=${STORE:-runs/gpu}
SITE=${SITE:-$ROOT/.gpu-site}
GRACE=${GRACE:-30}
FINISH=${FINISH:-30}
GIT_BUNDLE=${GIT_BUNDLE:-$ROOT/.gpu-git/head.bundle}
for v in PROBE_SECONDS GRACE FINISH NANOGPT_ITERS; do whole "$v" "${!v}"; done
export ABLATE_DATA_DIR=${ABLATE_DATA_DIR:-$ROOT/.gpu-data}
export WANDB_MODE=${WANDB_MODE:-disabled}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$ROOT/.gpu-cache/inductor}
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1
export PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-160}
ARCHIVES=reports/gpu/stores
MiB=$((1024 * 1024))

log() { echo "[window $(date -u +%H:%M:%S) +${SECONDS}s] $*"; }
left() { echo $((BUDGET - SECONDS)); }

# what the runs record when the bundle is not applied
git_as_is() {
    if [ -e .git ]; then
        echo "the machine's .git as it is: runs record its HEAD, and a confirmation of a" \
            "registration committed since refuses it (not committed)"
    else
        echo "no .git: runs record no commit, and confirmations run without git's proof of order"
    fi
}

# HEAD := the bundle's head, by a mixed reset: the index follows it, the working tree's files
# (what runs) are never touched. Without git, or when the bundle does not apply, the window goes
# on with the machine's .git as it is (a .git made here for the bundle is removed again: an
# empty repository would make every registration "not committed")
sync_git() {
    local made=
    if [ ! -f "$GIT_BUNDLE" ]; then
        log "git: no $GIT_BUNDLE (prepare.sh writes it; carry .gpu-git): $(git_as_is)"
        return 0
    fi
    command -v git > /dev/null || { log "git: not installed: $(git_as_is)"; return 0; }
    if [ ! -e .git ]; then
        git init -q || { log "git: cannot git init $ROOT: $(git_as_is)"; return 0; }
        made=1
    fi
    if ! git fetch -q --update-head-ok "$GIT_BUNDLE" "+HEAD:refs/heads/gpu-window" ||
        ! git reset -q refs/heads/gpu-window; then
        [ -n "$made" ] && rm -rf .git
        log "git: cannot apply $GIT_BUNDLE (above): $(git_as_is)"
        return 0
    fi
    log "git: HEAD $(git log --oneline -1 | cut -c1-72)"
    local changed
    changed=$(git status --porcelain --untracked-files=no | cut -c4-)
    if [ -z "$changed" ]; then
        log "git: the tracked files are HEAD's (runs record git_dirty False)"
    else
        log "git: $(wc -l <<< "$changed") tracked files differ from HEAD (runs record git_dirty" \
            "when ablate's code is among them): $(head -5 <<< "$changed" | paste -sd ' ' -)"
    fi
}

# the wheels go into a folder on PYTHONPATH, not a venv: the machine's python3 is a venv itself,
# and a venv made from it does not see its packages (its torch among them)
install_wheels() {
    export PYTHONPATH=$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}
    if ! compgen -G ".whl/*.whl" > /dev/null; then
        log "no wheels in .whl/: using $PYTHON's packages as they are"
        return 0
    fi
    rm -rf "$SITE"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$SITE" .whl/*.whl || { log "pip could not install .whl/*.whl"; return 1; }
    log "installed into $SITE: $(cd .whl && ls -- *.whl | tr '\n' ' ')"
}

# every module `ablate run` and `ablate status` import, each tried on its own so that the list
# of what is missing is whole; wandb, wandb_workspaces and datasets are optional for runs
check_imports() {
    "$PYTHON" - <<'EOF'
import importlib
import sys

MODULES = (
    "torch", "pytorch_lightning", "pydantic", "typer", "yaml", "rich", "tokenizers", "filelock",
    "numpy", "pandas", "scipy", "statsmodels", "matplotlib", "seaborn",
    "ablate.cli", "ablate.execution.runner", "ablate.execution.confirm",
    "ablate.execution.executors.local", "ablate.execution.worker", "ablate.execution.tables",
    "ablate.training.train", "ablate.training.stacked", "ablate.data.datasets",
)
missing, broken = {}, []
for name in MODULES:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing.setdefault(err.name or name, name)
    except Exception as err:  # noqa: BLE001 - any failure to import stops the window
        broken.append(f"{name} ({type(err).__name__}: {str(err).splitlines()[0]})")
if missing or broken:
    if missing:
        need = ", ".join(f"{m} (for {n})" for m, n in missing.items())
        print(f"missing modules: {need}: carry their wheels (scripts/gpu/prepare.sh)")
    if broken:
        print("modules that fail to import: " + "; ".join(broken))
    sys.exit(3)
import torch

try:
    import wandb

    w = f"wandb {wandb.__version__}"
except ImportError:
    w = "no wandb (runs log to the store only)"
cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {cuda}, {w}")
EOF
}

restore_archives() {
    mkdir -p "$STORE" || return 1
    local a
    for a in "$ARCHIVES"/*.tgz; do
        [ -f "$a" ] || continue
        tar -xzf "$a" -C "$STORE" --skip-old-files || { log "cannot read $a"; return 1; }
        log "restored $a into $STORE (files already there kept)"
    done
}

probe() {
    [ "$PROBE" = 0 ] && { log "probe skipped (PROBE=0)"; return 0; }
    local rc=0 limit=$(($(left) - GRACE - FINISH))
    [ "$limit" -ge 5 ] || { log "probe skipped: no time left"; return 0; }
    [ "$limit" -gt "$PROBE_SECONDS" ] && limit=$PROBE_SECONDS
    log "probe: ablate bench --probe (limit ${limit}s)"
    timeout --signal=INT --kill-after=10 "$limit" \
        "$PYTHON" -m ablate bench --probe --seconds "$limit" --out "$OUT/probe.md" || rc=$?
    [ $rc = 0 ] && log "probe: done" || log "probe failed (exit $rc): the studies go on"
    read_verdict
}

# the probe's verdicts from its JSON (written after every row, so a cut probe leaves them):
# VERDICT (solo, pack, stack, ... or none) and VERDICT_ARGS, its `ablate run` arguments, and
# UNSTACKED and UNSTACKED_ARGS, the best of the rows that do not stack
read_verdict() {
    local lines=("none" "none")
    [ -f "$OUT/probe.json" ] && mapfile -t lines < <("$PYTHON" - "$OUT/probe.json" <<'EOF'
import json
import sys

try:
    r = json.load(open(sys.argv[1]))["stacked"]
except (OSError, ValueError, KeyError, TypeError):
    r = {}
for key in ("verdict", "unstacked"):
    v = r.get(key) if isinstance(r, dict) else None
    try:
        print(v["choice"], f"x{v['x_solo']:.2f}", v["args"])
    except (KeyError, TypeError, ValueError):
        print("none")
EOF
)
    read -r VERDICT _ VERDICT_ARGS <<< "${lines[0]:-none}"
    read -r UNSTACKED _ UNSTACKED_ARGS <<< "${lines[1]:-none}"
    if [ "$VERDICT" = none ]; then
        log "probe verdict: none (no solo row came back): the studies run solo"
    else
        local unapplied=${USER_ARGS:+ (not applied: ABLATE_ARGS is set)}
        log "probe verdict: ${lines[0]}$unapplied"
        log "probe verdict unstacked (for profiles that pin train.stack): ${lines[1]}$unapplied"
    fi
}

# the arguments `ablate run` gets for a study whose profile sets train.stack to $1: the user's
# ABLATE_ARGS when set, else the verdict's where the profile leaves train.stack at its default
# (off), the unstacked verdict's where it pins it (a profile that pins it keeps its tasks short
# on purpose: stacking its runs is not the probe's to decide, packing them is)
study_args() {
    if [ -n "$USER_ARGS" ]; then
        echo "$USER_ARGS"
    elif [ "$1" != off ]; then
        echo "$UNSTACKED_ARGS"
    else
        echo "$VERDICT_ARGS"
    fi
}

# nanoGPT's own GPU config beside the studies (its own process on the same GPU), one seed
NANOGPT_PID=
start_nanogpt() {
    [ -f "$NANOGPT/train.py" ] || return 0
    local limit=$(($(left) - GRACE - FINISH))
    [ "$limit" -ge 30 ] || { log "nanoGPT: no time left"; return 0; }
    log "nanoGPT beside the studies: $NANOGPT_ITERS iterations (limit ${limit}s): nanogpt.log"
    timeout --signal=INT --kill-after=10 "$limit" "$PYTHON" -m ablate.bench.nanogpt_own --gpu \
        --nanogpt "$NANOGPT" --max-iters "$NANOGPT_ITERS" --out "$OUT/nanogpt_own_next.json" \
        --log "$OUT/nanogpt.log" > "$OUT/nanogpt_own.out" 2>&1 < /dev/null &
    NANOGPT_PID=$!
}

wait_nanogpt() {
    [ -n "$NANOGPT_PID" ] || return 0
    local rc=0
    wait "$NANOGPT_PID" || rc=$?
    # its own lines go into the log; the file itself does not come back (8 files at most)
    sed 's/^/    /' "$OUT/nanogpt_own.out" && rm -f "$OUT/nanogpt_own.out"
    if [ $rc = 0 ] && [ -f "$OUT/nanogpt_own_next.json" ]; then
        log "nanoGPT: done: nanogpt_own_next.json (commit it as reports/gpu/nanogpt_own_next.json)"
    else
        log "nanoGPT failed or was cut (exit $rc)"
    fi
}

# one line per study: its name, whether its registration for PROFILE exists (ablate's own
# naming, registration_path), and the train.stack its profile (else its base) sets: "off"
# when neither does (read from the YAML: expanding every study would cost seconds)
study_plan() {
    "$PYTHON" - "${PROFILE:-}" "${STUDY_FILES[@]}" <<'EOF'
import sys

import yaml

from ablate.claims.registration import registration_path


def stack(layer):
    layer = layer or {}
    value = (layer.get("train") or {}).get("stack", layer.get("train.stack"))
    return None if value is None else "off" if value is False else str(value)


profile = sys.argv[1] or None
for path in sys.argv[2:]:
    study = yaml.safe_load(open(path))
    layers = [(study.get("profiles") or {}).get(profile), study.get("base")]
    setting = next((s for s in map(stack, layers) if s is not None), "off")
    reg = registration_path(path, profile)
    print(study["name"], "confirm" if reg.is_file() else "explore", setting, reg)
EOF
}

# run_study FILE NAME MODE STACK REGISTRATION: `ablate run` until the studies' deadline
# (returns its status: 124 or 137 when the budget cut it)
run_study() {
    local file=$1 name=$2 mode=$3 stack=$4 reg=$5 limit rc=0 run=(run) args=() extra
    limit=$(($(left) - GRACE - FINISH))
    if [ "$limit" -lt 5 ]; then
        log "$name: no time left in this window (the next one runs it)"
        return 124
    fi
    [ -n "$PROFILE" ] && args+=(--profile "$PROFILE")
    if [ "$mode" = confirm ]; then
        run+=(confirm)
        log "$name: registered for profile '${PROFILE:-default}' ($reg): its confirmation seeds"
    else
        log "$name: no registration for profile '${PROFILE:-default}': exploratory runs"
    fi
    extra=$(study_args "$stack")
    if [ "$VERDICT" != none ] && [ "$stack" != off ] && [ -z "$USER_ARGS" ]; then
        log "$name: its profile sets train.stack $stack: the unstacked verdict ($UNSTACKED)"
    fi
    # the launch to the millisecond: time to quality counts from it (each attempt also records
    # its command's start, summary.json's attempts[].launched; older stores have this line only)
    log "ablate ${run[*]} $file ${args[*]} --store $STORE $extra (limit ${limit}s," \
        "launched at $(date +%s.%3N))"
    # timeout signals its whole process group: workers get the SIGINT a terminal's Ctrl-C sends
    # shellcheck disable=SC2086  # the arguments are split on spaces on purpose
    timeout --signal=INT --kill-after="$GRACE" "$limit" "$PYTHON" -m ablate "${run[@]}" "$file" \
        "${args[@]}" --store "$STORE" --no-progress $extra < /dev/null || rc=$?
    case $rc in
        0) log "$name: every run finished" ;;
        124 | 137) log "$name: cut by the budget (exit $rc): the next window resumes it" ;;
        *) log "$name: ablate run exited $rc" ;;
    esac
    return $rc
}

# status.txt: `ablate status` of the window's studies that have runs in the store
write_status() {
    local name have=()
    for name in "$@"; do [ -d "$STORE/$name" ] && have+=("$name"); done
    if [ ${#have[@]} = 0 ]; then
        echo "no runs of ${*} in $STORE" > "$OUT/status.txt"
        return 0
    fi
    "$PYTHON" -m ablate status "${have[@]}" --store "$STORE" > "$OUT/status.txt" 2>&1 ||
        log "ablate status failed (status.txt has its output)"
}

archive_stores() {
    local entries
    mapfile -t entries < <(cd "$STORE" && ls -A)
    if [ ${#entries[@]} = 0 ]; then
        log "the store is empty: no stores.tgz"
        return 0
    fi
    # checkpoints (~128 MB a run) stay on the machine; leases and temporary files are its own
    tar -czf "$OUT/stores.tgz" -C "$STORE" --exclude=checkpoints --exclude=wandb \
        --exclude='run.lease.*' --exclude='*.tmp' -- "${entries[@]}" ||
        { log "cannot write $OUT/stores.tgz"; return 1; }
    log "stores.tgz: ${entries[*]} ($(($(wc -c < "$OUT/stores.tgz") / 1024)) KiB)"
}

# what comes back: at most 8 files, each <= 16 MiB, 64 MiB together, none deeper than OUT/a/b
check_out() {
    local n big deep total
    n=$(find "$OUT" -type f | wc -l)
    big=$(find "$OUT" -type f -size +$((16 * MiB))c)
    deep=$(find "$OUT" -mindepth 4 -type f)
    total=$(find "$OUT" -type f -printf '%s\n' | awk '{t += $1} END {print t + 0}')
    log "OUT: $n files, $((total / 1024)) KiB: $(cd "$OUT" && find . -type f | sort | tr '\n' ' ')"
    [ "$n" -le 8 ] && [ -z "$big" ] && [ -z "$deep" ] && [ "$total" -le $((64 * MiB)) ] && return 0
    log "what comes back breaks the device's limits (8 files, 16 MiB each, 64 MiB, 2 folders" \
        "down): $n files, ${total} bytes${big:+, over 16 MiB: $big}${deep:+, too deep: $deep}"
    return 1
}

main() {
    local rc=0 status=0 name mode reg plan names=()
    log "window: ${STUDY_FILES[*]}, profile ${PROFILE:-default}, budget ${BUDGET}s"
    sync_git
    install_wheels && check_imports || { log "this machine cannot run ablate (above)"; return 3; }
    [ -f "$ABLATE_DATA_DIR/tinyshakespeare/input.txt" ] ||
        log "no $ABLATE_DATA_DIR/tinyshakespeare/input.txt (run scripts/gpu/prepare.sh and carry .gpu-data)"
    log "data: $ABLATE_DATA_DIR; W&B: $WANDB_MODE"
    restore_archives || return 1
    probe
    plan=$(study_plan) || { log "cannot read the studies"; return 2; }
    start_nanogpt
    local i=0 stack
    while read -r name mode stack reg; do
        names+=("$name")
        run_study "${STUDY_FILES[$i]}" "$name" "$mode" "$stack" "$reg" || rc=$?
        case $rc in 0 | 124 | 137) ;; *) status=1 ;; esac
        rc=0
        i=$((i + 1))
    done <<< "$plan"
    wait_nanogpt
    write_status "${names[@]}"
    archive_stores || status=1
    check_out || status=1
    log "window done (exit $status)"
    return $status
}

main 2>&1 | tee "$OUT/window.log"
exit "${PIPESTATUS[0]}"

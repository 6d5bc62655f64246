#!/usr/bin/env bash
# One study's gpu profile on a GPU machine, under a time budget, resumable across commands and
# machines (docs/gpu.md):
#
#   scripts/gpu/run_study.sh STUDY OUTDIR [SECONDS]
#
#   STUDY    a study YAML, e.g. studies/norm_placement.yaml
#   OUTDIR   gets <name>.tgz (the study's store without checkpoints, W&B files or leases),
#            <name>.run.log and <name>.status.txt
#   SECONDS  the budget of `ablate run` (default 480). At its end ablate gets SIGINT, as from
#            Ctrl-C: every run in flight saves a checkpoint at its current step and stops; a
#            process still alive 60 s later is killed (it loses the steps since its last
#            checkpoint). A run the budget cut off resumes from its checkpoint at the next call
#            on the same machine (the store stays in $STORE); on another machine it starts over.
#
# Environment (defaults in brackets):
#   PROFILE      [gpu] the study profile; empty: the study's default
#   STORE        [runs/gpu] the run store, kept between calls on one machine
#   ARCHIVE      [reports/gpu/stores/<name>.tgz] a store archive restored before the run: files
#                already in $STORE are kept, so a later call never rolls a run back
#   ABLATE_ARGS  extra arguments of `ablate run`, split on spaces (e.g. "--workers 4
#                --set train.stack=auto")
#   PYTHON       [python3] the interpreter whose torch the runs use
#   INSTALL      [1] 0: use $PYTHON as it is (ablate importable from this checkout)
#   WHEELS       [.whl] wheels installed as they are (no dependencies resolved) when the
#                machine has no package index: what its Python lacks (pydantic, wandb, ...)
#   ABLATE_DATA_DIR  where tinyshakespeare/input.txt is; default shared/data or ../shared/data
#
# Exit status: 0 when every run finished or the budget ran out (the archive is written either
# way), 3 when the environment cannot run ablate, else `ablate run`'s own status.
set -uo pipefail

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
STUDY=$1
OUTDIR=$2
BUDGET=${3:-480}
case $BUDGET in '' | *[!0-9]*) echo "SECONDS must be a whole number, got '$BUDGET'" >&2; exit 2 ;; esac
[ -f "$STUDY" ] || { echo "$STUDY: no such study file" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STUDY=$(cd "$(dirname "$STUDY")" && pwd)/$(basename "$STUDY")
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
cd "$ROOT" || exit 2
PROFILE=${PROFILE-gpu}
STORE=${STORE:-runs/gpu}
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
VENV=.venv
READY=$VENV/.gpu-ready

log() { echo "[run_study $(date -u +%H:%M:%S)] $*"; }

# an offline install: a venv that sees the machine's packages, every carried wheel installed as
# it is (--no-deps: carry the dependencies the machine lacks too) and a .pth file that puts this
# checkout on the path (no build backend, no index). Where no venv with pip can be made, the
# machine's Python itself with PYTHONPATH (the wheels unpacked into $VENV/deps).
install_offline() {
    local wheels="" site
    if compgen -G "$WHEELS/*.whl" > /dev/null; then wheels=yes; fi
    if { test -x $VENV/bin/python || "$PYTHON" -m venv --system-site-packages $VENV; } &&
        { [ -z "$wheels" ] || $VENV/bin/python -m pip --version > /dev/null 2>&1; }; then
        PY=$VENV/bin/python
        if [ -n "$wheels" ]; then
            $PY -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || return 1
        fi
        site=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || return 1
        echo "$ROOT" > "$site/ablate-checkout.pth"
        echo "PY=$PY" > $READY.new
        return 0
    fi
    log "no venv with pip: using $PYTHON with PYTHONPATH"
    rm -rf $VENV && mkdir -p $VENV/deps
    if [ -n "$wheels" ]; then
        "$PYTHON" -m pip install -q --no-index --no-deps --target $VENV/deps "$WHEELS"/*.whl ||
            return 1
    fi
    PY=$PYTHON
    export PYTHONPATH=$ROOT:$ROOT/$VENV/deps
    printf 'PY=%q\nexport PYTHONPATH=%q\n' "$PY" "$PYTHONPATH" > $READY.new
}

# sets PY; $READY (a sourced file) remembers an environment that passed the check, for the next
# call on this machine
install() {
    if [ "${INSTALL:-1}" = 0 ]; then PY=$PYTHON; return 0; fi
    if [ -f $READY ]; then
        . $READY
        return 0
    fi
    log "installing with the machine's torch (make install TORCH_SPEC=)"
    # an offline machine fails fast here (no retries) and takes the offline path
    if PIP_RETRIES=0 PIP_TIMEOUT=5 make -s install TORCH_SPEC= PYTHON="$PYTHON"; then
        PY=$VENV/bin/python
        echo "PY=$PY" > $READY.new
    else
        log "make install failed (no package index?): installing offline"
        install_offline || { log "offline install failed"; return 1; }
    fi
}

check_env() {
    "$PY" - <<'EOF' || return 1
import importlib, sys
missing = []
for mod in ("torch", "pytorch_lightning", "pydantic", "typer", "yaml", "rich", "tokenizers",
            "filelock", "numpy", "pandas", "scipy", "statsmodels", "seaborn", "matplotlib"):
    try:
        importlib.import_module(mod)
    except Exception as err:  # noqa: BLE001
        missing.append(f"{mod} ({err.__class__.__name__}: {err})")
if missing:
    sys.exit("missing: " + "; ".join(missing) + " -- carry their wheels in $WHEELS (docs/gpu.md)")
import torch
import ablate.cli, ablate.execution.runner, ablate.training.train  # noqa: F401, E401
try:
    import wandb  # noqa: F401
    w = "wandb " + wandb.__version__
except Exception:  # noqa: BLE001
    w = "no wandb: runs log to the store only"
cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {cuda}, {w}")
EOF
}

install && check_env || { log "this machine cannot run ablate (above)"; exit 3; }
if [ -f $READY.new ]; then mv $READY.new $READY; fi

if [ -z "${ABLATE_DATA_DIR:-}" ]; then
    for d in "$ROOT/shared/data" "$ROOT/../shared/data"; do
        [ -d "$d" ] && { export ABLATE_DATA_DIR=$d; break; }
    done
fi
log "data: ${ABLATE_DATA_DIR:-(none: a registered dataset is downloaded)}"

NAME=$("$PY" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' "$STUDY") \
    || exit 2
ARCHIVE=${ARCHIVE:-reports/gpu/stores/$NAME.tgz}
mkdir -p "$STORE"
if [ -f "$ARCHIVE" ]; then
    tar -xzf "$ARCHIVE" -C "$STORE" --skip-old-files || { log "cannot read $ARCHIVE"; exit 2; }
    log "restored $ARCHIVE into $STORE (files already there kept)"
fi

# `timeout` signals its whole process group, so workers get the SIGINT a terminal's Ctrl-C sends
log "ablate run $STUDY${PROFILE:+ --profile $PROFILE} --store $STORE, budget ${BUDGET}s"
# shellcheck disable=SC2086  # ABLATE_ARGS is split on spaces on purpose
PYTHONUNBUFFERED=1 timeout --signal=INT --kill-after=60 "$BUDGET" \
    "$PY" -m ablate run "$STUDY" ${PROFILE:+--profile "$PROFILE"} --store "$STORE" \
    --no-progress ${ABLATE_ARGS:-} 2>&1 | tee "$OUTDIR/$NAME.run.log"
RC=${PIPESTATUS[0]}
case $RC in
    0) log "every run finished" ;;
    124 | 137) log "budget of ${BUDGET}s reached: the same command resumes" ;;
    *) log "ablate run exited $RC" ;;
esac

if [ ! -d "$STORE/$NAME" ]; then
    log "nothing in $STORE/$NAME to archive"
    case $RC in 124 | 137) exit 0 ;; 0) exit 1 ;; *) exit "$RC" ;; esac
fi
# checkpoints (~128 MB a run) and W&B's offline files stay here; leases belong to this machine
tar -czf "$OUTDIR/$NAME.tgz" -C "$STORE" --exclude=checkpoints --exclude=wandb \
    --exclude='run.lease.*' --exclude='*.tmp' "$NAME" || { log "cannot write the archive"; exit 1; }
SIZE=$(wc -c < "$OUTDIR/$NAME.tgz")
log "archive: $OUTDIR/$NAME.tgz ($((SIZE / 1024)) KiB)"
[ "$SIZE" -le $((16 * 1024 * 1024)) ] || log "WARNING: the archive is over 16 MiB"
"$PY" -m ablate status "$NAME" --store "$STORE" 2>&1 | tee "$OUTDIR/$NAME.status.txt"
case $RC in 0 | 124 | 137) exit 0 ;; *) exit "$RC" ;; esac

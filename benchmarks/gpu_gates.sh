#!/usr/bin/env bash
# One device call: every gate on CUDA for both model cuts under the consistent contract, then
# the fast contract on the gates it must fail (the negative controls) and C05 under its planted
# fault (a graph-baked host decision), each gate's JSON and
# the logs packed into OUT/gates-<time>.tgz (the device tool returns at most 8 files).
#
#   bash benchmarks/gpu_gates.sh OUT_DIR [GATES]      (GATES default: all, e.g. C1,C2,C7)
#
# GATES may name `plants`: the faults planted in the consistent CUDA kernels
# (tests/gates/test_triton_plants.py, each through the gate meant for it, 4 at a time) run beside
# the untimed phase; every one of them must fail its gate, and locate must name its region
# (BITWISE_PLANTS_WORKERS: pytest workers, default 4; BITWISE_PLANTS_SELECT: a pytest -k).
# The whole file takes longer than one device call (30 tests; nemotron's three C02 plants
# ~270 s each): on an H200, 6 workers, run it in two calls, BITWISE_PLANTS_SELECT=
# "not (nemotron and fails_its_gate)" (~9 min) and "nemotron and fails_its_gate" (~5 min).
#
# Carry .gitbundle (benchmarks/device_git_sync.sh says why and how to make it).
#
# Two phases. The untimed gates (C00-C09) run side by side, separate processes sharing the
# GPUs, each harness call with its own time limit (BITWISE_GATES_LIMIT_S), so a slow one costs
# only its result. Then C10, the one timed gate, runs alone, one model after the other, each
# with BITWISE_C10_LIMIT_S: a timing taken while other gates share the GPU would be noise.
# BITWISE_C10_MODELS picks the models timed (default: those of BITWISE_GATES_MODELS).
# On the H200 the untimed phase takes ~4 min, C10 ~2 min for qwen3 and ~6 min for nemotron
# (results/h200/c10/*-vs-v1-*, results/h200x2/gates/all-gates-55c38cd*): more than one device call
# allows (10 min), so split it:
#   BITWISE_C10_MODELS=qwen3 bash benchmarks/gpu_gates.sh OUT
#   BITWISE_GATES_MODELS=nemotron BITWISE_C10_LIMIT_S=540 bash benchmarks/gpu_gates.sh OUT C10
# With 2+ GPUs visible, C06 runs on NCCL and the fast contract must fail it too.
set -u
out=${1:?usage: gpu_gates.sh OUT_DIR [GATES]}
only=${2:-}
stamp=$(date +%Y%m%dT%H%M%S)
work=$(mktemp -d)/gates-$stamp
mkdir -p "$work" "$out"
harness() { python3 -c 'import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }
run() {  # run NAME SECONDS ARGS...: one harness call, its output in NAME.log, its exit in NAME.exit
    local name=$1 limit=$2; shift 2
    timeout "$limit" bash -c "$(declare -f harness); harness $*" >"$work/$name.log" 2>&1
    echo $? >"$work/$name.exit"
}
source benchmarks/device_git_sync.sh
# the untimed phase: the asked gates but C10 (all of C00-C09 by default); C10 if asked or by default
untimed=${only:-C0,C1,C2,C3,C4,C5,C6,C7,C8,C9}
plants=$(echo ",$untimed," | grep -qi ',plants,' && echo yes)
untimed=$(echo "$untimed" | tr ',' '\n' | grep -viE '^(c?10|plants)$' | paste -sd, -)
timed=$([ -z "$only" ] || echo ",$only," | grep -qiE ',c?10,' && echo yes)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$work/summary.txt"
limit=${BITWISE_GATES_LIMIT_S:-480}
models=${BITWISE_GATES_MODELS:-qwen3 nemotron}
timed_models=${BITWISE_C10_MODELS:-$models}
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
negatives=C2,C3,C7$([ "$gpus" -ge 2 ] && echo ,C6)
names=""
# the consistent runs switch the GEMM's load path and tile at every M bucket of every shape
# (benchmarks/gemm_mixed_table.py): the gates then prove the speed table's freedom moves no bit
python3 benchmarks/gemm_mixed_table.py --out "$work/gemm-mixed.json" | tee -a "$work/summary.txt"
export BITWISE_GEMM_TUNING="$work/gemm-mixed.json"  # the fast contract never reads it
if [ -n "$plants" ]; then
    (timeout "$limit" python3 -m pytest tests/gates/test_triton_plants.py -n "${BITWISE_PLANTS_WORKERS:-4}" \
        -k "${BITWISE_PLANTS_SELECT:-}" -p no:cacheprovider -rA -s -v \
        >"$work/plants.log" 2>&1; echo $? >"$work/plants.exit") &
    names="$names plants"
fi
for model in $([ -n "$untimed" ] && echo $models); do
    run "$model-consistent" "$limit" gates --model $model --device cuda --only $untimed \
        --out "$work/$model-consistent" &
    run "$model-fast" "$limit" gates --model $model --device cuda --contract fast \
        --only $negatives$([ "$model" = deepseek ] && echo ,C4) \
        --out "$work/$model-fast" &
    names="$names $model-consistent $model-fast"
done
# C05's negative control: decode attention choosing its key block on the host (gates/faults.py),
# which a graph capture bakes at its dummy rows' context: the replay must differ from eager
planted="$work/c05-planted.yaml"
python3 - "$planted" <<'PY'
import sys, yaml
from kernels.contract.contract import CONTRACT_DIR
document = yaml.safe_load((CONTRACT_DIR / "consistent.yaml").read_text())
document["name"] = "consistent-graph-baked-block-kv"
for case in ("engine_decode", "engine_graph"):
    document["regions"]["attention"][case] = {"impl": "attention.planted_graph_baked_block_kv",
                                              "constants": {"block_kv": 32, "row_multiple": 8}}
open(sys.argv[1], "w").write(yaml.safe_dump(document))
PY
for model in $(echo ",$untimed," | grep -qiE ',c?0?5,' && echo $models); do  # nemotron's decode is graphed too
    run "$model-c05-planted" "$limit" gates --model $model --device cuda --only C5 --contract "$planted" \
        --out "$work/$model-c05-planted" &
    names="$names $model-c05-planted"
done
wait
for model in $([ -n "$timed" ] && echo $timed_models); do  # alone on the GPUs, one at a time
    run "$model-c10" "${BITWISE_C10_LIMIT_S:-300}" gates --model $model --device cuda --only C10 \
        --out "$work/$model-c10"
    names="$names $model-c10"
done
for name in $names; do
    echo "== $name: exit $(cat "$work/$name.exit")" | tee -a "$work/summary.txt"
    tail -n $([ "$name" = plants ] && echo 70 || echo 16) "$work/$name.log" | tee -a "$work/summary.txt"
done
tar czf "$out/gates-$stamp.tgz" -C "$(dirname "$work")" "gates-$stamp"
cp "$work/summary.txt" "$out/gates-$stamp-summary.txt"

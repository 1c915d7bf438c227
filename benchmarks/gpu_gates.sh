#!/usr/bin/env bash
# One device call: every gate on CUDA for both model cuts under the consistent contract, then
# the fast contract on the gates it must fail (the negative controls) and C05 under its planted
# fault (a graph-baked host decision), each gate's JSON and
# the logs packed into OUT/gates-<time>.tgz (the device tool returns at most 8 files).
#
#   bash benchmarks/gpu_gates.sh OUT_DIR [GATES]      (GATES default: all, e.g. C1,C2,C7)
#
# Carry .gitbundle (benchmarks/device_git_sync.sh says why and how to make it).
#
# The four harness calls run side by side (separate processes sharing the GPU: C10, the only
# timed gate, is n/a on CUDA), each with its own time limit, so a slow one costs only its result.
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
gates=${only:+--only $only}
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$work/summary.txt"
limit=${BITWISE_GATES_LIMIT_S:-480}
models=${BITWISE_GATES_MODELS:-qwen3 nemotron}
# the consistent runs switch the GEMM's load path and tile at every M bucket of every shape
# (benchmarks/gemm_mixed_table.py): the gates then prove the speed table's freedom moves no bit
python3 benchmarks/gemm_mixed_table.py --out "$work/gemm-mixed.json" | tee -a "$work/summary.txt"
for model in $models; do
    (export BITWISE_GEMM_TUNING="$work/gemm-mixed.json"
     run "$model-consistent" "$limit" gates --model $model --device cuda $gates --out "$work/$model-consistent") &
    run "$model-fast" "$limit" gates --model $model --device cuda --contract fast --only C2,C3,C7 \
        --out "$work/$model-fast" &
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
run "qwen3-c05-planted" "$limit" gates --model qwen3 --device cuda --only C5 --contract "$planted" \
    --out "$work/qwen3-c05-planted" &
wait
for name in $(for m in $models; do echo "$m-consistent $m-fast"; done) qwen3-c05-planted; do
    echo "== $name: exit $(cat "$work/$name.exit")" | tee -a "$work/summary.txt"
    tail -n 16 "$work/$name.log" | tee -a "$work/summary.txt"
done
tar czf "$out/gates-$stamp.tgz" -C "$(dirname "$work")" "gates-$stamp"
cp "$work/summary.txt" "$out/gates-$stamp-summary.txt"

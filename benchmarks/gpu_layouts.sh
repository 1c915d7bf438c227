#!/usr/bin/env bash
# One call on a multi-GPU device (issue 9): gate C06 on NCCL, one GPU per rank, under the
# consistent contract and then the fast one (its negative control), at the asked size (the
# nemotron cut at full width by default), then the layout communication benchmark
# (benchmarks/layout_comm.py --device cuda). Each step has its own time limit, so a slow one
# costs only its own result; the gate JSONs and logs are packed into OUT/layouts-<time>.tgz
# and the benchmark's raw samples land in OUT.
#
#   bash benchmarks/gpu_layouts.sh OUT_DIR [SIZE] [CONTRACTS]   (carry .gitbundle and .whl)
#   CONTRACTS: default "consistent fast"; the nemotron cut's consistent run comes first always
set -u
out=${1:?usage: gpu_layouts.sh OUT_DIR [SIZE]}
size=${2:-wide-cut}
contracts=${3:-consistent fast}
stamp=$(date +%Y%m%dT%H%M%S)
work=$(mktemp -d)/layouts-$stamp
mkdir -p "$work" "$out"
source benchmarks/device_git_sync.sh
harness() { python3 -c 'import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))' "$@"; }
step() {  # step NAME SECONDS COMMAND...: output in NAME.log, exit status in the summary
    local name=$1 limit=$2; shift 2
    local started=$SECONDS
    timeout "$limit" "$@" >"$work/$name.log" 2>&1
    echo "== $name: exit $? in $((SECONDS - started)) s" | tee -a "$work/summary.txt"
    tail -n 14 "$work/$name.log" | tee -a "$work/summary.txt"
}
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.device_count(), 'GPUs', torch.cuda.get_device_name(),
'nccl', torch.cuda.nccl.version())" | tee "$work/summary.txt"
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | tee -a "$work/summary.txt"
export -f harness
step cut-consistent 110 bash -c "harness gates --model nemotron --device cuda --only C6 --out $work/cut-consistent"
for contract in $contracts; do
    step "$contract" "${BITWISE_C06_LIMIT_S:-240}" bash -c \
        "harness gates --model nemotron --size $size --device cuda --only C6 --contract $contract --out $work/$contract"
done
step comm "${BITWISE_COMM_LIMIT_S:-100}" python3 benchmarks/layout_comm.py --device cuda --degrees 2,4 --repeats 7 --out "$out"
tar czf "$out/layouts-$stamp.tgz" -C "$(dirname "$work")" "layouts-$stamp"
cp "$work/summary.txt" "$out/layouts-$stamp-summary.txt"

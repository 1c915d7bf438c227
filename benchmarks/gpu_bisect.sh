#!/usr/bin/env bash
# One device call: find the commit that made a gate fail on CUDA, by `git bisect run` over the
# commits between GOOD and BAD that touch kernels/ or gates/, each step the harness's own
# command at that commit in a worktree (exit 0: good; 2, a gate failed: bad; anything else,
# a timeout or bad input at that commit: skipped), BAD itself tested first. Every step's log,
# the bisect log and the verdict are packed into OUT/bisect-<time>.tgz, the summary beside it.
# BITWISE_BISECT_REPEAT=N runs each step N times, bad if any run fails: a gate that fails on some
# fresh seeds only (C08 on CUDA before b20b94c) otherwise sends the bisect to a random commit.
#
#   bash benchmarks/gpu_bisect.sh OUT_DIR GOOD BAD HARNESS_ARGS...
#   e.g. BITWISE_BISECT_STEP_S=120 bash benchmarks/gpu_bisect.sh $OUT 55e4d41 c7ee816 \
#            gates --model nemotron --device cuda --only C8
#
# About log2(commits) steps: C08 on nemotron takes ~46 s a step on an H100, so 18 commits
# touching kernels/ or gates/ fit one call. Carry .gitbundle (benchmarks/device_git_sync.sh).
set -u
out=${1:?usage: gpu_bisect.sh OUT_DIR GOOD BAD HARNESS_ARGS...}
good=${2:?GOOD commit}
bad=${3:?BAD commit}
shift 3
[ $# -gt 0 ] || { echo "usage: gpu_bisect.sh OUT_DIR GOOD BAD HARNESS_ARGS..." >&2; exit 1; }
source benchmarks/device_git_sync.sh
stamp=$(date +%Y%m%dT%H%M%S)
work=$(mktemp -d)/bisect-$stamp
tree=$(mktemp -d)/tree
mkdir -p "$work" "$out"
git rev-parse -q --verify "$good^{commit}" >/dev/null && git rev-parse -q --verify "$bad^{commit}" >/dev/null ||
    { echo "GOOD ($good) or BAD ($bad) is not a commit here" >&2; exit 1; }
git worktree add -q --detach "$tree" "$bad" || exit 1
step="$work/step.sh"
cat >"$step" <<STEP
#!/usr/bin/env bash
# one bisect step, run by git bisect in the worktree: the harness at this commit
commit=\$(git rev-parse --short HEAD)
for run in \$(seq ${BITWISE_BISECT_REPEAT:-1}); do
    timeout ${BITWISE_BISECT_STEP_S:-150} python3 -c 'import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))' \
        $(printf '%q ' "$@") --out "$work/\$commit-\$run" >"$work/\$commit-\$run.log" 2>&1
    code=\$?
    echo "\$commit run \$run exit \$code" | tee -a "$work/summary.txt"
    [ \$code -eq 0 ] || break  # one failing run makes the commit bad (a flaky gate fails only some runs)
done
case \$code in 0) exit 0 ;; 2) exit 1 ;; *) exit 125 ;; esac
STEP
chmod +x "$step"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" \
    | tee "$work/summary.txt"
echo "bisect $good..$bad: harness $*" | tee -a "$work/summary.txt"
# BAD first: a gate that passes there has nothing to bisect (a flaky failure, another card)
if (cd "$tree" && "$step"); then
    echo "BAD ($bad) passes here: nothing to bisect" | tee -a "$work/summary.txt"
else (cd "$tree" && git bisect start "$bad" "$good" -- kernels gates >/dev/null && git bisect run "$step" >"$work/bisect-run.log" 2>&1
 git bisect log >"$work/bisect.log"; git bisect reset >/dev/null 2>&1)
    grep -E "is the first bad commit|could not be tested|only skipped" -A3 "$work/bisect-run.log" | tee -a "$work/summary.txt"
fi
git worktree remove --force "$tree"
tar czf "$out/bisect-$stamp.tgz" -C "$(dirname "$work")" "bisect-$stamp"
cp "$work/summary.txt" "$out/bisect-$stamp-summary.txt"

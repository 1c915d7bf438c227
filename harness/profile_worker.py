"""Both ends of `harness profile`'s worker protocol: a long-lived process that times one
source tree's rollout and trainer step, and the harness-side handle that drives it.

  python harness/profile_worker.py TREE_ROOT SETUP_JSON    (one JSON request per stdin line)

The worker puts TREE_ROOT first on sys.path, so it imports *that* tree's kernels and
gates.workload (the baseline worktree's or the current tree's), never the harness's. Its
stdout carries only replies; anything else written to fd 1 goes to stderr. The region breakdown
wraps RegionDispatch.__call__ in torch.profiler.record_function inside this process only
and charges each profiled op's self CPU time to the innermost region range around it.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

RANGE_PREFIX = "region/"
OUTSIDE = "(outside regions)"


class WorkerSide:
    """One tree's model, contract, weights and workload; answers hello, sample, regions."""

    def __init__(self, setup: dict):
        # Imported here, not at module top: sys.path[0] must point at the tree first.
        import kernels
        from gates.workload import Workload, make_requests, seeded_weights
        from kernels.contract import load_contract
        from kernels.models.config import load_model_config
        from kernels.models.registry import config_name

        self.kernels_file = kernels.__file__
        self.config = load_model_config(config_name(setup["model"], "cut"))
        self.contract = load_contract(setup["contract"])
        self.weights = seeded_weights(self.config)
        self.workload = Workload(**setup["workload"])
        self.requests = make_requests(self.workload, self.config.vocab_size)

    def hello(self) -> dict:
        """Who this is: what it imported, its identities and the workload it will run."""
        from kernels.contract import load_contract
        from kernels.contract.identity import (deployment_fingerprint, numerical_policy_identity,
                                               semantic_identity)

        workload = [(r.request_id, r.prompt, r.max_new_tokens, r.arrival_step, r.params.temperature,
                     r.params.top_k, r.params.top_p, r.params.seed) for r in self.requests]
        return {"kernels": self.kernels_file, "contract": self.contract.name,
                "content_hash": numerical_policy_identity(self.contract),
                "fast_content_hash": numerical_policy_identity(load_contract("fast")),
                "semantic": semantic_identity(self.config, self.weights),
                "workload": hashlib.sha256(repr(workload).encode()).hexdigest(),
                "environment": deployment_fingerprint()}

    def sample(self) -> dict:
        """One rollout (timed), then one GRPO-style step on its completions: score + update
        (timed) with a fresh trainer from the same weights, so every sample does the same work.
        Timed as C10 times the CPU: this process's CPU time, one intra-op thread (the harness
        starts it so: gates/cpu_timing.py), which descheduling does not move; wall time beside it."""
        from gates.workload import rollout
        from kernels.trainer.grpo import group_advantages
        from kernels.trainer.logprobs import scored_sequences
        from kernels.trainer.rl_loop import even_token_reward
        from kernels.trainer.trainer import Trainer

        started, cpu_started = time.perf_counter(), time.process_time()
        completions, _ = rollout(self.config, self.contract, self.weights, self.workload)
        rollout_wall_s, rollout_s = time.perf_counter() - started, time.process_time() - cpu_started
        num_tokens = sum(len(c.tokens) for c in completions)
        trainer = Trainer(self.config, self.contract, weights=self.weights)
        sequences = scored_sequences(completions)
        group_size = 4 if len(completions) % 4 == 0 else 1
        advantages = group_advantages([even_token_reward(c.tokens) for c in completions], group_size)
        started, cpu_started = time.perf_counter(), time.process_time()
        trainer.score(sequences)
        trainer.train_step(sequences, advantages, [c.logprob_tensor for c in completions])
        train_wall_s, train_step_s = time.perf_counter() - started, time.process_time() - cpu_started
        return {"num_tokens": num_tokens, "clock": "process CPU time", "rollout_s": rollout_s,
                "rollout_wall_s": rollout_wall_s, "rollout_tokens_per_s": num_tokens / rollout_s,
                "wall_rollout_tokens_per_s": num_tokens / rollout_wall_s, "train_step_s": train_step_s,
                "train_step_wall_s": train_wall_s}

    def regions(self) -> dict:
        """{region: self CPU ms} over one profiled rollout (not timed: the profiler costs)."""
        import torch
        from gates.workload import rollout
        from kernels.models.dispatch import RegionDispatch

        door = RegionDispatch.__call__

        def traced(dispatch, region, case, layer, *args, **kwargs):
            with torch.profiler.record_function(RANGE_PREFIX + region):
                return door(dispatch, region, case, layer, *args, **kwargs)

        RegionDispatch.__call__ = traced
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                rollout(self.config, self.contract, self.weights, self.workload)
        finally:
            RegionDispatch.__call__ = door
        # The raw kineto events: prof.events() builds a FunctionEvent tree, ~50 s for the
        # ~600k ops of one nemotron-cut rollout, where this takes about a second.
        spans = [(e.start_thread_id(), e.start_ns(), e.end_ns(), e.name())
                 for e in prof.profiler.kineto_results.events()]
        return self_cpu_ms_by_region(spans)


def self_cpu_ms_by_region(spans) -> dict:
    """{region: ms}: each span's self time (its duration less its direct children's) charged
    to the innermost region range around it, on the threads that ran regions; ops outside
    every door count as OUTSIDE. spans: (thread, start_ns, end_ns, name)."""
    threads = {thread for thread, _, _, name in spans if name.startswith(RANGE_PREFIX)}
    totals_ns = defaultdict(int)
    stack, current_thread = [], None  # stack: (end_ns, owner) of the spans enclosing this one
    ordered = sorted((s for s in spans if s[0] in threads), key=lambda s: (s[0], s[1], -s[2]))
    for thread, start, end, name in ordered:  # enclosing spans first
        if thread != current_thread:
            stack, current_thread = [], thread
        while stack and stack[-1][0] <= start:
            stack.pop()
        parent = stack[-1][1] if stack else OUTSIDE
        owner = name[len(RANGE_PREFIX):] if name.startswith(RANGE_PREFIX) else parent
        totals_ns[owner] += end - start
        if stack:
            totals_ns[parent] -= end - start
        stack.append((end, owner))
    return {region: ns / 1e6 for region, ns in sorted(totals_ns.items())}


def serve(root: str, setup: dict) -> None:
    sys.path[0] = root  # replaces this script's folder: the tree's packages come first
    # Replies get a private copy of fd 1; fd 1 itself (Python prints and C++ logging from
    # torch or the profiler alike) is pointed at stderr, so nothing else reaches the pipe.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    side = WorkerSide(setup)
    commands = {"hello": side.hello, "sample": side.sample, "regions": side.regions}
    for line in sys.stdin:
        command = json.loads(line)["command"]
        if command == "quit":
            return
        replies.write(json.dumps(commands[command]()) + "\n")
        replies.flush()


class WorkerProcess:
    """The harness's handle on one worker: started at once (so several load in parallel),
    asked one command at a time; a worker that dies raises with the tail of its stderr."""

    def __init__(self, label: str, root: Path, setup: dict):
        from gates.cpu_timing import timed_environment  # the harness side: this file runs as the worker too
        self.label = label
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(root), json.dumps(setup)],
            cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            env=timed_environment())  # timed in CPU time: one intra-op thread

    def ask(self, command: str) -> dict:
        try:
            self.process.stdin.write(json.dumps({"command": command}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.process.wait()
            self.log.seek(0)
            raise RuntimeError(f"{self.label} worker exited ({self.process.returncode}) on "
                               f"{command!r}:\n{self.log.read()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"command": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.log.close()


if __name__ == "__main__":
    serve(sys.argv[1], json.loads(sys.argv[2]))

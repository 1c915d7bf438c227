"""Both ends of `harness profile`'s worker protocol: a long-lived process that times one source
tree's rollout and trainer step, and the harness-side handle that drives it (WorkerProcess).

  python harness/profile_worker.py TREE_ROOT SETUP_JSON    (one JSON request per stdin line)

Requests {"command": "hello" | "sample" | "regions" | "quit"}, one JSON reply line each; stdout
carries nothing else (fd 1 goes to stderr). TREE_ROOT goes first on sys.path: the worker imports
*that* tree's kernels, never the harness's. Regions: each door's own CPU time (DoorClock).
"""
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from functools import cache
from pathlib import Path

OUTSIDE = "(outside regions)"
CLOCK = Path(__file__).resolve().parent.parent / "gates" / "rollout_clock.py"
REGION_RUNS = 3


@cache
def judges_clock():
    """gates/rollout_clock.py beside this harness, loaded by path: `gates` on sys.path is the
    profiled tree's, which may predate the clock."""
    spec = importlib.util.spec_from_file_location("bitwise_rollout_clock", CLOCK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.timed_rollout


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
        self.engine = None

    def _warm_engine(self):
        """One engine kept warm, as C10 times it: built and run once untimed on first use."""
        from gates.workload import make_engine, make_requests
        if self.engine is None:
            self.engine = make_engine(self.config, self.contract, self.weights, self.workload)
            self.engine.generate(make_requests(self.workload, self.config.vocab_size))
        return self.engine

    def _fresh_requests(self, engine) -> list:
        """The workload's requests, the engine's arrival steps counted from 0 again (a fresh one's)."""
        from gates.workload import make_requests
        engine.step_count = 0
        return make_requests(self.workload, self.config.vocab_size)

    def hello(self) -> dict:
        """Who this is: what it imported, its identities and the workload it will run."""
        from kernels.contract import load_contract
        from kernels.contract.identity import deployment_fingerprint, numerical_policy_identity, semantic_identity

        workload = [(r.request_id, r.prompt, r.max_new_tokens, r.arrival_step, r.params.temperature,
                     r.params.top_k, r.params.top_p, r.params.seed) for r in self.requests]
        return {"kernels": self.kernels_file, "contract": self.contract.name,
                "content_hash": numerical_policy_identity(self.contract),
                "fast_content_hash": numerical_policy_identity(load_contract("fast")),
                "semantic": semantic_identity(self.config, self.weights),
                "workload": hashlib.sha256(repr(workload).encode()).hexdigest(),
                "environment": deployment_fingerprint()}

    def sample(self) -> dict:
        """One rollout on the warm engine (timed), then one GRPO-style step on its completions:
        score + update (timed) with a fresh trainer from the same weights, so every sample does
        the same work. Timed as C10 times the CPU: generation alone, in this process's CPU time
        with one intra-op thread (the harness starts it so: gates/cpu_timing.py), which
        descheduling does not move; wall time beside it."""
        from kernels.trainer.grpo import group_advantages
        from kernels.trainer.logprobs import scored_sequences
        from kernels.trainer.rl_loop import even_token_reward
        from kernels.trainer.trainer import Trainer

        engine = self._warm_engine()  # building and warming it are not generation
        completions, rollout_wall_s, rollout_s, _ = judges_clock()(engine, self._fresh_requests(engine))
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

    def regions(self, runs: int = REGION_RUNS) -> dict:
        """{region: own CPU ms}: the median over `runs` rollouts on the warm engine, doors
        timed (DoorClock); one run on a shared machine moves a region by a third."""
        try:
            from kernels.contract.dispatch import RegionDispatch
        except ModuleNotFoundError:  # a frozen baseline's tree from before the door moved
            from kernels.models.dispatch import RegionDispatch

        door, engine, measured = RegionDispatch.__call__, self._warm_engine(), []
        for _ in range(runs):
            clock = DoorClock()
            RegionDispatch.__call__ = clock.wrap(door)
            try:
                started = time.process_time_ns()
                engine.generate(self._fresh_requests(engine))
                measured.append(clock.ms_by_region(time.process_time_ns() - started))
            finally:
                RegionDispatch.__call__ = door
        names = sorted(set().union(*measured))
        return {name: statistics.median(run.get(name, 0.0) for run in measured) for name in names}


class DoorClock:
    """Each region door's own time (its span less the doors it called), summed per region."""

    def __init__(self, clock=time.process_time_ns):
        self.clock, self.totals_ns, self.inner_ns = clock, defaultdict(int), []

    def wrap(self, door):
        def timed(dispatch, region, case, layer, *args, **kwargs):
            self.inner_ns.append(0)
            started = self.clock()
            try:
                return door(dispatch, region, case, layer, *args, **kwargs)
            finally:
                elapsed = self.clock() - started
                self.totals_ns[region] += elapsed - self.inner_ns.pop()
                if self.inner_ns:
                    self.inner_ns[-1] += elapsed
        return timed

    def ms_by_region(self, total_ns: int) -> dict:
        """{region: ms}, with what ran outside every door as OUTSIDE (of a run of total_ns)."""
        totals = dict(self.totals_ns, **{OUTSIDE: total_ns - sum(self.totals_ns.values())})
        return {region: ns / 1e6 for region, ns in sorted(totals.items())}


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

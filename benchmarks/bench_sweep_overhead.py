"""How much a study costs beyond its trials' own training: Ray start, worker start, imports,
data loading, and the driver's bookkeeping.

Runs the same small study (sample data, 2 central tasks x 2 weights) at max_concurrent 1 and 2
and prints, for each, the study's wall time and the ratio

    wall time of the study / sum of the trials' own training time (the wall_time_s attribute)

1.0 would mean no overhead at all; with 2 concurrent trials an ideal study reaches 0.5. The
overhead column is `wall x concurrency / sum - 1`: the share of the trials' own time that the
study spends on top of it (Ray start, worker start and imports, scheduling, database writes).

    python benchmarks/bench_sweep_overhead.py                  # tiny random-init encoder
    python benchmarks/bench_sweep_overhead.py --encoder minilm # the real MiniLM encoder

`--drivers` measures what sharing a study costs instead: on one Ray cluster of 2 CPUs started
beforehand (`ray start --head`), the same study (2 central tasks x 4 weights) once with one
`weightsearch launch` at max_concurrent 2, and once with two `weightsearch launch` of the same
file started together at max_concurrent 1 each (the same total concurrency), each on a fresh
SQLite database; then the cost of the claims themselves, timed on their own (claim, renewals,
release per cell) against the study's wall time.

    python benchmarks/bench_sweep_overhead.py --drivers --repeats 2

`--versus-plain` compares a study with what a user would write without weightsearch: a plain
Ray Tune script whose OptunaSearch walks the same grid (Optuna's GridSampler, results in an
Optuna SQLite study) and whose trainable calls `weightsearch.trainer.train` on the same run config.
Both run 32 cells (2 central tasks x 4 weights x 4 seeds) at max_concurrent 2 with a fresh worker
per trial (Tune's default), alternating `--repeats` times; the table gives each one's wall time and
the machine's CPU time over it (all processes: run it on an otherwise idle machine), and the
ratio study / plain.

    python benchmarks/bench_sweep_overhead.py --versus-plain --repeats 3

`--versus-plain --fresh-workers` runs the study against itself with a fresh worker per trial
(`reuse_workers: false`) instead: what reusing workers saves.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tiny_encoder(folder: Path) -> str:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from weightsearch.trainer.encoders import default_encoder_path

    tokenizer = AutoTokenizer.from_pretrained(default_encoder_path())
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=256)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def run(encoder: str | None, concurrency: int, work: Path, epochs: int, examples: int) -> dict:
    import optuna

    from weightsearch.studies import schema as S
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    train = {"data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc", "stsb"],
             "epochs": epochs, "batch_size": 16, "max_train_examples": examples}
    if encoder:
        train["encoder"] = encoder
    url = f"sqlite:///{work / f'bench-{concurrency}.db'}"
    spec = load_study_spec({
        "study": f"bench-c{concurrency}", "storage": url, "train": train,
        "central_tasks": ["rte", "mrpc"], "weights": [1, 9], "max_concurrent": concurrency,
        "resources": {"cpu": 1, "gpu": 0},
        "workdir": str(work / f"runs-{concurrency}"),
    })
    started = time.perf_counter()
    summary = launch(spec, progress=False)  # starts and stops its own Ray
    wall = time.perf_counter() - started
    own = sum(
        t.user_attrs[S.T_WALL_TIME]
        for name in optuna.get_all_study_names(url)
        for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
        if S.T_WALL_TIME in t.user_attrs
    )
    return {"concurrency": concurrency, "trials": summary.ran, "wall_s": wall,
            "trials_s": own, "ratio": wall / own if own else float("nan"),
            "overhead": wall * concurrency / own - 1 if own else float("nan")}


# --- a study against a plain Tune + OptunaSearch script ----------------------------------------
CENTRALS, WEIGHTS, SEEDS = ("rte", "mrpc"), (1, 3, 9, 12), (1, 2, 3, 4)


def _machine_cpu_s() -> float:
    """CPU seconds every process of the machine has spent (user + system), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system = (int(v) for v in fields[:3])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def _plain_train(config: dict) -> None:
    """The trainable a plain script would write: one run per config, one report per epoch."""
    from ray import tune

    from weightsearch import trainer

    cfg = trainer.load_config({**config["train"], "central_task": config["central"],
                               "seed": config["seed"], "checkpoints": "none",
                               "weighting": {"scheme": "siwlm",
                                             "central_weight": config["weight"]},
                               "output_dir": f"{config['workdir']}/{config['central']}-"
                                             f"{config['weight']}-{config['seed']}"})
    metric = cfg.task(config["central"]).primary_metric
    trainer.train(cfg, quiet=True, report=lambda r: tune.report(
        {"value": float(r.metrics[config["central"]][metric]), "epoch": int(r.epoch)}))


def _plain_run(train: dict, work: Path, tag: str) -> float:
    import optuna
    import ray
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    grid = {"central": list(CENTRALS), "weight": list(WEIGHTS), "seed": list(SEEDS)}
    search = OptunaSearch(
        space={k: optuna.distributions.CategoricalDistribution(v) for k, v in grid.items()},
        metric="value", mode="max", sampler=optuna.samplers.GridSampler(grid, seed=0),
        study_name=tag, storage=optuna.storages.RDBStorage(f"sqlite:///{work / tag}.db"))
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cells = len(CENTRALS) * len(WEIGHTS) * len(SEEDS)
    try:
        results = tune.Tuner(
            tune.with_parameters(_plain_train),
            param_space={"train": train, "workdir": str(work / tag)},
            tune_config=tune.TuneConfig(search_alg=search, num_samples=cells,
                                        max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=str(work / f"ray-{tag}"), verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    if results.num_errors or len(results) != cells:
        raise SystemExit(f"the plain script ran {len(results)} trials ({results.num_errors} "
                         f"failed), expected {cells}")
    return time.perf_counter() - started


def _study_run(train: dict, work: Path, tag: str, reuse: bool = True) -> float:
    from weightsearch.sweep.launch import launch
    from weightsearch.sweep.spec import load_study_spec

    spec = load_study_spec({
        "study": tag, "storage": f"sqlite:///{work / tag}.db", "train": train,
        "central_tasks": list(CENTRALS), "weights": list(WEIGHTS), "seeds": list(SEEDS),
        "max_concurrent": 2, "resources": {"cpu": 1, "gpu": 0}, "workdir": str(work / tag),
        "reuse_workers": reuse,
    })
    started = time.perf_counter()
    summary = launch(spec, progress=False)
    if summary.ran != len(CENTRALS) * len(WEIGHTS) * len(SEEDS):
        raise SystemExit(f"the study trained {summary.ran} cells, expected 32")
    return time.perf_counter() - started


def versus_plain_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-plain-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("WEIGHTSEARCH_CACHE", str(work / "cache"))
        train = {"data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc"],
                 "epochs": args.epochs, "batch_size": 16,
                 "max_train_examples": args.max_train_examples, "num_threads": 1}
        if args.encoder == "tiny":
            train["encoder"] = tiny_encoder(work / "tiny")
        rows = []
        other = ("fresh", lambda *a: _study_run(*a, reuse=False)) if args.fresh_workers \
            else ("plain", _plain_run)
        for r in range(args.repeats):
            for name, run_one in (("study", _study_run), other):
                cpu = _machine_cpu_s()
                wall = run_one(train, work, f"{name}{r}")
                rows.append((name, wall, _machine_cpu_s() - cpu))
    print(f"encoder={args.encoder} epochs={args.epochs} max_train_examples="
          f"{args.max_train_examples} cells=32 max_concurrent=2 cpus={os.cpu_count()}")
    print("run     wall_s  machine_cpu_s")
    for name, wall, cpu in rows:
        print(f"{name:<6} {wall:>7.1f} {cpu:>14.1f}")
    for i, what in ((1, "wall"), (2, "CPU")):
        study = sorted(r[i] for r in rows if r[0] == "study")
        plain = sorted(r[i] for r in rows if r[0] == other[0])
        ratios = sorted(s / p for s, p in zip([r[i] for r in rows if r[0] == "study"],
                                              [r[i] for r in rows if r[0] == other[0]],
                                              strict=True))
        print(f"{what}: study median {study[len(study) // 2]:.1f}, {other[0]} median "
              f"{plain[len(plain) // 2]:.1f}; study / {other[0]} per pair "
              + ", ".join(f"{x:.2f}" for x in ratios))


# --- two drivers sharing one study ---------------------------------------------------------
def _ray_head(ray_tmp: str, env: dict) -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray = str(Path(sys.executable).with_name("ray"))
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", f"--temp-dir={ray_tmp}",
                    "--disable-usage-stats"], env=env, check=True, capture_output=True)
    return f"127.0.0.1:{port}"


def _stop_ray(ray_tmp: str) -> None:
    """End the processes of our private Ray (never `ray stop`, which ends every Ray here)."""
    for _ in range(20):
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    cmd = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if ray_tmp.encode() in cmd:
                    pids.append(int(entry.name))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)


def _drivers_run(n_drivers: int, encoder: str | None, work: Path, address: str, env: dict,
                 epochs: int, examples: int, tag: str) -> dict:
    import optuna
    import yaml

    from weightsearch.studies import schema as S

    train = {"data_dir": str(ROOT / "data" / "glue_sample"), "tasks": ["rte", "mrpc", "stsb"],
             "epochs": epochs, "batch_size": 16, "max_train_examples": examples,
             "num_threads": 1}
    if encoder:
        train["encoder"] = encoder
    study = work / f"{tag}.yaml"
    url = f"sqlite:///{work / f'{tag}.db'}"
    study.write_text(yaml.safe_dump({
        "study": tag, "train": train, "central_tasks": ["rte", "mrpc"],
        "weights": [1, 3, 9, 12], "max_concurrent": 2 // n_drivers,
        "workdir": str(work / f"runs-{tag}"),
    }))
    cmd = [sys.executable, "-m", "weightsearch.cli", "launch", str(study), "--storage", url,
           "--ray-address", address, "--quiet"]
    started = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(n_drivers)]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - started
    for p, out in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise SystemExit(f"driver failed ({p.returncode}):\n{out[-2000:]}")
    trials, done = [], []
    for name in optuna.get_all_study_names(url):
        found = optuna.load_study(study_name=name, storage=url).get_trials()
        cells = [t.user_attrs[S.T_CELL] for t in found if t.state.name == "COMPLETE"]
        if sorted(cells) != sorted(set(cells)) or len(cells) != 4:
            raise SystemExit(f"{name}: cells trained {cells}, expected each of 4 once")
        trials += found
        done += [t for t in found if t.state.name == "COMPLETE"]
    return {"drivers": n_drivers, "wall_s": wall, "trials": len(trials),
            "trials_s": sum(t.user_attrs.get(S.T_WALL_TIME, 0.0) for t in done)}


def _claims_cost(work: Path, cells: int, renewals: int) -> float:
    """Seconds the claims of one study cost on their own: per cell a claim, `renewals`
    renewals and a release, on a SQLite study database like the drivers'."""
    from weightsearch.studies.storage import open_storage
    from weightsearch.sweep.claims import Claims

    storage = open_storage(f"sqlite:///{work / 'claims-cost.db'}")
    claims = Claims(storage.engine, ttl=120)
    started = time.perf_counter()
    for i in range(cells):
        claims.claim("cost/rte", f"{i}|1")
        for _ in range(renewals):
            claims.renew()
        claims.release("cost/rte", f"{i}|1")
    return time.perf_counter() - started


def drivers_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-drivers-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("WEIGHTSEARCH_CACHE", str(work / "cache"))
        encoder = tiny_encoder(work / "tiny") if args.encoder == "tiny" else None
        ray_tmp = tempfile.mkdtemp(prefix="wsbench", dir="/tmp")
        env = {**os.environ, "RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT),
               "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
               # A private cluster: no auth tokens to hand round; no memory-monitor kills
               # from other work on the machine.
               "RAY_AUTH_MODE": "disabled", "RAY_memory_monitor_refresh_ms": "0"}
        rows = []
        try:
            address = _ray_head(ray_tmp, env)
            for r in range(args.repeats):
                for n in (1, 2):
                    rows.append(_drivers_run(n, encoder, work, address, env, args.epochs,
                                             args.max_train_examples, f"d{n}-{r}"))
        finally:
            _stop_ray(ray_tmp)
            shutil.rmtree(ray_tmp, ignore_errors=True)
        wall = sum(r["wall_s"] for r in rows if r["drivers"] == 2) / args.repeats
        # A cell's lease is renewed every TTL/6 = 20 s while it trains.
        per_cell = max(1, int(wall / 2 / 20))
        cost = _claims_cost(work, 8, per_cell)
    print(f"encoder={args.encoder} epochs={args.epochs} "
          f"max_train_examples={args.max_train_examples} cpus={os.cpu_count()} "
          "cells=8 (2 central tasks x 4 weights) Ray cluster: 2 CPUs")
    print("drivers  max_concurrent each  study_wall_s  sum_trial_s  trials")
    for r in rows:
        print(f"{r['drivers']:>7}  {2 // r['drivers']:>19}  {r['wall_s']:>12.1f}  "
              f"{r['trials_s']:>11.1f}  {r['trials']:>6}")
    one = sum(r["wall_s"] for r in rows if r["drivers"] == 1) / args.repeats
    print(f"mean wall: one driver {one:.1f}s, two drivers {wall:.1f}s "
          f"({wall / one - 1:+.1%}); the claims themselves: {cost * 1000:.0f} ms for 8 cells "
          f"({cost / wall:.2%} of the study's wall time)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", choices=("tiny", "minilm"), default="tiny")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-train-examples", type=int, default=100)
    parser.add_argument("--drivers", action="store_true",
                        help="two drivers sharing one study against one driver")
    parser.add_argument("--versus-plain", action="store_true",
                        help="a 32-cell study against a plain Tune + OptunaSearch script")
    parser.add_argument("--fresh-workers", action="store_true",
                        help="with --versus-plain: against the same study with a fresh worker "
                             "per trial (reuse_workers: false) instead of the plain script")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if args.drivers:
        drivers_main(args)
        return
    if args.versus_plain:
        versus_plain_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("WEIGHTSEARCH_CACHE", str(work / "cache"))
        encoder = tiny_encoder(work / "tiny") if args.encoder == "tiny" else None
        rows = [run(encoder, c, work, args.epochs, args.max_train_examples) for c in (1, 2)]
    print(f"encoder={args.encoder} epochs={args.epochs} "
          f"max_train_examples={args.max_train_examples} cpus={os.cpu_count()}")
    print("max_concurrent  trials  study_wall_s  sum_trial_s  wall/sum  overhead")
    for r in rows:
        print(f"{r['concurrency']:>14}  {r['trials']:>6}  {r['wall_s']:>12.1f}  "
              f"{r['trials_s']:>11.1f}  {r['ratio']:>8.2f}  {r['overhead']:>8.1%}")


if __name__ == "__main__":
    main()

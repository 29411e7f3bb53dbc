"""Benchmark: how the cost of keeping and reading posterior draws grows with their number, for
the sample store of shards (`bdl.storage.store.SampleStore`) against a file per draw.

The draws are those of the yacht network (``dataset=yacht``: one hidden layer of 50 units and the
noise's precision, about 1.6 KB in float32), kept by 16 chains in turn as ``bdl-run chains=16``
keeps them, each chain's store synced ten times along the way (the runner syncs at each
checkpoint) and at the end. The file per draw is the same store with shards of one draw
(``shard_bytes=1``): a file, its SHA-256, its flush and its manifest entry per draw, as bdl kept
draws before shards. Reading is `bdl.storage.store.load_samples` over every chain, as
``load_run``, ``bdl-eval`` and the run's end statistics read them; for the largest count it runs
in a process of its own, which reports how much its peak resident memory grew while reading.

With ``--run EPOCHS``, it runs ``bdl-run sampler=hmc dataset=yacht chains=16 compile=true``
instead, ``EPOCHS`` epochs after a burn-in of 40 at ``thin=1`` (16 × ``EPOCHS`` draws), once with
each store, and prints the seconds spent in the stores (adding, syncing, cutting back) against
the run's.

    python scripts/bench_store.py [--draws 100 1000 10000 100000] [--chains 16] [--run EPOCHS]
"""

from __future__ import annotations

import argparse
import functools
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchtools import composed, cpu_seconds, machine_load

import bdl.storage.store
from bdl.composition.network import build_network, load_data, sample_tensors
from bdl.runner.run import run
from bdl.storage.store import SHARD_BYTES, SampleStore, load_samples

STORES = {"shards": None, "file per draw": 1}  # shard_bytes of each
SYNCS = 10  # the syncs of each chain's store along the way, as a run's checkpoints


def yacht_draws(count: int) -> list[dict[str, torch.Tensor]]:
    """``count`` different draws of the yacht network's parameters (and noise)."""
    cfg = composed(["dataset=yacht", "sampler=hmc"])
    model, likelihood = build_network(cfg, load_data(cfg))
    base = sample_tensors(model, likelihood)
    return [{name: t.detach() + 0.01 * i for name, t in base.items()} for i in range(count)]


def keep(folder: Path, draws: list[dict[str, torch.Tensor]], total: int, chains: int, shard):
    """Keep ``total`` draws in ``chains`` stores under ``folder``; wall and CPU seconds."""
    stores = [
        SampleStore(folder / f"chain_{k}", fsync_each=False, shard_bytes=shard)
        for k in range(chains)
    ]
    every = max(1, total // (chains * SYNCS))
    wall, cpu = time.perf_counter(), cpu_seconds()
    for i in range(total):
        stores[i % chains].add(draws[i % len(draws)], epoch=i // chains)
        if (i + 1) % (every * chains) == 0:
            for store in stores:
                store.sync()
    for store in stores:
        store.sync()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def read(folder: Path) -> tuple[float, float, int]:
    """Read every draw of the stores under ``folder``; wall and CPU seconds, and the draws."""
    wall, cpu, count = time.perf_counter(), cpu_seconds(), 0
    for store in sorted(folder.iterdir()):
        for _ in load_samples(store):
            count += 1
    return time.perf_counter() - wall, cpu_seconds() - cpu, count


def read_in_own_process(folder: Path) -> None:
    """`read`, printing the growth of the peak resident memory (MB) while reading."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall, cpu, count = read(folder)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(f"{wall} {cpu} {count} {grown}")


def store_share(epochs: int, chains: int, folder: Path) -> None:
    """The seconds a yacht HMC run spends in its stores against its wall time, with each store."""
    spent = {"s": 0.0}

    def timed(method):
        @functools.wraps(method)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent["s"] += time.perf_counter() - start

        return wrapper

    for name in ("add", "sync", "truncate"):  # truncate calls sync: counted once by its own
        setattr(SampleStore, name, timed(getattr(SampleStore, name)))
    overrides = ["sampler=hmc", "dataset=yacht", f"chains={chains}", "compile=true"]
    overrides += ["burn_in=40", f"epochs={40 + epochs}", "thin=1", "figures=false"]
    print(f"bdl-run {' '.join(overrides)}: {chains * epochs} draws")
    for name, shard in STORES.items():
        bdl.storage.store.SHARD_BYTES = shard or SHARD_BYTES
        spent["s"] = 0.0
        wall = time.perf_counter()
        run(composed(overrides), folder / name)
        wall = time.perf_counter() - wall
        files = len(list((folder / name / "samples").rglob("*.safetensors")))
        print(
            f"{name:>14}: run {wall:.1f} s, in the stores {spent['s']:.2f} s "
            f"({100 * spent['s'] / wall:.1f}%), {files} sample files"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, nargs="+", default=[100, 1000, 10_000, 100_000])
    parser.add_argument("--chains", type=int, default=16)
    parser.add_argument("--run", type=int, metavar="EPOCHS", help="time a run's stores")
    parser.add_argument("--read", type=Path, help=argparse.SUPPRESS)  # the reading process
    args = parser.parse_args()
    if args.read is not None:
        read_in_own_process(args.read)
        return
    if args.run is not None:
        with machine_load(torch.get_num_threads()), tempfile.TemporaryDirectory() as directory:
            store_share(args.run, args.chains, Path(directory))
        return
    draws = yacht_draws(64)
    size = sum(t.numel() * t.element_size() for t in draws[0].values())
    print(
        f"yacht network: {size} bytes a draw; {args.chains} chains; shards of {SHARD_BYTES} "
        f"bytes ({SHARD_BYTES // size} draws); {SYNCS} syncs a chain and one at the end"
    )
    print(
        f"{'draws':>7} {'store':>14} {'keep s':>8} {'keep CPU':>9} {'files':>7} {'MB':>7} "
        f"{'read s':>8} {'read CPU':>9} {'keep ratio':>11} {'read ratio':>11}"
    )
    with machine_load(torch.get_num_threads()), tempfile.TemporaryDirectory() as directory:
        for total in args.draws:
            rows = {}
            for name, shard in STORES.items():
                folder = Path(directory) / name
                keep_wall, keep_cpu = keep(folder, draws, total, args.chains, shard)
                files = [p for p in folder.rglob("*") if p.is_file()]
                megabytes = sum(p.stat().st_size for p in files) / 1e6
                if total == max(args.draws):
                    command = [sys.executable, __file__, "--read", str(folder)]
                    out = subprocess.run(command, check=True, capture_output=True, text=True)
                    read_wall, read_cpu, count, grown = map(float, out.stdout.split())
                    print(f"  {name}: peak resident memory grew {grown:.0f} MB reading {total}")
                else:
                    read_wall, read_cpu, count = read(folder)
                assert count == total, (count, total)
                rows[name] = (keep_wall, keep_cpu, len(files), megabytes, read_wall, read_cpu)
                shutil.rmtree(folder)
            for name, (kw, kc, files, mb, rw, rc) in rows.items():
                base = rows["shards"]
                print(
                    f"{total:>7} {name:>14} {kw:>8.3f} {kc:>9.3f} {files:>7} {mb:>7.2f} "
                    f"{rw:>8.3f} {rc:>9.3f} {kw / base[0]:>11.1f} {rw / base[4]:>11.1f}"
                )


if __name__ == "__main__":
    main()

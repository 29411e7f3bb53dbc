"""A run's directory: who owns it, and every file the run writes into it.

One directory is one experiment. `RunDirectory.claim` takes an exclusive lock (released by
the operating system when the process ends, however it ends) and refuses a directory that already
holds another run's samples or checkpoint unless the run is being resumed. Everything else
is written through the methods here: the curve (rewritten from the checkpoint's rows on resume,
so that a resumed run's ``curve.csv`` is the uninterrupted run's), ``metrics.json`` (strict JSON,
with the run's ``status``), the predictive, the samples and the optional wandb mirror.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from bdl import diagnostics
from bdl.atomic import TEMPORARY
from bdl.errors import ConfigError
from bdl.storage.store import (
    PREDICTIVE,
    SampleStore,
    atomic_write,
    make_dir,
    save_predictive,
    write_error,
)

log = logging.getLogger("bdl")

METRICS = "metrics.json"
CHECKPOINT = "checkpoint.safetensors"
CURVE = "curve.csv"
#: Per-chain results of a run of several chains.
CHAINS = "chains.csv"
LOCK = ".bdl.lock"
#: wandb's own folder in a run directory (``wandb.init(dir=...)``).
WANDB = "wandb"
#: What a run writes before its first checkpoint, besides its config: a run resumed without a
#: checkpoint starts again from the beginning without them.
_BEFORE_CHECKPOINT = (
    "samples",
    METRICS,
    CURVE,
    PREDICTIVE,
    CHAINS,
    diagnostics.FILE,
)


#: The statuses of a run that went to its last epoch: resuming it has nothing left to do.
FINAL_STATUSES = ("completed", "unsound")


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def _link_error(path: Path, root: Path) -> ConfigError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return ConfigError(
        f"{path} is a symbolic link{target}: bdl writes, deletes and truncates in the run "
        f"directory {root} only, never through a link; replace the link with the file or folder "
        "itself, or choose another directory"
    )


def _hard_link_error(path: Path, links: int, root: Path) -> ConfigError:
    return ConfigError(
        f"{path} has {links - 1} other hard link(s): bdl writes and appends to the files of the "
        f"run directory {root} only, and this one is also a file elsewhere; replace it with a "
        "copy of its own (cp --remove-destination), or choose another directory"
    )


def refuse_links(root: Path) -> None:
    """Refuse a run directory ``root`` holding a symbolic link at any depth (its samples, its
    checkpoint, ``eval/<label>``, a log, a temporary), or a file with another hard link, before
    anything is written: a write, an append, a deletion or a truncation through it would reach
    files outside the run (a resumed run appends to its log, deletes the samples after its
    checkpoint). ``root`` itself may be a link (a scratch disk);
    a ``wandb/`` folder (a run's, or a sweep's job's), where wandb links its latest run and which
    bdl never writes into, is not looked into."""
    folders = [Path(root)]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_symlink():
                raise _link_error(Path(entry.path), Path(root))
            if entry.is_file(follow_symlinks=False):
                links = entry.stat(follow_symlinks=False).st_nlink
                if links > 1:
                    raise _hard_link_error(Path(entry.path), links, Path(root))
            if entry.is_dir(follow_symlinks=False) and entry.name != WANDB:
                folders.append(Path(entry.path))


def refuse_link_on_path(root: Path, path: Path) -> None:
    """Refuse a ``path`` below ``root`` that is a symbolic link, or lies below one, or resolves
    outside ``root``: what is written there would land elsewhere."""
    root, path = Path(root), Path(path)
    for part in (path, *path.parents):
        if part == root or root not in part.parents:
            break
        if part.is_symlink():
            raise _link_error(part, root)
    if path.exists() and not path.resolve().is_relative_to(root.resolve()):
        raise _link_error(path, root)
    if path.is_file() and path.stat().st_nlink > 1:
        raise _hard_link_error(path, path.stat().st_nlink, root)


class RunDirectory:
    """The output directory of one run. Not a ``writer`` (the ranks but 0 of a run under
    ``torchrun``), it is only read: every write below does nothing, and there is no store."""

    def __init__(self, path: str | Path, writer: bool = True) -> None:
        self.path = Path(path)
        self.writer = writer
        self.checkpoint = self.path / CHECKPOINT
        self._lock: int | None = None

    def claim(self, cfg: DictConfig, resume: bool) -> None:
        """Make this process the directory's only writer; refuse a directory holding another
        run unless ``resume``. Resuming a run that never reached its first checkpoint starts it
        again from the beginning (`_start_afresh`). Writes the run's config (``.hydra/``)
        on every start from the beginning."""
        make_dir(self.path)
        refuse_links(self.path)
        try:
            self._lock = _lock(self.path / LOCK)
        except OSError as error:
            raise write_error(self.path / LOCK, error) from None
        if self._lock is None:
            raise ConfigError(
                f"another bdl-run is writing into {self.path}: wait for it, or give this run its "
                "own directory (hydra.run.dir=...)"
            )
        try:
            self._take_over(cfg, resume)
        except BaseException:
            self.release()  # a refused run lets the next one in this process claim it
            raise

    def _take_over(self, cfg: DictConfig, resume: bool) -> None:
        self.remove_temporaries()
        if resume and self.checkpoint.exists():
            return
        # A run worth keeping has samples or a checkpoint; one stopped before either (a partial
        # curve, a failed start, empty chain folders) has nothing to continue, and a fresh run
        # replaces it.
        held = [CHECKPOINT] if self.checkpoint.exists() else []
        samples = self.path / "samples"
        if samples.is_dir() and any(p.is_file() for p in samples.rglob("*")):
            held.append("samples/")
        if held and not resume:
            raise ConfigError(
                f"{self.path} already holds a run ({', '.join(held)}): add resume=true to "
                "continue it, or give this run a fresh directory (hydra.run.dir=...)"
            )
        if resume and self.read_status() in FINAL_STATUSES:
            raise ConfigError(
                f"{self.path} holds a completed run whose {CHECKPOINT} is gone: there is "
                "nothing to resume; give a new run a fresh directory (hydra.run.dir=...)"
            )
        self._start_afresh(resume)
        self._write_config(cfg)

    def _start_afresh(self, resume: bool) -> None:
        """Remove what a run writes before its first checkpoint (samples, curve, a status, the
        outputs of a chain that diverged): without a checkpoint none of it can be continued, and
        the run taken again from the beginning writes it all anew, bitwise as before."""
        left = [self.path / name for name in _BEFORE_CHECKPOINT if (self.path / name).exists()]
        if resume:
            log.warning(
                "%s has no checkpoint: starting the run from the beginning%s",
                self.path,
                f", discarding {', '.join(p.name for p in left)}" if left else "",
            )
        for path in left:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def remove_temporaries(self) -> None:
        """The temporary files of writes that a kill interrupted (`bdl.atomic`); only the
        directory's owner may remove them, since another process's write may be under way."""
        if not self.writer or self._lock is None:
            return
        for folder in (self.path, self.path / ".hydra"):
            if folder.is_dir():
                for path in folder.glob(TEMPORARY):
                    path.unlink(missing_ok=True)

    def _write_config(self, cfg: DictConfig) -> None:
        """``.hydra/config.yaml`` (and, under Hydra, ``hydra.yaml`` and ``overrides.yaml``), as
        Hydra writes them, but only once the directory is ours (``hydra.output_subdir: null``
        stops Hydra overwriting another run's)."""
        from hydra.core.hydra_config import HydraConfig

        files = {"config.yaml": cfg}
        if HydraConfig.initialized():
            hydra = HydraConfig.get()
            files["hydra.yaml"] = OmegaConf.create({"hydra": hydra})
            files["overrides.yaml"] = OmegaConf.create(list(hydra.overrides.task))
        folder = self.path / ".hydra"
        folder.mkdir(exist_ok=True)
        for name, node in files.items():
            atomic_write(folder / name, OmegaConf.to_yaml(node).encode())

    def store_folders(self, chains: int) -> list[Path]:
        """Where each of ``chains`` chains keeps its samples: ``samples/`` for one,
        ``samples/chain_<k>/`` for several (as `bdl.analysis.posterior.chain_stores` reads them)."""
        samples = self.path / "samples"
        return [samples] if chains == 1 else [samples / f"chain_{k}" for k in range(chains)]

    def open_stores(self, chains: int) -> list[SampleStore] | None:
        """The sample store of each of ``chains`` chains (`store_folders`). They flush to disk
        when synced, which the runner does before each checkpoint."""
        if not self.writer:
            return None
        return [SampleStore(folder, fsync_each=False) for folder in self.store_folders(chains)]

    def write_curve(self, fields: list[str], rows: list[dict[str, Any]]) -> None:
        """``curve.csv`` with ``rows``, replaced atomically."""
        self.write_table(CURVE, fields, rows)

    def write_table(self, name: str, fields: list[str], rows: list[dict[str, Any]]) -> None:
        """The CSV file ``name`` with ``rows``, replaced atomically."""
        if not self.writer:
            return
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.path / name, text.getvalue().encode())

    def append_curve(self, fields: list[str], rows: list[dict[str, Any]]) -> None:
        if not self.writer or not rows:
            return
        with (self.path / CURVE).open("a", newline="") as file:
            csv.DictWriter(file, fieldnames=fields, lineterminator="\n").writerows(rows)

    def write_metrics(self, metrics: dict[str, Any]) -> None:
        if not self.writer:
            return
        text = json.dumps(strict_json(metrics), indent=2, allow_nan=False) + "\n"
        atomic_write(self.path / METRICS, text.encode())

    def record_failure(self, cfg: DictConfig, error: str) -> None:
        """``metrics.json`` with status ``failed``, and the config, for a run that failed before
        writing them (a sweep's job whose config was refused), so that ``bdl-report`` lists it;
        unless another run holds the directory."""
        if (self.path / METRICS).exists() or not self.path.is_dir():
            return
        try:
            refuse_links(self.path)
        except ConfigError:
            return  # claim refused the link already, and the sweep's summary lists the job
        try:
            fd = _lock(self.path / LOCK)
        except OSError:
            return  # a directory we cannot write to: the sweep's summary still lists the job
        if fd is None:
            return
        try:
            if not (self.path / ".hydra" / "config.yaml").exists():
                self._write_config(cfg)
            self.write_metrics({"status": "failed", "error": error})
        finally:
            os.close(fd)

    def read_metrics(self) -> dict[str, Any]:
        """``metrics.json`` as written, or {} where there is none (or it is not a JSON object)."""
        try:
            metrics = json.loads((self.path / METRICS).read_text())
        except (OSError, ValueError):
            return {}
        return metrics if isinstance(metrics, dict) else {}

    def read_status(self) -> str | None:
        return self.read_metrics().get("status")

    def write_predictive(self, predictive: Tensor, targets: Tensor) -> None:
        if not self.writer:
            return
        save_predictive(self.path / PREDICTIVE, predictive, targets=targets)

    def release(self) -> None:
        self.remove_temporaries()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _lock(path: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (created if need be), held until its descriptor is
    closed or the process ends; None if another process holds it. By hand, not filelock's:
    a directory it cannot write to must stay an OSError here, not a lock held elsewhere, and
    filelock's reentrancy and fork rules changed between the 3.x and 4.x versions bdl allows."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def start_wandb(cfg: DictConfig, directory: Path, run_id: str | None):
    """The wandb mirror of the curve and metrics, or None (``wandb.mode=disabled``). A resumed
    run continues its wandb run (``run_id``)."""
    if cfg.wandb.mode == "disabled":
        return None
    if cfg.wandb.mode == "online" and not _wandb_key_configured():
        raise ConfigError(
            "wandb.mode=online needs a W&B account: run `wandb login` (or set WANDB_API_KEY), "
            "or use wandb.mode=offline (no account or network; `wandb sync` later)"
        )
    import wandb  # imported only when asked for: it is slow to import

    try:
        return wandb.init(
            mode=cfg.wandb.mode,
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            dir=str(directory),
            id=run_id,
            **wandb_labels(cfg, directory),
            resume="allow" if run_id else None,
            config=OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            settings=wandb.Settings(init_timeout=30),
        )
    except Exception as error:  # wandb raises its own zoo of network and auth errors
        raise ConfigError(
            f"wandb.mode={cfg.wandb.mode} failed to start ({type(error).__name__}: {error}): "
            "use wandb.mode=offline, or disabled"
        ) from None


def wandb_labels(cfg: DictConfig, directory: Path) -> dict[str, Any]:
    """The wandb run's name, group, tags and job type: ``cfg.wandb``'s, and where it sets none,
    ``<dataset>-<sampler>-seed<seed>`` (in a sweep, its job's directory, which names the
    overrides) and, in a sweep, the sweep's directory as the group. Tagged with the dataset and
    sampler options."""
    dataset, sampler = _choice(cfg, "dataset"), _choice(cfg, "sampler")
    sweep = _sweep_directory()
    name = cfg.wandb.name or (
        Path(directory).name if sweep else f"{dataset}-{sampler}-seed{cfg.seed}"
    )
    return {
        "name": name,
        "group": cfg.wandb.group or sweep,
        "tags": list(dict.fromkeys([dataset, sampler, *cfg.wandb.tags])),
        "job_type": cfg.wandb.job_type,
    }


def _choice(cfg: DictConfig, group: str) -> str:
    """The option of ``group`` the command chose (``sampler=sgld`` gives ``sgld``); outside
    Hydra's command line, the group's ``name`` or else its target's module (``bdl.data.mnist``'s
    ``mnist``)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return HydraConfig.get().runtime.choices[group]
    return str(cfg[group].get("name") or cfg[group]._target_.split(".")[-2])


def _sweep_directory() -> str | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return HydraConfig.get().sweep.dir
    return None


def wandb_row(row: dict[str, Any], headline: str) -> dict[str, Any]:
    """A curve row under the names a wandb chart needs: the test metric under its own name
    (``test_rmse``, ``test_accuracy``), no blank accept rate or metric (burn-in)."""
    named = {headline if key == "test_metric" else key: value for key, value in row.items()}
    return {key: value for key, value in named.items() if value != "" and value is not None}


def _wandb_key_configured() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


#: The rows of the table that ends a run, in order: what a reader checks first.
SUMMARY_KEYS = (
    "test_accuracy",
    "test_nll",
    "test_rmse",
    "test_ll",
    "val_accuracy",
    "val_rmse",
    "agreement",
    "total_variation",
    "num_samples",
    "accept_rate",
    "divergences",
    "step_scale",
    "ess_bulk_min",
    "ess_tail_min",
    "rhat_max",
    "potential_rhat",
    "wall_time_s",
)


def summary_table(metrics: dict[str, Any]) -> str:
    """The end of a run's log: its status and headline metrics, rounded to 4 significant digits,
    each test metric beside the trivial predictor's (``metrics.json`` has them all, unrounded)."""
    trivial = metrics.get("trivial", {})
    lines = [f"{metrics['status']} (metrics.json):"]
    for key in SUMMARY_KEYS:
        if key not in metrics:
            continue
        value = metrics[key]
        shown = "n/a (not measurable)" if value is None else f"{value:.4g}"
        if key in trivial:
            shown += f"   trivial predictor {trivial[key]:.4g}"
        lines.append(f"  {key:<16}{shown}")
    if "converged" in metrics:
        count = len(metrics["reasons"])
        plural = "s" if count != 1 else ""
        verdict = "YES" if metrics["converged"] else f"NO ({count} cause{plural} below)"
        lines.append(f"  {'converged':<16}{verdict}")
    return "\n".join(lines)

"""The GPU check in one command: bdl's CUDA tests, its benchmarks on the GPU and a short real run,
every figure in one results file, within 8 minutes of one H100.

    python scripts/gpu_check.py bundle [--bundle .gpu-bundle] [--data DIR]   # make gpu-bundle
    python scripts/gpu_check.py check [--bundle .gpu-bundle] [--out DIR] [--dry]   # make gpu-check

``bundle`` (here, with network) writes what a GPU machine without network needs and its image
lacks: the wheels of `WHEELS` at this environment's versions for CPython 3.12 on x86-64
Linux, one version each, and the four original archives of MNIST and of Fashion-MNIST (an MNIST
run's out-of-distribution set), with a manifest of their sha256.

``check`` (there) installs them without network (pip ``--no-index``; bdl itself ``--no-deps``),
prints the GPU, torch and CUDA versions, runs ``pytest -m gpu``, the benchmarks on ``--device
cuda``, ResNet-20-FRN's images per second eager and compiled, and SGHMC on MNIST (Chen et al.
2014's setup) for a few epochs on the GPU and on the CPU, each part in its own process under its
own time budget: a part that fails or runs out of time is recorded and the next one starts. It
writes ``gpu_check.md`` (each part's status, seconds and output) into ``--out`` (``$OUT`` where
that is set). Without CUDA (or with ``--dry``) it checks the bundle, installs nothing and runs the
same parts on the CPU at tiny sizes: a check of the script, not a measurement.

Stdlib only until the install: the GPU image has no Hydra.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / ".gpu-bundle"
#: What bdl needs beyond the GPU image's packages (the device guide lists the image's): Hydra,
#: its config library and the parser runtime of both (antlr4 4.9, an sdist alone on PyPI, built
#: here into a pure-Python wheel); arviz (R-hat and ESS of every run of several chains) and the
#: three of its dependencies the image lacks; laplace-torch (sampler=laplace) and the five of its.
#: wandb is left out: bdl imports it only for wandb.mode other than disabled.
WHEELS = (
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
    "arviz",
    "xarray-einstats",
    "h5netcdf",
    "platformdirs",
    "laplace-torch",
    "asdfghjkl",
    "backpack-for-pytorch",
    "curvlinops-for-pytorch",
    "einconv",
    "unfoldNd",
)
#: bdl's requirements that the check does not need installed (imported only when asked for).
OPTIONAL = {"wandb"}
MNIST = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)
#: The folders of the IDX datasets bundled (their loaders' ``SOURCE.folder``), each four archives
#: named as MNIST's: MNIST, and Fashion-MNIST, which an MNIST run reads as its
#: out-of-distribution inputs (``ood=fashion_mnist``, the default).
IDX_FOLDERS = ("MNIST", "FashionMNIST")
#: What travels to the device machine at most: the working tree and the carried folders together.
LIMIT = 64 * 2**20
#: The target: CPython 3.12 on x86-64 Linux (the device image's).
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: Where the check installs the bundle and bdl on the GPU machine (pip --target, as the device
#: guide does; every part runs with it on PYTHONPATH): the image's own environment is left as it is.
SITE = Path(tempfile.gettempdir()) / "bdl-gpu-site"
#: The whole check's time on the GPU: 8 minutes, less a margin for the machine's own start.
TOTAL_SECONDS = 470


def normalise(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_tags(filename: str) -> tuple[str, str, str, str]:
    """``(name, python tag, abi tag, platform tag)`` of a wheel's file name (PEP 427)."""
    parts = filename[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise ValueError(f"{filename} is not a wheel's file name")
    return normalise(parts[0]), parts[-3], parts[-2], parts[-1]


def installs_on_the_gpu_image(filename: str) -> bool:
    """Whether pip on CPython 3.12, x86-64 Linux, takes this wheel."""
    _, python, abi, platform = wheel_tags(filename)
    pythons = set(python.split("."))
    return (
        bool(pythons & {"py3", "py312", "cp312"})
        and abi in {"none", "abi3", "cp312"}
        and all(p == "any" or re.fullmatch(r"manylinux\w*_x86_64", p) for p in platform.split("."))
    )


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_bytes() -> int:
    """Bytes of the working tree that travels: tracked and untracked files git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum(
        (ROOT / os.fsdecode(p)).stat().st_size for p in listed if (ROOT / os.fsdecode(p)).is_file()
    )


def write_manifest(bundle: Path) -> dict:
    """``manifest.json``: the sha256 of every wheel and data file of ``bundle``, and their bytes."""
    files = sorted(p for p in bundle.rglob("*") if p.is_file() and p.name != "manifest.json")
    manifest = {
        "python": "3.12",
        "files": {p.relative_to(bundle).as_posix(): sha256(p) for p in files},
        "bytes": sum(p.stat().st_size for p in files),
    }
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def verify_bundle(bundle: Path) -> list[str]:
    """What is wrong with ``bundle`` (nothing: an empty list): files missing, altered or not
    listed, a wheel pip on the GPU image would refuse, two versions of one package, a package of
    `WHEELS` or an archive of `IDX_FOLDERS` missing, a bundle over `LIMIT`."""
    path = bundle / "manifest.json"
    if not path.is_file():
        return [f"{bundle} has no manifest.json: make gpu-bundle writes it"]
    manifest = json.loads(path.read_text())
    problems = []
    for name, digest in manifest["files"].items():
        file = bundle / name
        if not file.is_file():
            problems.append(f"{name} is missing")
        elif sha256(file) != digest:
            problems.append(f"{name} is altered or incomplete (its sha256 is not the manifest's)")
    present = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    for name in sorted(present - set(manifest["files"]) - {"manifest.json"}):
        problems.append(f"{name} is not in the manifest")
    versions: dict[str, list[str]] = {}
    for name in manifest["files"]:
        if name.startswith("wheels/"):
            wheel = name.removeprefix("wheels/")
            versions.setdefault(wheel_tags(wheel)[0], []).append(wheel)
            if not installs_on_the_gpu_image(wheel):
                problems.append(f"{wheel} is not for CPython 3.12 on x86-64 Linux")
    for package, wheels in sorted(versions.items()):
        if len(wheels) > 1:
            problems.append(f"{package} has {len(wheels)} wheels ({', '.join(wheels)}): keep one")
    for package in sorted({normalise(w) for w in WHEELS} - set(versions)):
        problems.append(f"no wheel of {package}")
    for folder in IDX_FOLDERS:
        for name in MNIST:
            if f"data/{folder}/raw/{name}" not in manifest["files"]:
                problems.append(f"data/{folder}/raw/{name} is missing")
    if manifest["bytes"] >= LIMIT:
        problems.append(f"{manifest['bytes'] / 2**20:.1f} MiB: over the 64 MiB that travels")
    return problems


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def make_bundle(bundle: Path, data: Path) -> None:
    """Write the bundle (see the module's docstring); the wheels at this environment's versions."""
    from importlib.metadata import PackageNotFoundError, version

    from bdl.data import fashion_mnist, mnist

    wheels = bundle / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    try:
        wanted = {normalise(name): version(name) for name in WHEELS}
    except PackageNotFoundError as missing:
        sys.exit(
            f"gpu-bundle: {missing.name} is not installed here, and the bundle takes this "
            "environment's versions: install bdl with its dev extras (pip install -e '.[dev]')"
        )
    for old in wheels.glob("*.whl"):
        name = wheel_tags(old.name)[0]
        if wanted.get(name) != old.name.split("-")[1]:
            old.unlink()  # another version, or a package no longer bundled
    have = {wheel_tags(p.name)[0] for p in wheels.glob("*.whl")}
    for name, pinned in wanted.items():
        if name in have:
            continue
        platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        try:
            target = ["--python-version", "3.12", "--implementation", "cp", *platforms]
            pip(
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                *target,
                "-d",
                str(wheels),
                f"{name}=={pinned}",
            )
        except subprocess.CalledProcessError:  # an sdist alone: build it, pure Python or refuse
            pip("wheel", "--quiet", "--no-deps", "-w", str(wheels), f"{name}=={pinned}")
    for source in (mnist.SOURCE, fashion_mnist.SOURCE):  # as IDX_FOLDERS lists them
        raw = bundle / "data" / source.folder / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        for name in MNIST:
            archive = data / source.folder / "raw" / name
            if not archive.is_file():
                sys.exit(f"gpu-bundle: {archive} is missing: set BDL_DATA_DIR to the real data")
            # the loader's own check: the archive's md5, or the decompressed original's
            if not source.verified(archive):
                sys.exit(f"gpu-bundle: {archive} is not the original (md5 check failed)")
            shutil.copyfile(archive, raw / name)
    manifest = write_manifest(bundle)
    problems = verify_bundle(bundle)
    tree = tree_bytes()
    print(
        f"{bundle}: {len(list(wheels.glob('*.whl')))} wheels, MNIST and Fashion-MNIST, "
        f"{manifest['bytes'] / 2**20:.1f} MiB; with the working tree ({tree / 2**20:.1f} MiB) "
        f"{(manifest['bytes'] + tree) / 2**20:.1f} MiB of the 64 that travel"
    )
    if manifest["bytes"] + tree >= LIMIT:
        problems.append("the bundle and the working tree are over the 64 MiB that travel")
    if problems:
        sys.exit("gpu-bundle: " + "; ".join(problems))


# --- the check ------------------------------------------------------------------------------


@dataclasses.dataclass
class Part:
    name: str
    budget: float  # seconds
    command: list[str]
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # beside the check's own


@dataclasses.dataclass
class Outcome:
    name: str
    status: str  # ok, failed (exit code), timeout, skipped
    seconds: float
    budget: float
    output: str


def run_part(part: Part, timeout: float, env: dict[str, str]) -> Outcome:
    """``part``'s command in a session of its own, killed with its children after ``timeout``."""
    start = time.monotonic()
    process = subprocess.Popen(
        part.command,
        cwd=ROOT,
        env={**env, **part.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        status = "ok" if process.returncode == 0 else f"failed (exit code {process.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = f"timeout (killed after {timeout:.0f} s)"
    return Outcome(part.name, status, time.monotonic() - start, part.budget, output)


def run_parts(parts: list[Part], env: dict[str, str], results: Path, total: float) -> list[Outcome]:
    """Each part in turn within its budget and what is left of ``total``; every outcome is
    printed and written to ``results`` as soon as it is known (a check killed from outside
    keeps the parts it finished)."""
    deadline = time.monotonic() + total
    outcomes: list[Outcome] = []
    for part in parts:
        left = deadline - time.monotonic()
        if left < 5:
            outcomes.append(Outcome(part.name, "skipped (out of time)", 0.0, part.budget, ""))
        else:
            print(
                f"== {part.name} (budget {part.budget:.0f} s): {' '.join(part.command)}", flush=True
            )
            outcomes.append(run_part(part, min(part.budget, left), env))
            print(outcomes[-1].output, end="", flush=True)
            print(
                f"== {part.name}: {outcomes[-1].status}, {outcomes[-1].seconds:.1f} s", flush=True
            )
        write_results(results, outcomes)
    return outcomes


def write_results(path: Path, outcomes: list[Outcome]) -> None:
    lines = [
        "# make gpu-check",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {sum(o.seconds for o in outcomes):.1f} s in all",
        "",
        "| part | status | seconds | budget |",
        "| --- | --- | ---: | ---: |",
        *(f"| {o.name} | {o.status} | {o.seconds:.1f} | {o.budget:.0f} |" for o in outcomes),
    ]
    for o in outcomes:
        lines += [
            "",
            f"## {o.name}: {o.status}, {o.seconds:.1f} s",
            "",
            "```",
            o.output.rstrip(),
            "```",
        ]
    path.write_text("\n".join(lines) + "\n")


def plan(device: str, python: str, bundle: Path) -> list[Part]:
    """The parts of the check; on ``cuda`` at the sizes measured, on the CPU (a dry run of the
    script) at tiny ones, each through the same command."""
    gpu = device == "cuda"
    me = [python, str(Path(__file__).resolve())]
    scripts = ROOT / "scripts"
    # dry: 200 training images (the rest held out), one round of each timing
    few = [] if gpu else ["dataset.validation=59800"]
    rounds = ["--rounds", "3" if gpu else "1"]
    # each compiled function's kernels recorded as a CUDA graph and replayed by one launch
    graphs = ["compile=true", "compile_mode=reduce_overhead"]
    return [
        Part("install", 30, [*me, "install", "--bundle", str(bundle), "--device", device]),
        Part("versions", 8, [*me, "versions"]),
        Part(
            "pytest -m gpu",
            170,
            [
                python,
                "-m",
                "pytest",
                "-m",
                "gpu",
                "tests/gpu",
                "-v",
                "-rfEs",
                "-p",
                "no:cacheprovider",
                "--durations=10",
            ]
            # four workers share the GPU: each test's CPU twin and Python overhead dominate, and
            # the machine has 16 cores (one process took 250 s, over its budget, on an H100).
            # dry: the suite collected, not run (tens of minutes on the CPU; most of its bodies
            # are the CPU tests' own, which the default suite runs)
            + (["-n", "4"] if gpu else ["--collect-only", "-q"]),
            {} if gpu else {"BDL_TEST_DEVICE": "cpu"},
        ),
        Part(
            "SGHMC on MNIST, Chen et al. (2014)",
            40,
            # dry: 1000 generated training images, the fewest that twelve epochs of SGHMC learn
            # well enough to beat the trivial predictor (as in tests/runner/test_stability.py)
            [*me, "chen", "--epochs", "5" if gpu else "12", "--device", device]
            + ([] if gpu else ["dataset.validation=59000"]),
        ),
        Part(
            "bench.py: SGHMC epoch compiled as CUDA graphs vs bare SGD-momentum",
            45,
            [python, str(scripts / "bench.py"), "--device", device, *rounds, "--set", *few]
            # dry: eager (a compile on the CPU takes a minute)
            + (graphs if gpu else []),
        ),
        Part(
            "bench_hmc.py: leapfrog step vs bare forward and backward",
            25,
            [python, str(scripts / "bench_hmc.py"), "--device", device, *rounds, "--set", *few],
        ),
        Part(
            "bench_bbb.py: BBB step vs SGD step, 784-1200-1200-10",
            25,
            [python, str(scripts / "bench_bbb.py"), "--device", device, *rounds]
            + (["--steps", "20"] if gpu else ["--steps", "2", "--hidden", "16"]),
        ),
        Part(
            "bench_ess.py: 16 stacked yacht chains compiled as CUDA graphs, ESS/s vs one chain",
            37,
            [python, str(scripts / "bench_ess.py"), "--device", device, "--singles", "1"]
            + (["--chains", "16", "--epochs", "200", "--burn-in", "50", *graphs] if gpu else [])
            # dry: two eager chains, a few iterations
            + ([] if gpu else ["--chains", "2", "--epochs", "20", "--burn-in", "10"]),
        ),
        Part(
            "bench_resnet.py: ResNet-20-FRN SGHMC images/s, eager and compiled",
            90,
            [python, str(scripts / "bench_resnet.py"), "--device", device]
            # dry: eager alone (a compile on the CPU takes a minute)
            + (["--rounds", "2"] if gpu else ["--rounds", "1", "--images", "100", "--width", "4"])
            + ([] if gpu else ["--batch-size", "20", "--modes", "eager"]),
        ),
    ]


def install(bundle: Path, device: str) -> None:
    """The bundle's wheels that this Python lacks, then bdl from this checkout, no network; then
    every requirement of bdl is checked. Without CUDA nothing is installed: the bundle is
    checked, and the requirements against this environment."""
    from importlib.metadata import PackageNotFoundError, version

    if bundle.exists():
        problems = verify_bundle(bundle)
        for problem in problems:
            print(f"bundle: {problem}")
        print(f"bundle {bundle}: {'sound' if not problems else 'broken'}")
    else:
        problems = [] if device != "cuda" else [f"no bundle at {bundle}"]
        print(f"no bundle at {bundle} (make gpu-bundle writes it on a machine with network)")
    if device == "cuda" and not problems:

        def installed(name: str) -> bool:
            try:
                version(name)
            except PackageNotFoundError:
                return False
            return True

        wheels = sorted((bundle / "wheels").glob("*.whl"))
        missing = [str(w) for w in wheels if not installed(wheel_tags(w.name)[0])]
        common = ["install", "--quiet", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
        common += ["--target", str(SITE)]
        if missing:
            pip(*common, *missing)
        print(f"installed {len(missing)} of the bundle's {len(wheels)} wheels; the rest were there")
        # bdl from this checkout, built anew at each check (--upgrade replaces an earlier one)
        pip(*common, "--no-build-isolation", "--upgrade", str(ROOT))
    script = (
        "import importlib.metadata as m, re\n"
        "missing = []\n"
        "for r in m.requires('bdl'):\n"
        "    if 'extra ==' in r: continue\n"
        "    name = re.split('[<>=!~; ]', r)[0]\n"
        f"    if name in {sorted(OPTIONAL)!r}: continue\n"
        "    try: print(name, m.version(name))\n"
        "    except m.PackageNotFoundError: missing.append(name)\n"
        "raise SystemExit('missing: ' + ', '.join(missing) if missing else 0)\n"
    )
    if subprocess.run([sys.executable, "-c", script]).returncode:
        problems.append("bdl's requirements are not all installed")
    if problems:
        sys.exit("install: " + "; ".join(problems))


def versions() -> None:
    import torch

    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        print(
            f"GPU {properties.name}, {properties.total_memory / 2**30:.1f} GiB, "
            f"{properties.multi_processor_count} multiprocessors, capability "
            f"{properties.major}.{properties.minor}; cuDNN {torch.backends.cudnn.version()}; "
            f"{torch.cuda.device_count()} device(s)"
        )
        smi = shutil.which("nvidia-smi")
        if smi:
            query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
            print(subprocess.run([smi, *query], capture_output=True, text=True).stdout, end="")
    else:
        print("no CUDA device: a dry run on the CPU")


def chen(device: str, epochs: int, overrides: list[str]) -> None:
    """SGHMC on MNIST in Chen et al. (2014)'s setup for ``epochs`` (one of burn-in) on ``device``
    and on the CPU, the same seed: their test errors side by side (the GPU draws other numbers
    than the CPU, so they agree to Monte Carlo error, not to rounding)."""
    errors = {}
    with tempfile.TemporaryDirectory() as directory:
        for where in dict.fromkeys([device, "cpu"]):
            args = ["experiment=chen2014_mnist", "sampler=sghmc", f"epochs={epochs}"]
            args += [f"burn_in={epochs - 1}", f"device={where}", *overrides]
            out = Path(directory) / where
            start = time.monotonic()
            command = [sys.executable, "-m", "bdl.cli", *args, f"hydra.run.dir={out}"]
            subprocess.run(command, check=True, cwd=directory)
            metrics = json.loads((out / "metrics.json").read_text())
            errors[where] = (1 - metrics["test_accuracy"], time.monotonic() - start)
            print(" ".join(args))
    for where, (error, seconds) in errors.items():
        print(
            f"SGHMC on MNIST, {epochs} epochs on {where}: test error {error:.4f}, {seconds:.1f} s"
        )


def check(args: argparse.Namespace) -> None:
    import torch

    device = "cpu" if args.dry or not torch.cuda.is_available() else "cuda"
    out = Path(args.out or os.environ.get("OUT") or ROOT / "outputs" / "gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    data = args.data or (args.bundle / "data" if (args.bundle / "data").is_dir() else None)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "0"}
    env["BDL_CACHE_DIR"] = tempfile.mkdtemp(prefix="bdl-gpu-check-cache.")
    if data is not None:
        env["BDL_DATA_DIR"] = str(Path(data).resolve())
    if device == "cuda":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH")]))
    parts = plan(device, sys.executable, args.bundle)
    if args.only:
        parts = [p for p in parts if any(word in p.name for word in args.only)]
    print(f"gpu-check on {device}; results in {out / 'gpu_check.md'}", flush=True)
    outcomes = run_parts(parts, env, out / "gpu_check.md", args.total)
    shutil.rmtree(env["BDL_CACHE_DIR"], ignore_errors=True)
    print(f"results: {out / 'gpu_check.md'}")
    for o in outcomes:
        print(f"  {o.name}: {o.status}, {o.seconds:.1f} s (budget {o.budget:.0f})")
    if any(o.status != "ok" for o in outcomes):
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bundle = commands.add_parser("bundle", help="write the bundle (here, with network)")
    bundle.add_argument("--bundle", type=Path, default=BUNDLE)
    bundle.add_argument("--data", type=Path, default=os.environ.get("BDL_DATA_DIR"))
    run = commands.add_parser("check", help="the check (on the GPU; dry on the CPU)")
    run.add_argument("--bundle", type=Path, default=BUNDLE)
    run.add_argument("--out", type=Path, help="the results' folder (default $OUT, else outputs/)")
    run.add_argument("--data", type=Path, help="the data root (default: the bundle's)")
    run.add_argument("--dry", action="store_true", help="on the CPU at tiny sizes, even with CUDA")
    run.add_argument("--total", type=float, default=TOTAL_SECONDS, help="seconds for all parts")
    run.add_argument("--only", nargs="+", help="the parts whose names hold one of these words")
    setup = commands.add_parser("install", help="a part: install the bundle")
    setup.add_argument("--bundle", type=Path, default=BUNDLE)
    setup.add_argument("--device", default="cuda")
    commands.add_parser("versions", help="a part: the GPU, torch and CUDA")
    real = commands.add_parser("chen", help="a part: SGHMC on MNIST on the device and the CPU")
    real.add_argument("--device", default="cuda")
    real.add_argument("--epochs", type=int, default=5)
    real.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.command == "bundle":
        if args.data is None:
            sys.exit("gpu-bundle: set BDL_DATA_DIR (or --data) to the folder holding MNIST/raw/")
        make_bundle(args.bundle, Path(args.data))
    elif args.command == "check":
        check(args)
    elif args.command == "install":
        install(args.bundle, args.device)
    elif args.command == "versions":
        versions()
    else:
        chen(args.device, args.epochs, args.overrides)


if __name__ == "__main__":
    main()

"""scripts/gpu_check.py on a machine without a GPU: the bundle's check, the parts run in turn
within their budgets, the plan of the GPU run and of its dry run; and the dry run itself."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = sys.modules["gpu_check"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def fake_bundle(root: Path) -> Path:
    """A bundle of the right names: a small file for each wheel and for each archive of MNIST
    and Fashion-MNIST."""
    for name in gpu_check.WHEELS:
        (root / "wheels").mkdir(parents=True, exist_ok=True)
        (root / "wheels" / f"{name.replace('-', '_')}-1.0-py3-none-any.whl").write_bytes(b"w")
    for folder in ("MNIST", "FashionMNIST"):
        raw = root / "data" / folder / "raw"
        raw.mkdir(parents=True)
        for name in gpu_check.MNIST:
            (raw / name).write_bytes(name.encode())
    gpu_check.write_manifest(root)
    return root


def test_a_sound_bundle_passes(tmp_path):
    assert gpu_check.verify_bundle(fake_bundle(tmp_path)) == []


def test_the_bundle_check_names_each_problem(tmp_path):
    bundle = fake_bundle(tmp_path)
    wheels = bundle / "wheels"
    (wheels / "omegaconf-1.0-py3-none-any.whl").write_bytes(b"altered")
    (wheels / "hydra_core-1.4-py3-none-any.whl").write_bytes(b"a second version")
    (bundle / "data" / "MNIST" / "raw" / gpu_check.MNIST[0]).unlink()
    (bundle / "data" / "FashionMNIST" / "raw" / gpu_check.MNIST[3]).unlink()
    (wheels / "arviz-1.0-py3-none-any.whl").unlink()
    (wheels / "numpy-2.0-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"")
    assert sorted(gpu_check.verify_bundle(bundle)) == sorted(
        [
            "wheels/arviz-1.0-py3-none-any.whl is missing",
            f"data/MNIST/raw/{gpu_check.MNIST[0]} is missing",
            f"data/FashionMNIST/raw/{gpu_check.MNIST[3]} is missing",
            "wheels/omegaconf-1.0-py3-none-any.whl is altered or incomplete (its sha256 is not the "
            "manifest's)",
            "wheels/hydra_core-1.4-py3-none-any.whl is not in the manifest",
            "wheels/numpy-2.0-cp311-cp311-manylinux_2_17_x86_64.whl is not in the manifest",
        ]
    )
    gpu_check.write_manifest(bundle)  # what is there now, listed
    assert sorted(gpu_check.verify_bundle(bundle)) == sorted(
        [
            "numpy-2.0-cp311-cp311-manylinux_2_17_x86_64.whl is not for CPython 3.12 on x86-64 "
            "Linux",
            "hydra-core has 2 wheels (hydra_core-1.0-py3-none-any.whl, "
            "hydra_core-1.4-py3-none-any.whl): keep one",
            "no wheel of arviz",
            f"data/MNIST/raw/{gpu_check.MNIST[0]} is missing",
            f"data/FashionMNIST/raw/{gpu_check.MNIST[3]} is missing",
        ]
    )
    assert gpu_check.verify_bundle(tmp_path / "nowhere") == [
        f"{tmp_path / 'nowhere'} has no manifest.json: make gpu-bundle writes it"
    ]


@pytest.mark.parametrize(
    ("filename", "takes"),
    [
        ("antlr4_python3_runtime-4.9.3-py3-none-any.whl", True),
        ("six-1.16.0-py2.py3-none-any.whl", True),
        ("numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("pydantic_core-2.2-cp312-abi3-manylinux_2_28_x86_64.whl", True),
        ("numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl", False),
        ("numpy-2.1.0-cp312-cp312-manylinux_2_17_aarch64.whl", False),
        ("numpy-2.1.0-cp312-cp312-macosx_14_0_arm64.whl", False),
        ("lib-1.0-1-cp312-cp312-musllinux_1_1_x86_64.whl", False),
    ],
)
def test_which_wheels_install_on_the_gpu_image(filename, takes):
    assert gpu_check.installs_on_the_gpu_image(filename) is takes


def test_the_parts_run_in_turn_each_within_its_budget(tmp_path):
    """A failure and a part past its budget are recorded, and the next part runs."""
    python = [sys.executable, "-c"]
    parts = [
        gpu_check.Part("prints", 10, [*python, "print('4.2 images/s')"]),
        gpu_check.Part("fails", 10, [*python, "raise SystemExit(3)"]),
        gpu_check.Part(
            "hangs", 0.5, [*python, "import time; print('started', flush=True); time.sleep(60)"]
        ),  # fmt: skip
        gpu_check.Part(
            "reads its env", 10, [*python, "import os; print(os.environ['PART'])"], {"PART": "mine"}
        ),  # fmt: skip
    ]
    results = tmp_path / "gpu_check.md"
    outcomes = gpu_check.run_parts(parts, dict(os.environ), results, total=60)
    status = {o.name: o.status for o in outcomes}
    assert status["prints"] == "ok" and outcomes[0].output == "4.2 images/s\n"
    assert status["fails"] == "failed (exit code 3)"
    assert status["hangs"] == "timeout (killed after 0 s)" and outcomes[2].output == "started\n"
    assert outcomes[2].seconds < 10
    assert status["reads its env"] == "ok" and outcomes[3].output == "mine\n"
    text = results.read_text()
    assert "| prints | ok |" in text and "4.2 images/s" in text
    assert "| fails | failed (exit code 3) |" in text


def test_a_part_with_under_five_seconds_of_the_total_left_is_skipped(tmp_path):
    parts = [gpu_check.Part(str(i), 10, [sys.executable, "-c", "pass"]) for i in range(2)]
    outcomes = gpu_check.run_parts(parts, dict(os.environ), tmp_path / "r.md", total=4)
    assert [o.status for o in outcomes] == ["skipped (out of time)"] * 2


def test_the_gpu_plan_fits_eight_minutes_and_the_dry_plan_runs_the_same_parts():
    bundle = Path(".gpu-bundle")
    gpu = gpu_check.plan("cuda", "python3", bundle)
    dry = gpu_check.plan("cpu", "python3", bundle)
    assert [p.name for p in gpu] == [p.name for p in dry]
    assert sum(p.budget for p in gpu) <= gpu_check.TOTAL_SECONDS <= 8 * 60
    for on_gpu, on_cpu in zip(gpu, dry, strict=True):
        assert on_gpu.command[:2] == on_cpu.command[:2]  # the same script or module
        if "--device" in on_gpu.command:
            assert on_gpu.command[on_gpu.command.index("--device") + 1] == "cuda"
            assert on_cpu.command[on_cpu.command.index("--device") + 1] == "cpu"
    benchmarks = [p for p in gpu if "bench" in p.command[1]]
    assert len(benchmarks) == 5 and all("--device" in p.command for p in benchmarks)


def test_the_dry_run_passes(fake_data_root, tmp_path):
    """``make gpu-check`` without a GPU: every part on the CPU at tiny sizes, against generated
    MNIST; no bundle needed (the install part checks this environment's requirements). About a
    minute of one core, in the default suite all the same: it is the one test of the benchmark
    scripts' command lines, which a GPU window would otherwise be the first to find broken."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "check", "--dry", "--out", str(tmp_path)]
        + ["--bundle", str(tmp_path / "no-bundle"), "--data", str(fake_data_root)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-5000:]
    text = (tmp_path / "gpu_check.md").read_text()
    assert text.count("| ok |") == len(gpu_check.plan("cpu", "python3", Path("b")))
    assert "test error" in text and "images/s" in text

"""The container images install exactly the project's pinned stack.

The Dockerfiles name packages and docker/pins.py fills in the versions from the project's pin
files at build time, so the versions that can still drift are the few written in the Dockerfiles
(the GPU fbgemm, the base images, the interpreter) and the project's own pin files among
themselves; these tests hold all of them together. Fast, no network, no Docker engine.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
IMAGES = ("cuda", "rocm")  # the GPU images, whose Dockerfiles install the pins themselves
# every image, the CPU one too (its venv is scripts/setup_venv.sh's own, verified by pins.py at the end)
ALL_IMAGES = (*IMAGES, "cpu")
PYPROJECT = "pyproject.toml"
REQUIREMENTS_EXTRA = "scripts/requirements-extra.txt"
SETUP_VENV = "scripts/setup_venv.sh"
WORKDIR = "/workspace/mlperf-trainers"


def _load_pins_module():
    spec = importlib.util.spec_from_file_location("mlperf_docker_pins", DOCKER / "pins.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pins_py = _load_pins_module()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# --- the project's pins, read here independently of docker/pins.py --------------------------------


def _spec(spec: str, source: str) -> tuple[str, str]:
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*", spec)
    assert match, f"{source}: '{spec}' is not an exact pin (name==version)"
    return canonical(match.group(1)), match.group(2)


def project_pin_files() -> dict[str, dict[str, str]]:
    """{file: {package: version}} for the three files the CPU venv is built from."""
    project = tomllib.loads((REPO / PYPROJECT).read_text())["project"]
    specs = list(project["dependencies"]) + [s for group in project.get("optional-dependencies", {}).values() for s in group]
    files = {PYPROJECT: dict(_spec(s, PYPROJECT) for s in specs)}
    lines = [line.split("#", 1)[0].strip() for line in (REPO / REQUIREMENTS_EXTRA).read_text().splitlines()]
    files[REQUIREMENTS_EXTRA] = dict(_spec(line, REQUIREMENTS_EXTRA) for line in lines if line)
    quoted = re.findall(r"""["']([A-Za-z0-9][A-Za-z0-9._-]*==[^"'\s]+)["']""", (REPO / SETUP_VENV).read_text())
    files[SETUP_VENV] = dict(_spec(s, SETUP_VENV) for s in quoted)
    return files


def project_pins() -> dict[str, tuple[str, str]]:
    """{package: (version, first file pinning it)}."""
    pins: dict[str, tuple[str, str]] = {}
    for source, entries in project_pin_files().items():
        for name, version in entries.items():
            pins.setdefault(name, (version, source))
    return pins


def dockerfile(image: str) -> Path:
    return DOCKER / f"Dockerfile.{image}"


def instructions(image: str):
    return pins_py.dockerfile_instructions(dockerfile(image))[0]


def args(image: str) -> dict[str, str]:
    """ARG defaults, with ARGs named in other ARGs' defaults filled in."""
    values = pins_py.arg_defaults(instructions(image))
    return {name: pins_py.substitute(value, values) for name, value in values.items()}


def run_texts(image: str) -> list[str]:
    """The RUN instructions, continuation lines joined and ARG defaults substituted."""
    values = args(image)
    return [pins_py.substitute(i.text, values) for i in instructions(image) if i.keyword == "RUN"]


def env_values(image: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for inst in instructions(image):
        if inst.keyword == "ENV":
            for name, value in re.findall(r"(\w+)=(\S+)", inst.text):
                values[name] = value
    return values


# --- the project's own pin files --------------------------------------------------------------------


def test_project_pin_files_agree():
    """A package pinned in two of the files has one version (the images read pyproject.toml and
    requirements-extra.txt, the CPU venv is built by setup_venv.sh)."""
    files = project_pin_files()
    disagreements = []
    seen: dict[str, tuple[str, str]] = {}
    for source, entries in files.items():
        for name, version in entries.items():
            if name in seen and seen[name][0] != version:
                disagreements.append(f"{name}: {seen[name][1]} pins {seen[name][0]} but {source} pins {version}")
            seen.setdefault(name, (version, source))
    assert not disagreements, "the project's pin files disagree:\n" + "\n".join(disagreements)


def test_pins_script_reads_the_same_pins():
    """docker/pins.py (what the image build uses) sees exactly the pins read here."""
    ours = {name: version for name, (version, _) in project_pins().items()}
    theirs = {name: pin.version for name, pin in pins_py.load_pins(REPO).items()}
    assert theirs == ours


# --- each image against the project's pins -------------------------------------------------------------


@pytest.mark.parametrize("image", IMAGES)
def test_every_pin_is_installed_or_excluded_with_a_reason(image):
    pins = project_pins()
    installed = {name for step in pins_py.install_steps(dockerfile(image), REPO) for name in step.names}
    excluded = pins_py.excluded_pins(dockerfile(image))
    path = dockerfile(image).relative_to(REPO)

    missing = [f"{name}=={version} (pinned in {source})" for name, (version, source) in sorted(pins.items()) if name not in installed | set(excluded)]
    assert not missing, (
        f"{path} neither installs nor excludes: {', '.join(missing)}; name it in an install step "
        f"or add a '# pin-excluded: NAME: reason' line"
    )
    unreasoned = [name for name, reason in excluded.items() if len(reason) < 10]
    assert not unreasoned, f"{path}: pin-excluded without a reason: {unreasoned}"
    both = sorted(installed & set(excluded))
    assert not both, f"{path} both installs and excludes {both}"
    unknown = sorted(set(excluded) - set(pins))
    assert not unknown, f"{path} excludes {unknown}, which the project does not pin"


@pytest.mark.parametrize("image", IMAGES)
def test_installs_by_pin_only_what_the_project_pins(image):
    """What an image asks docker/pins.py for must be pinned (the build would stop), and what it
    installs at a version of its own must be one of the container-only or GPU-only ARGs."""
    pins = project_pins()
    own = {"uv", "pip", "fbgemm-gpu"}  # ARG UV_VERSION, PIP_VERSION, FBGEMM_GPU_VERSION
    for step in pins_py.install_steps(dockerfile(image), REPO):
        for name, version in step.versions:
            if name in own:
                continue
            assert name in pins, f"{dockerfile(image).name} line {step.line} installs {name}, which no pin file pins"
            assert version.split("+")[0] == pins[name][0], (
                f"{name}: {dockerfile(image).name} line {step.line} installs {version} but {pins[name][1]} pins {pins[name][0]}"
            )


@pytest.mark.parametrize("image", IMAGES)
def test_gpu_fbgemm_matches_the_cpu_pin(image):
    """fbgemm-gpu (CUDA/ROCm) and fbgemm-gpu-cpu are released together under one version."""
    cpu_version, source = project_pins()["fbgemm-gpu-cpu"]
    gpu_version = args(image).get("FBGEMM_GPU_VERSION")
    assert gpu_version == cpu_version, (
        f"fbgemm-gpu: {dockerfile(image).name} ARG FBGEMM_GPU_VERSION={gpu_version} but {source} pins fbgemm-gpu-cpu=={cpu_version}"
    )
    fetched = [v for step in pins_py.install_steps(dockerfile(image), REPO) for n, v in step.versions if n == "fbgemm-gpu"]
    assert fetched and set(fetched) == {cpu_version}, f"{dockerfile(image).name} fetches fbgemm-gpu at {fetched}, expected {cpu_version}"
    assert any("fbgemm-gpu-cpu" in t and "--absent" in t and "pins.py verify" in t for t in run_texts(image)), (
        f"{dockerfile(image).name}: the build must check that fbgemm-gpu-cpu is not installed (pins.py verify --absent fbgemm-gpu-cpu)"
    )


@pytest.mark.parametrize("image", IMAGES)
def test_install_order_is_the_one_that_works(image):
    """torch first, then the GPU fbgemm, then torchrec without its dependencies (with them it
    pulls fbgemm-gpu from PyPI: the CUDA build, unpinned), then the rest; as setup_venv.sh does.
    Positions are (RUN line, place in the RUN); the ROCm image installs fbgemm from a wheel that
    a build stage fetched (or compiled), so its place is that install command's."""
    name = dockerfile(image).name
    steps = pins_py.install_steps(dockerfile(image), REPO)
    texts = [(i.line, pins_py.substitute(i.text, args(image))) for i in instructions(image) if i.keyword == "RUN"]

    def first(pattern: str) -> tuple[int, int]:
        for line, text in texts:
            match = re.search(pattern, text)
            if match:
                return line, match.start()
        raise AssertionError(f"{name}: no RUN matches {pattern!r}")

    torch_at = first(r"pins\.py requirements (--local-version \S+ )?torch torchvision")
    fbgemm_at = first(r"pip\S*\s+install[^&]*(fbgemm-gpu==|fbgemm-wheels/\*\.whl)")
    torchrec_at = first(r"pins\.py requirements torchrec\b")
    rest_at = first(r"pins\.py requirements tensordict")
    verify_at = first(r"pins\.py verify")
    assert torch_at < fbgemm_at < torchrec_at < rest_at < verify_at, (
        f"{name}: install order broken: torch {torch_at}, fbgemm {fbgemm_at}, torchrec {torchrec_at}, rest {rest_at}, verify {verify_at}"
    )
    torchrec = [step for step in steps if "torchrec" in step.names]
    assert torchrec and all(step.no_deps for step in torchrec), f"{name}: torchrec must be installed with --no-deps"
    assert any("pip\" check" in text for _, text in texts), f"{name}: no pip check after the installs"


@pytest.mark.parametrize("image", IMAGES)
def test_python_version_satisfies_requires_python(image):
    requires = tomllib.loads((REPO / PYPROJECT).read_text())["project"]["requires-python"]
    version = args(image)["PYTHON_VERSION"]
    assert version in SpecifierSet(requires), (
        f"python: {dockerfile(image).name} ARG PYTHON_VERSION={version} but {PYPROJECT} requires-python {requires}"
    )


def _installed_torch_cuda() -> str | None:
    """CUDA major.minor of the installed torch's wheel, from its metadata (cuda-toolkit==13.0.x)."""
    import importlib.metadata as metadata

    try:
        version = metadata.version("torch")
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    if version.split("+")[0] != project_pins()["torch"][0]:
        return None
    for requirement in requires:
        match = re.match(r"cuda-toolkit\[[^\]]*\]==(\d+)\.(\d+)", requirement)
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    return None


def test_the_cpu_image_is_made_by_the_venv_script_and_checked_against_every_pin():
    runs = run_texts("cpu")
    assert any("bash scripts/setup_venv.sh" in run and 'docker/pins.py verify' in run for run in runs), runs
    assert any("python3.11" in run and "apt-get install" in run for run in runs)


def test_cuda_base_image_matches_the_torch_pin():
    base = args("cuda")["BASE_IMAGE"]
    match = re.fullmatch(r"pytorch/pytorch:(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn\d+-devel", base)
    assert match, f"Dockerfile.cuda BASE_IMAGE {base}: expected pytorch/pytorch:<torch>-cuda<X.Y>-cudnn<N>-devel"
    torch_pin, source = project_pins()["torch"]
    assert match.group(1) == torch_pin, f"torch: Dockerfile.cuda base image carries {match.group(1)} but {source} pins {torch_pin}"
    index = args("cuda")["PYTORCH_INDEX_URL"].rstrip("/")
    line = re.search(r"/cu(\d+)(\d)$", index)
    if line:  # a PyTorch CUDA index: its line must be the base image's
        assert f"{line.group(1)}.{line.group(2)}" == match.group(2), f"cuda: base image CUDA {match.group(2)}, wheels from {index}"
        return
    assert index == "https://pypi.org/simple", f"Dockerfile.cuda PYTORCH_INDEX_URL {index}: PyPI or a PyTorch /cuXYZ index"
    wheel_cuda = _installed_torch_cuda()
    if wheel_cuda is not None:
        assert match.group(2) == wheel_cuda, (
            f"cuda: Dockerfile.cuda base image is CUDA {match.group(2)} but torch {torch_pin} from PyPI is built for CUDA {wheel_cuda}"
        )


def test_rocm_base_image_matches_the_wheel_index():
    values = args("rocm")
    base = values["BASE_IMAGE"]
    match = re.fullmatch(r"rocm/pytorch:rocm(\d+\.\d+)(?:\.\d+)?_ubuntu[\d.]+_py[\d.]+_pytorch_release_(\d+\.\d+\.\d+)", base)
    assert match, f"Dockerfile.rocm BASE_IMAGE {base}: expected rocm/pytorch:rocm<X.Y.Z>_ubuntu<V>_py<V>_pytorch_release_<torch>"
    assert f"rocm{match.group(1)}" == values["ROCM_WHEEL_TAG"], (
        f"rocm: Dockerfile.rocm base image is ROCm {match.group(1)} but the wheels come from {values['ROCM_WHEEL_TAG']}"
    )
    assert values["PYTORCH_INDEX_URL"].endswith("/" + values["ROCM_WHEEL_TAG"])
    torch_pin = project_pins()["torch"][0]
    if match.group(2) != torch_pin:
        # the base image's torch is not the pin: the pinned ROCm build must be installed explicitly
        assert any(re.search(r"pins\.py requirements --local-version \"?rocm\S*\"? torch\b", t) for t in run_texts("rocm"))


def test_rocm_gpu_packages_come_from_the_pytorch_rocm_index():
    """No ROCm torch, torchvision or fbgemm-gpu on PyPI: those three must name the ROCm index."""
    index = args("rocm")["PYTORCH_INDEX_URL"]
    specs = {item.split("==")[0]: source for source, item in pins_py.dockerfile_specs(dockerfile("rocm"), REPO)}
    for name in ("torch", "torchvision", "fbgemm-gpu"):
        assert specs.get(name) == f"index {index}", f"{name}: Dockerfile.rocm takes it from {specs.get(name)}, not {index}"


@pytest.mark.parametrize("image", ALL_IMAGES)
def test_run_environment(image):
    """run_and_time.sh works inside: data at /data, results at /results, the venv's python."""
    env = env_values(image)
    assert env.get("MLPERF_DATA_ROOT") == "/data"
    assert env.get("MLPERF_OUTPUT_ROOT") == "/results"
    assert "CKPT_PATH" not in env, "checkpointing is opt-in (-e CKPT_PATH=/checkpoints/<run>), not an image default"
    venv = args(image)["VENV"]
    assert venv == "/opt/mlperf-venv" and pins_py.substitute(env.get("PYTHON", ""), args(image)) == f"{venv}/bin/python"
    assert "VENV" not in env, "an exported VENV makes `make` (VENV ?= .venv) install the CPU stack into the image's venv"
    assert not [name for name in env if name.startswith(("NCCL_", "RCCL_"))], "NCCL/RCCL settings belong to the launcher"
    workdirs = [pins_py.substitute(i.text, args(image)) for i in instructions(image) if i.keyword == "WORKDIR"]
    assert workdirs[-1] == WORKDIR
    config = (REPO / "common" / "config" / "gin_files.py").read_text()
    for variable in ("MLPERF_DATA_ROOT", "MLPERF_OUTPUT_ROOT", "CKPT_PATH"):
        assert f'"{variable}"' in config, f"common/config/gin_files.py no longer reads {variable}; update the images and README"
    if image == "cuda":
        assert env.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"


@pytest.mark.parametrize("image", ALL_IMAGES)
def test_build_context_leaves_out_local_state(image):
    ignore = DOCKER / f"Dockerfile.{image}.dockerignore"
    assert ignore.is_file(), f"{ignore.relative_to(REPO)} missing: the build would send .venv and data/ to the daemon"
    patterns = {line.strip() for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")}
    assert {".venv", ".venv-dlio", ".accelerator-site", "data", "runs", ".git"} <= patterns
    assert not patterns & {"docker", "scripts", "pyproject.toml", "common", "storage", "*"}


# --- docker/pins.py itself --------------------------------------------------------------------------


def _fake_repo(tmp_path: Path, extra: str = "numpy==2.2.6\n", deps: str = '"torch==2.14.1", "numpy==2.2.6"') -> Path:
    (tmp_path / "scripts").mkdir(parents=True)
    (tmp_path / PYPROJECT).write_text(f"[project]\nname = 'x'\ndependencies = [{deps}]\n")
    (tmp_path / REQUIREMENTS_EXTRA).write_text("# comment\n" + extra)
    (tmp_path / SETUP_VENV).write_text('pip_install "torch==2.14.1"\n')
    return tmp_path


def _pins(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DOCKER / "pins.py"), "--root", str(root), *argv], capture_output=True, text=True)


def test_pins_script_prints_requirements_with_an_optional_local_version(tmp_path):
    root = _fake_repo(tmp_path)
    assert _pins(root, "requirements", "torch", "NumPy").stdout.split() == ["torch==2.14.1", "numpy==2.2.6"]
    assert _pins(root, "requirements", "--local-version", "rocm7.2", "torch").stdout.split() == ["torch==2.14.1+rocm7.2"]
    assert _pins(root, "constraints").stdout.split() == ["numpy==2.2.6", "torch==2.14.1"]


def test_pins_script_refuses_disagreeing_files(tmp_path):
    result = _pins(_fake_repo(tmp_path, extra="numpy==2.2.5\n"), "constraints")
    assert result.returncode == 2
    assert "numpy: pyproject.toml pins 2.2.6 but scripts/requirements-extra.txt pins 2.2.5" in result.stderr


def test_pins_script_refuses_loose_and_unknown_pins(tmp_path):
    result = _pins(_fake_repo(tmp_path, extra="numpy>=2\n"), "constraints")
    assert result.returncode == 2 and "'numpy>=2' is not an exact pin" in result.stderr
    result = _pins(_fake_repo(tmp_path / "b"), "requirements", "torchrec")
    assert result.returncode == 2 and "torchrec: the Dockerfile installs it but no project pin file pins it" in result.stderr


def test_pins_script_verify_compares_installed_versions(tmp_path):
    """Run against this venv: pytest is installed at its pin; a wrong --expect is reported."""
    pytest_version = project_pins()["pytest"][0]
    deps = f'"pytest=={pytest_version}"'
    root = _fake_repo(tmp_path, extra="", deps=deps)
    (root / SETUP_VENV).write_text("")
    assert _pins(root, "verify").returncode == 0
    result = _pins(root, "verify", "--expect", "pytest==0.0.1")
    assert result.returncode == 1 and f"pytest: pinned 0.0.1, installed {pytest_version}" in result.stderr
    result = _pins(root, "verify", "--absent", "pytest")
    assert result.returncode == 1 and "pytest: must not be installed in this image" in result.stderr


def test_dockerfile_specs_name_every_source():
    cuda = pins_py.dockerfile_specs(dockerfile("cuda"), REPO)
    sources = {source for source, _ in cuda}
    assert sources == {"image", "pypi", "python-download"}, sources
    assert ("pypi", f"fbgemm-gpu=={project_pins()['fbgemm-gpu-cpu'][0]}") in cuda
    assert ("pypi", f"torch=={project_pins()['torch'][0]}") in cuda
    rocm = dict((item.split("==")[0], (source, item)) for source, item in pins_py.dockerfile_specs(dockerfile("rocm"), REPO))
    tag = args("rocm")["ROCM_WHEEL_TAG"]
    assert rocm["torch"][1] == f"torch=={project_pins()['torch'][0]}+{tag}"
    assert rocm["torchrec"][0] == "pypi"

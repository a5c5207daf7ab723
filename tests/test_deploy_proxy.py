"""The console behind an ingress in the deployment manifests: the commented ``[ui]`` settings of
the Kubernetes ConfigMap and of the compose configuration, and the Deployment's commented
environment variable, are valid as written once uncommented, and they make the console believe
an ingress pod's forwarded scheme (a login over https:// through the ingress is refused without
it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from board_outbox.service.config import load_config
from board_outbox.service.config_sections import UiConfig
from board_outbox.surface.http.proxies import parse_address, proxy_settings, resolve

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
INGRESS_POD = "10.244.3.17"  # an ingress controller's pod on the example pod network
COMPOSE_PROXY = "172.18.0.5"  # a proxy container on a compose network


def _uncommented(toml: str, section: str) -> str:
    """``toml`` with its commented ``# [section]`` block (the ``# name = value`` lines after it)
    uncommented."""
    lines = toml.splitlines()
    start = lines.index(next(line for line in lines if line.strip() == f"# [{section}]"))
    out = [*lines[:start], lines[start].strip()[2:]]
    for line in lines[start + 1:]:
        m = re.fullmatch(r"\s*# ([a-z_]+ = .+)", line)
        if m is None:
            break
        out.append(m.group(1))
    return "\n".join(out)


def _forwarded_scheme(cfg_ui: UiConfig, peer: str) -> str | None:
    settings = proxy_settings(cfg_ui)
    address = parse_address(peer)
    assert address is not None
    if address not in settings.trusted:
        return None
    got = resolve(address, [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-proto", b"https"),
                            (b"x-forwarded-host", b"outbox.example.com")], settings)
    return None if got is None else got.scheme


def test_the_configmaps_commented_ingress_settings_load_and_trust_the_ingress() -> None:
    cm = yaml.safe_load((K8S / "configmap.yaml").read_text())
    (toml,) = cm["data"].values()
    assert "# trusted_proxies = " in toml
    as_shipped = load_config(env={}, **tomllib.loads(toml))
    assert as_shipped.ui.enabled is False and as_shipped.ui.trusted_proxies == []
    assert _forwarded_scheme(as_shipped.ui, INGRESS_POD) is None  # not believed as shipped
    cfg = load_config(env={}, **tomllib.loads(_uncommented(toml, "ui")))
    assert cfg.ui.enabled is True and cfg.ui.trusted_proxies
    assert _forwarded_scheme(cfg.ui, INGRESS_POD) == "https"
    assert _forwarded_scheme(cfg.ui, "192.0.2.1") is None  # any other peer: not believed


def test_the_deployments_commented_environment_variable_loads_as_a_list() -> None:
    text = (K8S / "deployment.yaml").read_text()
    m = re.search(r"# - name: (BOARD_OUTBOX_UI__TRUSTED_PROXIES)\n\s*#   value: \"([^\"]*)\"", text)
    assert m is not None, "the commented BOARD_OUTBOX_UI__TRUSTED_PROXIES entry is gone"
    cfg = load_config(env={m.group(1): m.group(2)}, ui={"enabled": True})
    assert _forwarded_scheme(cfg.ui, INGRESS_POD) == "https"


def test_the_compose_configurations_commented_proxy_setting_loads() -> None:
    toml = (ROOT / "deploy" / "compose" / "board-outbox.toml").read_text()
    m = re.search(r"^# (trusted_proxies = .+)$", toml, re.M)
    assert m is not None
    cfg = load_config(env={}, **tomllib.loads(toml.replace(m.group(0), m.group(1))))
    assert _forwarded_scheme(cfg.ui, COMPOSE_PROXY) == "https"

"""The SDK set up as the OpenTelemetry specification says (C7): ``OTEL_SDK_DISABLED``, the shared
endpoint for every signal, the sampler variables -- and a bad value is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    DEFAULT_ON,
    ParentBased,
    TraceIdRatioBased,
)

from board_outbox.model.errors import ConfigError
from board_outbox.service.telemetry import sampler, setup_telemetry
from board_outbox.surface.cli import main


def test_sdk_disabled_installs_nothing_whatever_else_is_set() -> None:
    env = {"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "console",
           "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    tel = setup_telemetry(env)
    assert (tel.tracer_provider, tel.meter_provider, tel.logger_provider) == (None, None, None)
    assert tel.described == ["OpenTelemetry SDK disabled (OTEL_SDK_DISABLED)"]
    # "false" (or anything but "true") leaves the SDK on, as the specification says
    assert setup_telemetry({"OTEL_SDK_DISABLED": "false"}).described == []


@pytest.mark.parametrize(("env", "ratio"), [
    ({}, None),
    ({"OTEL_TRACES_SAMPLER": "always_off"}, None),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}, 0.01),
    ({"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": " 0.5 "}, 0.5),
    ({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}, 1.0),
])
def test_the_sampler_variables(env: dict[str, str], ratio: float | None) -> None:
    chosen = sampler(env)
    if not env:
        assert chosen is DEFAULT_ON  # parent-based, always on: the specification's default
    elif env["OTEL_TRACES_SAMPLER"] == "always_off":
        assert chosen is ALWAYS_OFF
    else:
        root = chosen._root if isinstance(chosen, ParentBased) else chosen
        assert isinstance(root, TraceIdRatioBased) and root.rate == ratio
        assert isinstance(chosen, ParentBased) == env["OTEL_TRACES_SAMPLER"].startswith("parent")


@pytest.mark.parametrize(("env", "names"), [
    ({"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1%"},
     "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
     "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nan"},
     "OTEL_TRACES_SAMPLER_ARG"),
    ({"OTEL_LOGS_EXPORTER": "syslog"}, "OTEL_LOGS_EXPORTER"),
    ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL"),
])
def test_a_bad_value_is_a_config_error(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        setup_telemetry(env)


def test_run_with_a_bad_sampler_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[store]\nbackend = "memory"\n[service]\nhttp_port = 0\n')
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "often")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OTEL_TRACES_SAMPLER_ARG" in err[0] and "Traceback" not in err[0]

from __future__ import annotations

from pathlib import Path

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.errors import ConfigError
from board_outbox.service.config import load_config
from board_outbox.service.runtime import build_registry


def test_defaults_are_valid() -> None:
    cfg = load_config(env={})
    assert cfg.store.op_timeout_seconds == 10.0 and cfg.tail.young_gap_seconds == 30.0
    assert cfg.worker.backoff.cap_seconds == 300.0
    # the tail's projection kinds come from the registry the configuration builds
    assert build_registry(MemoryBackend().stores(), cfg.projections).projections == ["board-reflect"]


def test_young_gap_must_exceed_store_timeout() -> None:
    with pytest.raises(ConfigError, match=r"tail.young_gap_seconds \(10\) must exceed store"):
        load_config(env={}, tail={"young_gap_seconds": 10})


def test_toml_file_and_env_override(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[store]\nbackend = "mongo"\ndatabase = "x"\n[worker]\nmax_attempts = 3\n')
    cfg = load_config(f, env={"BOARD_OUTBOX_WORKER__MAX_ATTEMPTS": "5",
                              "BOARD_OUTBOX_TAIL__POLL_INTERVAL_SECONDS": "0.5",
                              "BOARD_OUTBOX_PROJECTIONS": ""})
    assert cfg.store.backend == "mongo" and cfg.store.database == "x"
    assert cfg.worker.max_attempts == 5 and cfg.tail.poll_interval_seconds == 0.5
    assert cfg.projections == []


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("[worker]\nmax_attempts = 0\n", {}, "worker.max_attempts"),
        ("[worker]\nmax_atempts = 3\n", {}, "worker.max_atempts: unknown setting"),
        ('[store]\nbackend = "postgres"\n', {}, "store.backend"),
        ("[tail\n", {}, "not valid TOML"),
        ("", {"BOARD_OUTBOX_TAIL__BATCH_SIZE": "lots"}, "tail.batch_size"),
        ("", {"BOARD_OUTBOX_NOPE": "1"}, "BOARD_OUTBOX_NOPE: not a setting"),
        ('projections = ["nope"]\n', {}, "unknown projection 'nope'"),
        # F2: [limits]
        ("[limits]\nbot_in_flight = -1\n", {}, "limits.bot_in_flight"),
        ("[limits]\nbot_in_flight = true\n", {}, "limits.bot_in_flight"),
        ("[limits]\nbot_in_flight = 5000\n", {}, "limits.bot_in_flight"),
        ('[limits]\nbot_per_second = "fast"\n', {}, "limits.bot_per_second"),
        ("[limits]\ntenant_per_second = 0.0001\n", {},
         "limits.tenant_per_second: 0.0001 per second is below the slowest rate"),
        ("[limits]\nwait_seconds = 0\n", {}, "limits.wait_seconds"),
        ("[limits]\nburst = 3\n", {}, "limits.burst: unknown setting"),
        ("", {"BOARD_OUTBOX_LIMITS__TENANT_IN_FLIGHT": "lots"}, "limits.tenant_in_flight"),
        # each beat of the lease heartbeat (30 x 0.34 = 10.2 s) renews a running launch's slots
        ("[limits]\nslot_seconds = 30\n", {},
         "limits.slot_seconds (30) must be >= 3 heartbeat intervals"),
    ],
)
def test_bad_settings_name_the_setting(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    f = tmp_path / "c.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_config(f, env=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_slot_must_outlast_three_heartbeats_not_the_launcher_timeout() -> None:
    """Issue 30: each beat of the lease heartbeat renews a running launch's slots, so a slot
    shorter than the launcher's timeout is fine (a launch may run any length), and a slot
    shorter than three beats is not (one failed beat would end it)."""
    cfg = load_config(env={}, launcher={"kind": "http", "url": "http://r", "timeout_seconds": 30},
                      worker={"lease_seconds": 6, "heartbeat_fraction": 0.5},
                      limits={"slot_seconds": 9})
    assert cfg.limits.slot_seconds == 9
    with pytest.raises(ConfigError, match=r"limits.slot_seconds \(8.9\) must be >= 3 heartbeat"):
        load_config(env={}, worker={"lease_seconds": 6, "heartbeat_fraction": 0.5},
                    limits={"slot_seconds": 8.9})
    # the heartbeat off: no beat renews a slot (a launch is cut at its end), nothing to check
    assert load_config(env={}, worker={"heartbeat_fraction": 0},
                       limits={"slot_seconds": 1}).limits.slot_seconds == 1


def test_limits_decode_from_toml_and_env(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[limits]\nbot_in_flight = 2\nbot_per_second = 0.5\n")
    cfg = load_config(f, env={"BOARD_OUTBOX_LIMITS__TENANT_IN_FLIGHT": "8"})
    assert (cfg.limits.bot_in_flight, cfg.limits.bot_per_second) == (2, 0.5)
    assert cfg.limits.tenant_in_flight == 8 and cfg.limits.configured
    assert not load_config(env={}).limits.configured  # no limits unless asked for


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "absent.toml", env={})


def test_example_config_is_valid() -> None:
    cfg = load_config(Path(__file__).parent.parent / "board-outbox.example.toml", env={})
    assert cfg.store.backend == "mongo" and cfg.launcher.kind == "http"


def test_http_launcher_needs_a_url() -> None:
    with pytest.raises(ConfigError, match=r"launcher\.url"):
        load_config(env={"BOARD_OUTBOX_LAUNCHER__KIND": "http"})


def test_errors_survive_pickling() -> None:
    """Errors cross process boundaries (the load test's store server): they must round-trip."""
    import pickle

    from board_outbox.model.errors import CardNotFound, MalformedCard, StoreUnavailable, SubscriptionNotFound

    for err in (CardNotFound("t", "c"), SubscriptionNotFound("s"), MalformedCard("r", "bad"),
                StoreUnavailable("down")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)

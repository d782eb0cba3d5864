"""The one redaction rule: storage options are masked by an allow-list, nested mappings key by key, and a
harmless key's URL still loses its credentials."""

from __future__ import annotations

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.redact import MASK, redact_options, scrub, secret_values

PLANTED = {
    "key": "AKIAPLANTED0001",
    "secret": "planted-secret-0002",
    "token": "planted-token-0003",
    "passwd": "planted-passwd-0004",
    "auth": "planted-auth-0005",
    "x_api_sig": "planted-sig-0006",
    "headers": {"Authorization": "Bearer planted-bearer-0007", "X-Api-Key": "planted-apikey-0008"},
    "client_kwargs": {"aws_session_token": "planted-session-0009", "region_name": "eu-west-1"},
    "endpoint_url": "http://user:planted-userinfo-0010@127.0.0.1:9000",
    "anon": False,
    "tokens": ["planted-list-0011"],
}


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    return [value]


def test_every_value_but_known_harmless_ones_is_masked() -> None:
    masked = redact_options(PLANTED)
    assert "planted" not in repr(masked), masked
    assert masked["client_kwargs"]["region_name"] == "eu-west-1" and masked["anon"] is False
    assert masked["endpoint_url"] == f"http://{MASK}@127.0.0.1:9000"  # harmless key, credential removed
    assert masked["headers"] == {"Authorization": MASK, "X-Api-Key": MASK}  # kept keys say what was given


def test_scrub_removes_every_planted_value_from_free_text() -> None:
    secrets = secret_values(PLANTED)
    text = " ".join(str(v) for v in _leaves(PLANTED) if isinstance(v, str | list))
    assert "planted" not in scrub(text, secrets)


def test_the_run_config_serialises_masked_but_keeps_the_values_for_workers() -> None:
    cfg = RunConfig.of(release="s3://b/r", out="/tmp/o", storage_options=PLANTED)
    assert "planted" not in cfg.model_dump_json()
    assert cfg.source.storage_options["token"] == "planted-token-0003"

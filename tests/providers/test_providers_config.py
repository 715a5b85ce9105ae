"""runner.toml discovery and parsing, secrets from the environment, redaction, the registry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.providers import (
    ProviderConfigError,
    Providers,
    Redactor,
    find_config,
    list_providers,
    load_config,
)
from runner.providers.config import load_access
from runner.providers.registry import provider_class

SECRET = "sk-test-8f3a9c0d2b7e41aa"


def test_config_is_found_walking_up_and_missing_means_fake(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    assert find_config(deep) is None
    assert Providers.for_dir(deep).default_name() == "fake"
    (tmp_path / "a" / "runner.toml").write_text('[general]\ndefault_provider = "ollama"\n')
    assert find_config(deep) == tmp_path / "a" / "runner.toml"
    assert load_access(deep).default_name() == "ollama"


def test_sections_settings_and_named_instances(tmp_path: Path) -> None:
    path = tmp_path / "runner.toml"
    path.write_text(
        textwrap.dedent("""
        [general]
        default_provider = "fast"
        [providers.fast]
        type = "fake"
        delay_ms = 1
        max_concurrency = 2
        [providers.a1111]
        base_url = "http://127.0.0.1:9"
        steps = 5
    """)
    )
    access = Providers(load_config(path), environ={})
    fast = access.get(None)
    assert fast.name == "fast" and fast.key == "fake"
    assert fast.capabilities.max_concurrency == 2
    assert access.get("fast") is fast  # cached
    sd = access.get("a1111")
    assert sd.settings["steps"] == 5 and sd.settings["cfg_scale"] == 7.0


@pytest.mark.parametrize(
    ("text", "get", "message"),
    [
        ("[general]\ndefault_provider = 3\n", None, "default_provider"),
        ("[extra]\nx = 1\n", None, "unknown section"),
        ("[providers.fake]\ncolour = 'red'\n", "fake", "unknown setting"),
        ("[providers.openai]\napi_key_env = 5\n", "openai", "environment variable"),
        ("not toml [", None, "not valid TOML"),
    ],
)
def test_config_mistakes_name_the_file(
    tmp_path: Path, text: str, get: str | None, message: str
) -> None:
    path = tmp_path / "runner.toml"
    path.write_text(text)
    with pytest.raises(ProviderConfigError, match=message) as info:
        Providers(load_config(path), environ={}).get(get)
    assert str(path) in str(info.value)


def test_unknown_provider_lists_the_installed_ones(tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError, match="unknown provider 'nope'") as info:
        Providers(environ={}).get("nope")
    assert "fake" in (info.value.hint or "")


def test_secrets_come_from_env_and_stay_out_of_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "runner.toml"
    path.write_text(
        '[providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "MY_KEY"\n'
    )
    with_key = Providers(load_config(path), environ={"MY_KEY": SECRET}).get("openai")
    other_key = Providers(load_config(path), environ={"MY_KEY": SECRET + "x"}).get("openai")
    assert with_key.secrets == {"api_key": SECRET}
    assert with_key.headers()["Authorization"] == f"Bearer {SECRET}"
    assert with_key.profile() == other_key.profile()
    assert SECRET not in repr(with_key.settings)
    assert SECRET not in with_key.profile()


def test_a_secret_written_into_the_config_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runner.toml"
    path.write_text(f'[providers.openai]\napi_key = "{SECRET}"\n')
    with pytest.raises(ProviderConfigError, match="unknown setting") as info:
        Providers(load_config(path), environ={}).get("openai")
    assert SECRET not in str(info.value)


def test_redactor_masks_secrets_and_credential_headers() -> None:
    r = Redactor([SECRET, "abc"])  # too short to be a key: left alone
    text = f"failed with key {SECRET}; Authorization: Bearer other-token-123456 abc"
    masked = r.redact(text)
    assert SECRET not in masked and "other-token-123456" not in masked
    assert "Authorization: Bearer ***" in masked and masked.endswith("abc")
    doc = r.redact_json({"headers": {"Authorization": "Basic zzz"}, "msg": [f"k={SECRET}"], "n": 3})
    assert doc == {"headers": {"Authorization": "***"}, "msg": ["k=***"], "n": 3}
    assert r.redact('{"api_key": "sk-live-zzzz"}') == '{"api_key": "***"}'


def test_providers_redactor_knows_every_configured_secret(tmp_path: Path) -> None:
    path = tmp_path / "runner.toml"
    path.write_text(
        '[providers.openai]\napi_key_env = "K1"\n'
        '[providers.other]\ntype = "openai"\napi_key_env = "K2"\n'
    )
    access = Providers(load_config(path), environ={"K1": "first-secret", "K2": "second-secret"})
    assert access.redactor.redact("first-secret second-secret") == "*** ***"


def test_list_providers_has_the_builtins_with_capabilities() -> None:
    infos = {info.name: info for info in list_providers()}
    assert {"fake", "openai", "ollama", "a1111", "comfyui"} <= set(infos)
    name, caps, version = infos["fake"]
    assert name == "fake" and version == "1" and caps.kinds == {"image", "text"}
    assert infos["a1111"].capabilities.kinds == {"image"}


def test_entry_point_plugins_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "myplug.py"
    pkg.write_text(
        textwrap.dedent("""
        from runner.providers.base import Capabilities, Provider
        class Echo(Provider):
            key = "echo"
            version = "3"
            default_capabilities = Capabilities(kinds=frozenset({"text"}))
    """)
    )
    dist = tmp_path / "myplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[runner.providers]\necho = myplug:Echo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert provider_class("echo").version == "3"
    assert ("echo", "3") in {(i.name, i.version) for i in list_providers()}
    assert Providers(environ={}).get("echo").profile().startswith("echo@3:")


def test_importing_the_package_does_not_import_httpx_or_pillow() -> None:
    code = (
        "import sys, runner.providers, runner.providers.config; "
        "print('httpx' in sys.modules, 'PIL' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]

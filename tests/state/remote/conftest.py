from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.state.remote.s3server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3

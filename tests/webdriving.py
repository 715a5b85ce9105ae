"""What the browser tests share: `runner serve` under uvicorn in a thread, and headless Chromium.

The ``served`` and ``browser`` fixtures (tests/conftest.py) build on these. A module that uses
them defines a module-scoped ``site`` fixture (a Site: project, state dir); the server serves
that site's state and the browser has opened the login URL `runner serve` prints, so its
HttpOnly cookie authenticates every later page.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN = "test-token-123"  # the token `runner serve` would print in its login URL
SCREENS = Path(os.environ.get("RUNNER_SCREENS") or Path(__file__).parent / "web_screens")

HAVE_BROWSER = CHROMIUM.exists() and CHROMEDRIVER.exists()
needs_browser = pytest.mark.skipif(
    not HAVE_BROWSER, reason="needs /usr/bin/chromium and /usr/bin/chromedriver"
)

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Served:
    """uvicorn serving the app for ``state`` in a thread until stopped."""

    def __init__(self, state: Path, cwd: Path) -> None:
        import uvicorn

        from runner.surfaces.web.app import create_app

        self.port = free_port()
        app = create_app(state, TOKEN, cwd=cwd)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)


def chromium(profile: Path) -> Any:
    """A headless Chromium driven by Debian's chromedriver (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


def wait(driver: Any, what: Any, timeout: float = 10) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(what)


def shot(driver: Any, name: str) -> Path:
    """A full-height screenshot to $RUNNER_SCREENS (default tests/web_screens/, gitignored)."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    path = SCREENS / f"{name}.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(int(height), 700), 4000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1280, 1000)
    assert path.stat().st_size > 5000
    return path


def start_iterate(
    driver: Any, ordinal: int, *, n: int, prompt_append: str = "", template_vars: str = ""
) -> str:
    """Fill tile ``ordinal``'s iterate form, start the child and follow the page to it: the
    child's run id."""
    from selenium.webdriver.common.by import By

    parent = driver.current_url
    tile = driver.find_element(By.ID, f"tile-{ordinal}")
    tile.find_element(By.CSS_SELECTOR, "details.iterate > summary").click()
    if prompt_append:
        tile.find_element(By.CLASS_NAME, "prompt-append").send_keys(prompt_append)
    if template_vars:  # in place of the run's own vars the form starts from
        box = tile.find_element(By.CLASS_NAME, "iterate-vars")
        box.clear()
        box.send_keys(template_vars)
    box = tile.find_element(By.CLASS_NAME, "iterate-n")
    box.clear()
    box.send_keys(str(n))
    tile.find_element(By.CLASS_NAME, "iterate-go").click()
    wait(driver, lambda d: "/runs/" in d.current_url and d.current_url != parent, 15)
    child: str = driver.current_url.rsplit("/", 1)[1]
    return child

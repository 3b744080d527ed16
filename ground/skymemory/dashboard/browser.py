"""Headless Chromium through Selenium: Debian's `chromium` and `chromium-driver`, nothing downloaded.

Used by the dashboard's browser test and by tools/dashboard_screenshot.py.
The flags keep Chromium off the network (no component updates, sync,
background requests: only the page's own 127.0.0.1 traffic) and give it a
fresh profile directory each time. `--no-sandbox` is always passed: Chromium
will not start as root with its sandbox on, and as another user the sandbox
needs user namespaces that containers and some distributions withhold; the
only page it opens is the dashboard's own, on loopback. Selenium is a dev
dependency; it is imported only here.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only", "--mute-audio",
)


def find_browser() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, or None when either is not installed."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@contextmanager
def headless_chromium(width: int = 1500, height: int = 1000, timeout_s: float = 30.0):
    """A Selenium WebDriver for a headless Chromium with a throwaway profile; quit afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise FileNotFoundError("chromium and chromedriver are not installed "
                                "(Debian: apt-get install chromium chromium-driver)")
    chromium, driver_path = found
    with tempfile.TemporaryDirectory(prefix="skymemory-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={Path(profile)}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
        try:
            driver.set_page_load_timeout(timeout_s)
            driver.set_script_timeout(timeout_s)
            yield driver
        finally:
            driver.quit()

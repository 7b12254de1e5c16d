"""Debian's Chromium, headless, driven by Debian's chromedriver (scripts/setup.sh installs both;
nothing downloads a browser): the one way the UI tests open a browser."""
from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def headless_chromium():
    """A Selenium ``webdriver.Chrome`` on Debian's Chromium, 1600x1000; the caller quits it."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} missing: apt-get install chromium (scripts/setup.sh)"
    assert os.access(CHROMEDRIVER, os.X_OK), f"{CHROMEDRIVER} missing: apt-get install chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(arg)
    # both paths given, so Selenium Manager has nothing to look up; offline in case it ran anyway
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SE_OFFLINE", "true")
        return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)

# The calculator page (GET /) and its browser test (see docs/ui.md).
# Uses VENV, PY and TEST_STAMP from the main Makefile.

CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
# apt-get needs root; elsewhere sudo stands in when there is one.
APT_SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)

.PHONY: browser-deps ui-test ui-screenshot

browser-deps:  ## Install Debian's chromium and chromium-driver if missing (browser tests)
	@if [ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ]; then \
		echo "browser-deps: $(CHROMIUM) and $(CHROMEDRIVER) present"; \
	else \
		$(APT_SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT_SUDO) apt-get install -y -qq \
			chromium chromium-driver fonts-dejavu-core; \
	fi

ui-test: $(TEST_STAMP) browser-deps  ## The page's route tests and its headless-chromium test
	$(PY) -m pytest tests/ui $(PYTEST_ARGS)

ui-screenshot: $(TEST_STAMP) browser-deps  ## Refresh docs/img/calculator.png from the live page
	LLMMEM_UI_SCREENSHOT=docs/img/calculator.png $(PY) -m pytest -q \
		tests/ui/test_calculator_browser.py -k screenshot

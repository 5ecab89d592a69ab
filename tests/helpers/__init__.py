"""Helpers the tests use: a headless-Chromium client (browser.py), and a runner that hides installed packages
(without.py); test_browser.py holds the client to what it claims."""

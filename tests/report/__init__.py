"""The report (harness.report): the run's and the sweep's page, read as files and opened in a real browser."""

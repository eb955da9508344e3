"""Integration-tier tooling that is not a test: building what a kind run needs."""

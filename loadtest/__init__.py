"""Load test for the serving endpoint (orchestration side).

``loadtest.runner`` drives Locust headless in its own process against a KServe V1
``:predict`` endpoint and writes CSV + JSON + a PNG chart; ``loadtest/locustfile.py`` is
the Locust user it runs; ``python -m loadtest`` is its command line. Importing this package
is cheap: Locust and matplotlib are only imported where they are used (Locust never in the
caller's process).
"""

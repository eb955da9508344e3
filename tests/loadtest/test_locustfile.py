"""loadtest/locustfile.py: a real run's files: Locust's CSVs completed at shutdown, the
per-second CSV holding every request, and the chart drawn from them."""

from __future__ import annotations

from loadtest import summary as ls
from tests.support.predict_server import png_size


def test_real_run_files(ok_run):
    summary, out, _hosts, _lines = ok_run
    for name in ("locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv"):
        assert (out / name).stat().st_size > 0, name
    assert ls.history(out), "no Aggregated rows in the stats history"
    # The CSVs hold every request, including the last second's (see the locustfile).
    per_second = ls.read_csv_rows(out / "locust_per_second.csv")
    assert sum(int(r["Requests"]) for r in per_second) == summary["requests"]
    width, height = png_size(out / "chart.png")
    assert width >= 800 and height >= 500
    assert (out / "chart.png").stat().st_size > 10_000

"""Every benchmark, one after the other: `make bench` (or `python -m benchmarks.run_all`).

Each prints its own figures and the ratio against its baseline measured in the same run.
`--quick` shortens the long ones (fewer manifest files, shorter ingest windows): 6 minutes on an
idle 2-core box (`make bench`), against over 15 without it (`make bench-full`). Each benchmark's
time and the total are printed; everything written goes under one temporary directory, removed at
the end however the run ends.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

from benchmarks import (
    bench_encode,
    bench_export,
    bench_fleet_demo,
    bench_fleet_load,
    bench_hostile_flood,
    bench_ingest,
    bench_manifest,
    bench_monitor_load,
    bench_publisher,
    bench_record,
    bench_record_e2e,
    bench_relay,
    bench_replay,
    bench_serving_path,
    bench_tracer_overhead,
    bench_tui_cpu,
    bench_tui_ingest,
)


def steps(quick: bool) -> list[tuple[str, Callable[[], object]]]:
    """(what, run) for each benchmark, in order: the long ones shortened by ``quick``."""
    secs = "2" if quick else "5"
    return [
        ("bench_encode", lambda: bench_encode.main()),
        ("bench_ingest", lambda: bench_ingest.main()),
        ("bench_publisher", lambda: bench_publisher.main()),
        ("bench_tracer_overhead", lambda: bench_tracer_overhead.main(["--rounds", "20"] if quick else [])),
        ("bench_serving_path", lambda: bench_serving_path.main(["--quick"] if quick else [])),
        ("bench_tui_ingest: flood", lambda: bench_tui_ingest.main(["--seconds", secs])),
        (
            "bench_tui_ingest: paced at 10,000 events/s",
            lambda: bench_tui_ingest.main(["--seconds", secs, "--rate", "10000"]),
        ),
        (
            "bench_monitor_load: 8 sources x 1,000 step events/s, requests view open, --once --json",
            lambda: bench_monitor_load.main(["--seconds", "4" if quick else "10"]),
        ),
        (
            "bench_export: 64 sources x 100 step events/s, /metrics scraped 4x a second",
            lambda: bench_export.main(["--seconds", "3" if quick else "6"]),
        ),
        (
            "bench_fleet_load: 64 sources x 100 step events/s, snapshot + fleet summary at 4 Hz",
            lambda: bench_fleet_load.main(["--seconds", "12" if quick else "30"]),
        ),
        ("bench_manifest", lambda: bench_manifest.main(["--files", "1000" if quick else "10000"])),
        (
            "bench_record",
            lambda: bench_record.main(["--events", "30000", "--rounds", "1", "--no-hour"] if quick else []),
        ),
        (
            "bench_record_e2e",
            lambda: bench_record_e2e.main(["--seconds", "2", "--rounds", "1"] if quick else []),
        ),
        ("bench_relay", lambda: bench_relay.main(["--frames", "50000", "--rounds", "1"] if quick else [])),
        (
            "bench_relay: paced at 20,000 frames/s",
            lambda: bench_relay.main(
                ["--rate", "20000", "--frames", "100000" if quick else "200000", "--rounds", "1"]
            ),
        ),
        ("bench_replay", lambda: bench_replay.main(["--seconds", "120", "--rounds", "1"] if quick else [])),
        *(
            (
                f"bench_tui_cpu at {rate} events/s",
                lambda rate=rate: bench_tui_cpu.main(["--rate", rate, "--seconds", "5" if quick else "15"]),
            )
            for rate in ("100", "1000")
        ),
        (
            "bench_hostile_flood",
            lambda: bench_hostile_flood.main(["--frames", "40000" if quick else "240000"]),
        ),
        ("bench_fleet_demo", lambda: bench_fleet_demo.main(["--seconds", "4" if quick else "10"])),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args(argv)
    # Everything a benchmark writes goes under one directory of ours, removed at the end however the
    # run ends (Ctrl-C included): a benchmark that forgot a file cannot fill /tmp across runs.
    with tempfile.TemporaryDirectory(prefix="eagle3-top-bench-") as tmp:
        os.environ["TMPDIR"] = tmp  # the subprocesses' too
        tempfile.tempdir = tmp
        t_all = time.monotonic()
        try:
            for what, run in steps(ns.quick):
                print(f"# {what}", flush=True)
                t0 = time.monotonic()
                run()
                print(
                    f"#   took {time.monotonic() - t0:.0f} s ({time.monotonic() - t_all:.0f} s so far)",
                    flush=True,
                )
        finally:
            tempfile.tempdir = None
    print(f"# all benchmarks: {time.monotonic() - t_all:.0f} s")


if __name__ == "__main__":
    main()

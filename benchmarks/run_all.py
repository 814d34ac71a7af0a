"""Every benchmark, one after the other: `make bench` (or `python -m benchmarks.run_all`).

Each prints its own figures and the ratio against its baseline measured in the same run.
`--quick` shortens the long ones (fewer manifest files, shorter ingest windows).
"""

from __future__ import annotations

import argparse

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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ns = ap.parse_args(argv)
    bench_encode.main()
    bench_ingest.main()
    bench_publisher.main()
    bench_tracer_overhead.main(["--rounds", "20"] if ns.quick else [])
    bench_serving_path.main(["--quick"] if ns.quick else [])
    print("# bench_tui_ingest: flood, then paced at 10,000 events/s")
    secs = "2" if ns.quick else "5"
    bench_tui_ingest.main(["--seconds", secs])
    bench_tui_ingest.main(["--seconds", secs, "--rate", "10000"])
    print("# bench_monitor_load: 8 sources x 1,000 step events/s, requests view open, --once --json")
    bench_monitor_load.main(["--seconds", "4" if ns.quick else "10"])
    print("# bench_export: 64 sources x 100 step events/s, /metrics scraped 4x a second")
    bench_export.main(["--seconds", "3" if ns.quick else "6"])
    print("# bench_fleet_load: 64 sources x 100 step events/s, snapshot + fleet summary at 4 Hz")
    bench_fleet_load.main(["--seconds", "12" if ns.quick else "30"])
    bench_manifest.main(["--files", "1000" if ns.quick else "10000"])
    bench_record.main(["--events", "30000", "--rounds", "1", "--no-hour"] if ns.quick else [])
    bench_record_e2e.main(["--seconds", "2", "--rounds", "1"] if ns.quick else [])
    bench_relay.main(["--frames", "50000", "--rounds", "1"] if ns.quick else [])
    bench_relay.main(["--rate", "20000", "--frames", "100000" if ns.quick else "200000", "--rounds", "1"])
    bench_replay.main(["--seconds", "120", "--rounds", "1"] if ns.quick else [])
    for rate in ("100", "1000"):
        bench_tui_cpu.main(["--rate", rate, "--seconds", "5" if ns.quick else "15"])
    bench_hostile_flood.main(["--frames", "40000" if ns.quick else "240000"])
    bench_fleet_demo.main(["--seconds", "4" if ns.quick else "10"])


if __name__ == "__main__":
    main()

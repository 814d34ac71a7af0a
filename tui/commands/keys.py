"""``eagle3-top keys DIR NAME``: a CURVE certificate pair for remote tailing."""

from __future__ import annotations

import argparse

from .report import EXIT_OK


def main(argv: list[str]) -> int:
    from eagle3_top.tracer import curve

    p = argparse.ArgumentParser(
        prog="eagle3-top keys", description="Write a CURVE certificate pair (NAME.key, NAME.key_secret)."
    )
    p.add_argument("directory")
    p.add_argument("name")
    ns = p.parse_args(argv)
    public, secret = curve.generate(ns.directory, ns.name)
    print(f"public: {public}\nsecret: {secret} (keep it private)")
    return EXIT_OK

"""``eagle3-top keys DIR NAME``: a CURVE certificate pair for remote tailing."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import tempfile

from .report import EXIT_OK, fail, parse

PROG = "eagle3-top keys"


class KeysExist(FileExistsError):
    """A pair (or half of one) of that name is there already: replacing it locks out every peer
    that trusts it, so only ``--force`` does."""


def write_pair(directory: str, name: str, force: bool = False) -> tuple[str, str]:
    """``NAME.key`` and ``NAME.key_secret`` in ``directory`` (made if missing), both or neither.

    The pair is made in a private temporary directory beside them, so the secret is never readable
    by others, not even for a moment, and then renamed into place; the public key keeps the
    umask's mode, the secret is 0600. OSError when the directory cannot be made or written."""
    from eagle3_top.tracer.transport import curve

    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", directory)
    public, secret = os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.key_secret")
    there = [p for p in (public, secret) if os.path.lexists(p)]
    if there and not force:
        raise KeysExist(errno.EEXIST, "already there", there[0])
    os.makedirs(directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}.", dir=directory)  # mode 0700
    try:
        made_public, made_secret = curve.generate(staging, name)
        os.replace(made_secret, secret)
        try:
            os.replace(made_public, public)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(secret)  # a secret without its public half is of no use to anyone
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return public, secret


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog=PROG, description="Write a CURVE certificate pair (NAME.key, NAME.key_secret)."
    )
    p.add_argument("directory")
    p.add_argument("name", help="a file name: letters, digits, '.', '_' or '-'")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace a pair of that name (every peer that trusts the old public key is locked out)",
    )
    ns = parse(p, argv)
    if isinstance(ns, int):
        return ns
    name = ns.name
    if not name or name in (".", "..") or not all(ch.isalnum() or ch in "._-" for ch in name):
        return fail(PROG, f"NAME {name!r}: use letters, digits, '.', '_' or '-' (it names two files)")
    try:
        public, secret = write_pair(ns.directory, name, ns.force)
    except KeysExist as exc:
        return fail(
            PROG,
            f"{exc.filename} exists: replacing it locks out every peer that trusts that key "
            "(--force replaces it)",
        )
    except OSError as exc:
        return fail(PROG, f"cannot write keys in {ns.directory}: {exc.strerror or exc}")
    print(f"public: {public}\nsecret: {secret} (keep it private)")
    return EXIT_OK

"""A self-signed certificate for 127.0.0.1, for the tests' TLS-only redis-servers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI

__all__ = ["self_signed"]


def self_signed(workdir: Path) -> tuple[Path, Path]:
    """(certificate, key) made with openssl in `workdir`: valid a day, for
    ``IP:127.0.0.1``, its own CA. Skips without openssl (fails with CI=true)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        if IN_CI:
            pytest.fail("openssl is required (CI=true)")
        pytest.skip("openssl is not on PATH")
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key

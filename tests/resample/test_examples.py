"""examples/tomography.py at a small size: the reconstruction error against the phantom falls."""

from __future__ import annotations

from examples.tomography import reconstruct


def test_tomography_example_reconstructs(capsys, tmp_path) -> None:
    errors = reconstruct(n=16, angles=12, iterations=20, every=5, out=tmp_path / "tomography.png")
    out = capsys.readouterr().out
    assert "iteration    5: relative error vs phantom" in out and "final relative error" in out
    assert "ms per evaluation" in out and any(tmp_path.iterdir())
    first, last = errors[0][1], errors[-1][1]
    assert last < 0.5 * first and last < 0.4, errors


def test_registration_example_registers(capsys) -> None:
    from examples.registration import register

    r = register(n=16, iterations=30, every=10)
    assert "SSD" in capsys.readouterr().out
    assert r["ssd_after"] < 0.2 * r["ssd_before"] and r["error_after"] < r["error_before"], r

"""``progress=True``: a tqdm bar on stderr, and the same bytes as without it."""

from __future__ import annotations

import pytest

import kinetrace

torch = pytest.importorskip("torch")
pytest.importorskip("tqdm")


def test_progress_bar_reports_and_changes_nothing(tmp_path, capsys):
    from torch.profiler import profile

    x = torch.randn(4, 4)
    with profile(record_shapes=True) as prof:
        for _ in range(200):
            (x * x).sum()
    path = tmp_path / "t.json"
    kinetrace.export_chrome_trace(prof, path)
    quiet = path.read_bytes()
    capsys.readouterr()
    stats = kinetrace.export_chrome_trace(prof, path, progress=True)
    err = capsys.readouterr().err
    assert "kinetrace t.json" in err
    assert "ev" in err and "MB/s" in err
    assert path.read_bytes() == quiet
    assert stats.file_bytes == len(quiet)

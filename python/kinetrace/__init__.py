"""kinetrace: fast, exact Chrome-trace export for the PyTorch profiler.

>>> import kinetrace
>>> kinetrace.export_chrome_trace(prof, "trace.json.gz")
"""

from kinetrace._export import (
    DEFAULT_COMPRESSLEVEL,
    ExportHandle,
    ExportStats,
    export_chrome_trace,
    wait,
)
from kinetrace._gzip import GzipWriter
from kinetrace._kinetrace import __version__

__all__ = [
    "DEFAULT_COMPRESSLEVEL",
    "ExportHandle",
    "ExportStats",
    "GzipWriter",
    "__version__",
    "export_chrome_trace",
    "wait",
]

"""Helpers the tests share (no tests here). One module per concern:

- ``fakes``: ``FakeActivity`` / ``FakeResult``, look-alikes of torch's ``_ITraceActivity`` and
  ``_ProfilerResult`` that count every accessor call;
- ``scenarios``: builders of activity sets in the shapes a CUDA or distributed run records
  (kernels and launches with flows, memcpy/memset, comms, odd ids, tricky names, ...);
- ``oracle``: the differential ``compare`` against torch's own Python exporter and
  ``assert_reads``, what kinetrace may read of each activity;
- ``traces``: reading trace files (gzip members, strict JSON, activity events);
- ``synthetic``: ``SyntheticResult``, a lazy source of millions of activities;
- ``measure``: peak memory and time of an export (``PeakRss``, ``ExitSnapshot``,
  ``memory_budget``);
- ``interrupts``: Ctrl-C in tests (latency bound, a SIGINT driver, lost-interrupt repair);
- ``probes``: sources that report or fail at a chosen batch or activity;
- ``aftermath``: what a failed export must leave behind (nothing: files, threads, children).
- ``users``: a check run as an ordinary user, whoever runs the tests (as root: ``setpriv``
  without the capabilities that bypass file permissions).

``tests/conftest.py`` puts ``tests/`` on ``sys.path``: tests import ``support.<module>``;
Python subprocesses get the same path from ``aftermath.subprocess_env()``.
"""

from __future__ import annotations

from kinetrace._kinetrace import trimonth_base_ns

__all__ = ["BASE", "T0", "TRIMONTH_NS"]

#: The length of torch's "trimonth" time-base interval.
TRIMONTH_NS = 7_889_238 * 1_000_000_000

#: A realistic epoch time (late 2026) well inside a trimonth interval, where the fake and the
#: synthetic traces start, and that interval's base.
T0 = 1_796_028_311_502_385_758
BASE = trimonth_base_ns(T0)
assert BASE < T0 < BASE + TRIMONTH_NS

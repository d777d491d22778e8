"""Pages of kinetrace's own (``summary --html``, ``ops --html``) loaded in headless Chromium:
the errors the page raised (uncaught errors, failed loads, ``console.error``), every resource
it fetched, and whatever a test's probe measures in the drawn page."""

from __future__ import annotations

import html
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support import catapult

#: Put first in ``<head>``: collects errors (capture phase: a failed ``<img>`` or font load
#: too) and ``console.error`` calls before the page's own content runs.
_HARNESS = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(String(e.message || (e.target && (e.target.src || e.target.href))));
}, true);
console.error = function () { window.__errors.push(Array.from(arguments).join(' ')); };
</script>"""

#: Run on the load event: once every resource the page asked for has loaded or failed.
_PROBE = """<script>
window.addEventListener('load', function () {
  const out = document.createElement('pre');
  out.id = 'kinetrace-probe';
  let measured;
  try { measured = (function () { return %s; })(); }
  catch (e) { window.__errors.push('probe: ' + e); measured = {}; }
  out.textContent = JSON.stringify(Object.assign({errors: window.__errors,
    resources: performance.getEntriesByType('resource').map(function (r) { return r.name; })},
    measured));
  document.body.appendChild(out);
});
</script>"""


def require_browser() -> str:
    """A headless Chromium, else a skip (a failure where ``KINETRACE_REQUIRE_CATAPULT`` is
    set: CI must not pass by skipping)."""
    browser = catapult.browser()
    if browser is None:
        if os.environ.get("KINETRACE_REQUIRE_CATAPULT"):
            pytest.fail("KINETRACE_REQUIRE_CATAPULT is set but there is no Chromium")
        pytest.skip("no Chromium (Debian: apt-get install chromium-headless-shell)")
    return browser


def load(browser: str, page: str, workdir: Path, probe: str = "{}") -> dict[str, Any]:
    """Loads the page text ``page`` (from a file in ``workdir``) and returns ``errors``,
    ``resources`` (the URLs it fetched) and the keys of the object the JavaScript expression
    ``probe`` gives once the page is drawn."""
    path = workdir / "probe.html"
    path.write_text(
        page.replace("<head>", "<head>" + _HARNESS, 1).replace(
            "</body>", _PROBE % probe + "</body>"
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    mark = '<pre id="kinetrace-probe">'
    assert mark in done.stdout, done.stderr[-2000:]
    start = done.stdout.index(mark) + len(mark)
    result: dict[str, Any] = json.loads(
        html.unescape(done.stdout[start : done.stdout.index("</pre>", start)])
    )
    return result

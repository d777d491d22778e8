"""The tools' HTML pages loaded in headless Chromium: what the browser made of them (script
errors, SVG elements in the SVG namespace, rectangles, labels drawn inside their chart)."""

from __future__ import annotations

import html
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support import catapult

_HARNESS = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
const origError = console.error;
console.error = function () { window.__errors.push(Array.from(arguments).join(' ')); };
</script>"""

_PROBE = """<script>
(function () {
  const out = document.createElement('pre');
  out.id = 'kinetrace-probe';
  const svgs = Array.from(document.querySelectorAll('svg'));
  const bad = svgs.filter(function (s) { return s.namespaceURI !== 'http://www.w3.org/2000/svg'; });
  out.textContent = JSON.stringify({errors: window.__errors, svgs: svgs.length, bad: bad.length,
    rects: document.querySelectorAll('svg rect').length,
    circles: document.querySelectorAll('svg circle').length,
    widths: Array.from(document.querySelectorAll('svg rect')).every(function (r) {
      return r.width.baseVal.value >= 0;
    }),
    // Every label drawn whole inside its chart: the text boxes the browser measured.
    clipped: Array.from(document.querySelectorAll('svg text')).filter(function (t) {
      const box = t.getBBox(), svg = t.ownerSVGElement;
      return box.x < 0 || box.x + box.width > svg.width.baseVal.value;
    }).map(function (t) { return t.textContent; }),
    cut: Array.from(document.querySelectorAll('svg text.label')).filter(function (t) {
      const title = t.querySelector('title');
      return title && t.textContent.endsWith('\u2026') &&
        t.textContent.slice(title.textContent.length, -1) !== '' &&
        title.textContent.startsWith(t.textContent.slice(title.textContent.length, -1));
    }).length});
  document.body.appendChild(out);
})();
</script>"""


def require_browser() -> str:
    """A headless Chromium, or a skip (a failure where ``KINETRACE_REQUIRE_CATAPULT`` is set)."""
    browser = catapult.browser()
    if browser is None:
        if os.environ.get("KINETRACE_REQUIRE_CATAPULT"):
            pytest.fail("KINETRACE_REQUIRE_CATAPULT is set but there is no Chromium")
        pytest.skip("no Chromium (Debian: apt-get install chromium-headless-shell)")
    return browser


def probe(page: Path, workdir: Path) -> dict[str, Any]:
    """Loads ``page`` with an error trap before its content and a probe after it, and returns
    what the probe saw (keys: errors, svgs, bad, rects, circles, widths, clipped, cut)."""
    browser = require_browser()
    text = page.read_text(encoding="utf-8")
    probed = workdir / f"probe-{page.name}"
    probed.write_text(
        text.replace("<head>", "<head>" + _HARNESS, 1).replace("</body>", _PROBE + "</body>")
    )
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    start = done.stdout.index('<pre id="kinetrace-probe">') + len('<pre id="kinetrace-probe">')
    result: dict[str, Any] = json.loads(
        html.unescape(done.stdout[start : done.stdout.index("</pre>", start)])
    )
    return result

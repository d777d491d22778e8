"""Loading traces with Catapult (``chrome://tracing``'s trace viewer) in headless Chromium.

The viewer is the vulcanized Catapult build that torch-tb-profiler ships
(``torch_tb_profiler/static/trace_viewer_full.html``). Its UI needs Web Components v0, which
browsers dropped; its importer and model do not. So the page runs the bundle in Catapult's own
headless mode (``tr.isHeadless``, as under Node) with the v0 CustomElements polyfill (Debian's
``libjs-webcomponentsjs-custom-element-v0``) for the Polymer code at its top, and the few
Node-only lines that would replace ``window`` removed; then it imports each trace with
``tr.importer.Import`` (the same importer the viewer uses) and reports what the model holds.

:func:`load` returns, per trace: ``processes`` (pid -> name, slices, async slices, instant
events), ``flows`` (flow events the model linked), ``global_instants``, ``warnings`` (the
importer's warnings).
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

POLYFILL = Path("/usr/lib/javascript/webcomponentsjs-custom-element-v0/CustomElements.js")
BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

# What Catapult's Node mode needs from Node; the browser has the libraries already.
_NODE_SHIM = (
    "window.process = {versions: {node: 'catapult in a browser'}};"
    "window.HTMLImportsLoader = {hrefToAbsolutePath: function (p) { return p; }};"
    "window.require = function () { return {}; };"
)
# Node-only lines that replace `window` (a browser refuses): each must be found once.
_PATCHES = (
    ("if(tr.isHeadless){global.window={};}", ""),
    ("else if(tr.isNode){global.window=undefined;", "else if(false){"),
)
_REPORT = """
<script>
(function () {
  const out = document.createElement('pre');
  out.id = 'kinetrace-result';
  try {
    const traces = JSON.parse(document.getElementById('kinetrace-traces').textContent);
    out.textContent = JSON.stringify(traces.map(function (text) {
      const model = new tr.Model();
      new tr.importer.Import(model).importTraces([text]);
      const processes = {};
      for (const pid in model.processes) {
        const p = model.processes[pid];
        let slices = 0, asyncSlices = 0;
        for (const tid in p.threads) {
          slices += p.threads[tid].sliceGroup.length;
          asyncSlices += p.threads[tid].asyncSliceGroup.length;
        }
        processes[pid] = {name: p.name === undefined ? null : p.name, slices: slices,
                          async_slices: asyncSlices, instants: p.instantEvents.length};
      }
      return {processes: processes, flows: model.flowEvents.length,
              global_instants: model.instantEvents.length,
              warnings: model.importWarnings.map(function (w) { return w.message; })};
    }));
  } catch (e) {
    out.textContent = 'ERROR ' + e + '\\n' + e.stack;
  }
  document.body.appendChild(out);
})();
</script>
"""


def browser() -> str | None:
    """A headless-capable Chromium on PATH."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def viewer() -> Path | None:
    """torch-tb-profiler's Catapult build, without importing the package."""
    spec = importlib.util.find_spec("torch_tb_profiler")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "static" / "trace_viewer_full.html"
    return path if path.is_file() else None


def missing() -> str | None:
    """Why Catapult cannot run here (a reason to skip), or None. Where CI runs the suite
    (``nox -s suite`` sets ``KINETRACE_REQUIRE_CATAPULT``) a missing piece is an error
    instead: the Catapult tests must not pass there by skipping."""
    reason = None
    if browser() is None:
        reason = "no Chromium (Debian: apt-get install chromium-headless-shell)"
    elif not POLYFILL.is_file():
        reason = "no Web Components v0 polyfill (Debian: libjs-webcomponentsjs-custom-element-v0)"
    elif viewer() is None:
        reason = "torch-tb-profiler (which ships Catapult's trace viewer) is not installed"
    if reason is not None and os.environ.get("KINETRACE_REQUIRE_CATAPULT"):
        raise RuntimeError(f"KINETRACE_REQUIRE_CATAPULT is set, but Catapult cannot run: {reason}")
    return reason


def load(traces: list[bytes], workdir: Path, timeout: float = 300) -> list[dict[str, Any]]:
    """Catapult's model of each trace (JSON text), loaded in one headless page."""
    reason = missing()
    assert reason is None, reason
    page = viewer().read_text(encoding="utf-8")  # type: ignore[union-attr]
    for old, new in _PATCHES:
        assert page.count(old) == 1, f"the Catapult build changed: {old!r}"
        page = page.replace(old, new)
    head = f"<script>{POLYFILL.read_text(encoding='utf-8')}</script><script>{_NODE_SHIM}</script>"
    page = page.replace("<script>", head + "<script>", 1)
    texts = [t.decode("utf-8") for t in traces]
    data = json.dumps(texts).replace("</", "<\\/")
    page += f'<script id="kinetrace-traces" type="application/json">{data}</script>{_REPORT}'
    page_path = workdir / "catapult.html"
    page_path.write_text(page, encoding="utf-8")
    run = subprocess.run(
        [
            browser() or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            "--virtual-time-budget=600000",
            page_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    start = run.stdout.find('<pre id="kinetrace-result">')
    assert start >= 0, f"no result from the page; stderr: {run.stderr[-2000:]}"
    end = run.stdout.index("</pre>", start)
    text = html.unescape(run.stdout[start + len('<pre id="kinetrace-result">') : end])
    assert not text.startswith("ERROR"), text
    result: list[dict[str, Any]] = json.loads(text)
    return result


def assert_merge_loads(merged: Path, sources: list[Path], workdir: Path) -> dict[str, Any]:
    """Catapult loads the merged trace with, for every process of every source, a process
    of the same counts (slices, async slices, instants) named as the merge says, and as many
    flows and global instants as the sources together; returns the merged model."""
    from support.merged import read_any

    models = load([read_any(merged)] + [read_any(p) for p in sources], workdir)
    got, wanted = models[0], models[1:]
    assert not got["warnings"], got["warnings"][:5]
    record = json.loads(read_any(merged))["kinetrace_merge"]["ranks"]
    seen = set()
    for rank in record:
        source = wanted[rank["index"]]
        for p in rank["pids"]:
            merged_process = got["processes"][str(p["pid"])]
            key = "" if p["source"] is None else str(p["source"])
            counts = source["processes"].get(key, {"slices": 0, "async_slices": 0, "instants": 0})
            for field in ("slices", "async_slices", "instants"):
                assert merged_process[field] == counts[field], (rank["label"], p, field)
            assert merged_process["name"] == p["name"]
            seen.add(str(p["pid"]))
        # Every process Catapult saw in the source is one of the merge's.
        listed = {"" if p["source"] is None else str(p["source"]) for p in rank["pids"]}
        assert set(source["processes"]) <= listed, (set(source["processes"]), listed)
    assert set(got["processes"]) == seen
    assert got["flows"] == sum(s["flows"] for s in wanted)
    assert got["global_instants"] == sum(s["global_instants"] for s in wanted)
    return got

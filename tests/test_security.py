"""Security: what another local user plants in a shared output directory never makes
kinetrace write anywhere else, fail, or hang.

The scenario: a trace folder that is world-writable and sticky (``/tmp/traces``, a team's
folder) owned by another user, the attacker, or by the exporting user (root's ``/tmp``,
where the kernel lets the folder's owner remove anything), and another user, the attacker,
plants things at every name kinetrace
uses or used to use beside a destination: its worker outputs (``.{name}.{pid}.w{i}...``)
and its temporary files (``.{name}.{pid}.{n}...``). What is planted: a symbolic link to a
file the exporting user owns (the victim), a hard link to it, a dangling link (a file
created through it would appear elsewhere), a file, a directory and a FIFO. Then every way
kinetrace writes a file runs there: ``export_chrome_trace`` with 1-4 workers, ``.json`` and
``.json.gz``, background on and off, ``GzipWriter`` and ``recompress`` (``kinetrace
compress``). Each must succeed with a valid trace, leave the victim and every planted thing
as they were, and leave no file of its own behind.

The exports run in a subprocess that knows its own pid (names contain it). As root, that
process runs without the capabilities that bypass file permissions (``setpriv``) and the
planted things are made by another user (``nobody``: a forked child that sets its uid), so
the kernel's permission checks are those an ordinary user meets; the kernel's own link
protections (``fs.protected_*``) do not apply either, as the folder belongs to the attacker.
Not as root the test skips: only root can run the attacker as another user.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import textwrap

import pytest

import kinetrace
from kinetrace import _kinetrace
from support.users import FILE_PERMISSIONS, run_python

#: The attacker's user id when the test runs as root.
NOBODY = 65534
KINDS = ["symlink", "hardlink", "dangling-symlink", "file", "directory", "fifo"]

SCRIPT = textwrap.dedent(
    """
    import json, os, stat, sys, zlib
    import kinetrace
    from kinetrace import _kinetrace
    from support.measure import warm_up
    from support.synthetic import SyntheticResult

    root, suffix, attacker = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kinds, folder_owner = sys.argv[4].split(","), sys.argv[5]
    warm_up()
    pid = os.getpid()
    private = os.path.join(root, "private")  # the exporting user's own folder
    os.makedirs(private)
    os.chmod(private, 0o711)  # not listed, but the attacker may name what is in it
    victim = os.path.join(private, "victim.json")
    with open(victim, "wb") as f:
        f.write(b"the victim's own file, must survive\\n")
    # Writable by all, so that the kernel lets the attacker hard-link it (fs.protected_hardlinks);
    # kinetrace must still never write through such a link.
    os.chmod(victim, 0o666)
    source = SyntheticResult(5_000, gpu=True)
    reference = os.path.join(private, "reference.json")
    expected_events = kinetrace.export_chrome_trace(source, reference, workers=1).events
    failures = []

    # This host's tag in temporary names, and a pid no process has: names of the current
    # shape with it look stale, so the removal of stale temporaries must look at them, and
    # leave them (another user's, or a link).
    probe = os.fsdecode(_kinetrace.create_temporary(private, "probe"))
    os.remove(probe)
    host = probe.rsplit(".", 3)[1]
    with open("/proc/sys/kernel/pid_max") as f:
        dead = int(f.read()) + 1

    def names(dest_name):
        workers = [f".{dest_name}.{pid}.w{i}.kinetrace-tmp" for i in range(1, 9)]
        temps = [f".{dest_name}.{pid}.{n}.kinetrace-tmp" for n in range(8)]
        stale = [f".{dest_name}.{dead}.{host}.{n:016x}.kinetrace-tmp" for n in range(4)]
        return workers + temps + stale

    def plant(kind, path, tag):
        if kind == "symlink":
            os.symlink(victim, path)
        elif kind == "hardlink":
            os.link(victim, path)  # the victim's own inode: it keeps its owner
        elif kind == "dangling-symlink":
            os.symlink(os.path.join(private, "created-" + tag), path)
        elif kind == "file":
            with open(path, "wb") as f:
                f.write(b"the attacker's file\\n")
        elif kind == "directory":
            os.mkdir(path)
        elif kind == "fifo":
            os.mkfifo(path)

    def as_attacker(action):
        # Runs action in a forked child that has become the attacker (another user).
        child = os.fork()
        if child == 0:
            try:
                os.setgroups([])
                os.setgid(attacker)
                os.setuid(attacker)
                action()
            except BaseException as exc:
                os.write(2, f"the attacker failed: {exc!r}\\n".encode())
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(child, 0)
        if status != 0:
            raise SystemExit(f"the attacker (uid {attacker}) could not plant: {status}")

    def snapshot(directory):
        state = {}
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            st = os.lstat(path)
            entry = [stat.S_IFMT(st.st_mode), st.st_ino, st.st_uid, st.st_mtime_ns]
            if stat.S_ISLNK(st.st_mode):
                entry.append(os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    entry.append(f.read().hex())
            elif stat.S_ISDIR(st.st_mode):
                entry.append(sorted(os.listdir(path)))
            state[name] = entry
        return state

    def valid(path, case):
        report = _kinetrace.check_trace(path)
        if not report["valid"]:
            failures.append(f"{case}: invalid trace: {report['errors'][:3]}")
            return
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = zlib.decompress(data, 31)
        trace = json.loads(data)
        if len(trace["traceEvents"]) != expected_events:
            failures.append(f"{case}: {len(trace['traceEvents'])} events")

    def exports(dest):
        for workers in (1, 2, 3, 4):
            for background in (False, True):
                def run(workers=workers, background=background):
                    out = kinetrace.export_chrome_trace(
                        source, dest, workers=workers, background=background
                    )
                    if background:
                        out.result(timeout=300)
                yield f"workers={workers} background={background}", run
        if dest.endswith(".gz"):
            def gzip_writer():
                with open(reference, "rb") as src, kinetrace.GzipWriter(dest) as out:
                    out.write(src.read())
            yield "GzipWriter", gzip_writer
            def compress():
                _kinetrace.recompress(reference, dest, 6, 2)
            yield "compress", compress

    for kind in kinds:
        shared = os.path.join(root, "shared-" + kind)
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        if folder_owner == "attacker":  # the attacker's folder, sticky, open to all
            os.chown(shared, attacker, attacker)
        # Else the exporting user's own sticky folder open to all (root's /tmp): there the
        # kernel lets its owner remove anything, so only kinetrace's own checks keep the
        # attacker's things.
        dest = os.path.join(shared, "t" + suffix)
        def plant_all(kind=kind, shared=shared, dest=dest):
            for i, name in enumerate(names(os.path.basename(dest))):
                plant(kind, os.path.join(shared, name), f"{kind}-{i}")

        as_attacker(plant_all)
        planted = snapshot(shared)
        owners = {entry[2] for entry in planted.values()}
        assert owners == ({os.getuid()} if kind == "hardlink" else {attacker}), owners
        mine = snapshot(private)
        for label, run in exports(dest):
            case = f"{kind}, {label}"
            try:
                run()
            except BaseException as exc:
                failures.append(f"{case}: {type(exc).__name__}: {exc}")
                continue
            valid(dest, case)
            os.remove(dest)
            if snapshot(shared) != planted:
                failures.append(f"{case}: the shared folder changed")
            if snapshot(private) != mine:
                failures.append(f"{case}: the exporting user's own folder changed")
    print(json.dumps(failures))
    """
)


def run_planted(suffix: str, kinds: list[str], folder_owner: str = "attacker") -> list[str]:
    """Runs :data:`SCRIPT` as an ordinary user would, with the attacker another user;
    returns its failures."""
    if os.geteuid() != 0:
        # Only root can run the attacker as another user; as the exporting user itself,
        # the planted names would be this user's own stale temporaries, which kinetrace
        # removes by design: nothing would cross users.
        pytest.skip("the attacker must be another user: run as root (it then plants as nobody)")
    # Not under pytest's tmp_path: its parents are private, and the attacker must reach the
    # shared folders.
    with tempfile.TemporaryDirectory(prefix="kinetrace-security-") as root:
        os.chmod(root, 0o755)
        args = [root, suffix, str(NOBODY), ",".join(kinds), folder_owner]
        # Keeps the capabilities to change users and owners: the script makes the attacker.
        done = run_python("-c", SCRIPT, *args, drop=FILE_PERMISSIONS, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "fork") or not hasattr(os, "mkfifo"), reason="POSIX only")
@pytest.mark.parametrize(
    ("suffix", "folder_owner"),
    [(".json", "attacker"), (".json.gz", "attacker"), (".json", "exporter")],
)
def test_planted_names_are_never_followed(suffix, folder_owner):
    assert run_planted(suffix, KINDS, folder_owner) == []


def test_a_spliced_output_must_be_the_file_made_for_it(tmp_path):
    """The parent splices a worker's output only when its descriptor is still the regular
    file made for it (device, inode) with the length the worker reported."""
    exporter = _kinetrace._Exporter(str(tmp_path / "t.json"))
    try:
        with tempfile.TemporaryFile(dir=tmp_path) as output:
            output.write(b"x" * 10)
            output.flush()
            info = os.fstat(output.fileno())
            identity = (info.st_dev, info.st_ino)
            fd = output.fileno()
            with pytest.raises(RuntimeError, match="not the file made for it"):
                exporter.append_slice(
                    tmp_path / "t.json", fd, (info.st_dev, info.st_ino + 1), 1, 10, 10
                )
            with pytest.raises(RuntimeError, match="has 10 bytes, the worker reported 11"):
                exporter.append_slice(tmp_path / "t.json", fd, identity, 1, 11, 11)
        read, write = os.pipe()
        try:
            with pytest.raises(RuntimeError, match="not a regular file"):
                exporter.append_slice(tmp_path / "t.json", read, identity, 0, 0, 0)
        finally:
            os.close(read)
            os.close(write)
        with pytest.raises(ValueError, match="not a file descriptor"):
            exporter.append_slice(tmp_path / "t.json", -1, identity, 0, 0, 0)
        beyond = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # never an open descriptor
        with pytest.raises(OSError, match="cannot use file descriptor"):
            exporter.append_slice(tmp_path / "t.json", beyond, identity, 0, 0, 0)
    finally:
        exporter.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_worker_outputs_have_no_name(tmp_path, monkeypatch):
    """While the workers write, the destination's folder holds no file of theirs: their
    outputs are anonymous."""
    from kinetrace._export import workers as _workers
    from support.synthetic import SyntheticResult

    seen: list[list[str]] = []
    real = _workers._Worker.receive

    def receive(self, expected):
        answer = real(self, expected)
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        return answer

    monkeypatch.setattr(_workers._Worker, "receive", receive)
    stats = kinetrace.export_chrome_trace(SyntheticResult(20_000), tmp_path / "t.json", workers=3)
    assert stats.events > 20_000
    # Summaries and finished outputs of two workers; only the main temporary file exists.
    assert len(seen) == 4
    for names in seen:
        assert [n for n in names if ".w" in n] == [], names
        assert len(names) <= 1, names

//! `_KinetoStream`: the export path for torch < 2.13, whose `_ProfilerResult` has no
//! `trace_activities()`. Kineto's own writer (`result.save(path)`, the C++ ChromeTraceLogger)
//! writes into FIFOs that Python made; one thread per FIFO streams what arrives into the
//! destination through [`Sink`] (plain, or one gzip member from the parallel encoder), so no
//! copy of the trace lands on disk beside the destination.
//!
//! Kineto writes `path + ".tmp"` and renames it over `path` (torch 2.15), or writes `path`
//! itself (older Kineto): Python makes a FIFO at each and hands over their read ends, and the
//! one that receives data is the trace. The output is created before `save` runs (so a bad
//! destination fails while the result can still be saved) and is claimed by the first
//! reader that receives a byte; a second reader receiving data is an error.
//!
//! The reader threads never take the GIL: `save` holds it for its whole run. A reader whose
//! output failed (a full disk) keeps draining its FIFO to the end, so Kineto never blocks on
//! a full pipe while holding the GIL; the error is reported by `finish`.
//!
//! On the way the reader makes Kineto's text strict JSON and carries what Kineto would
//! mangle (see [`crate::kineto`]): quotes Kineto left unescaped inside names are escaped,
//! metadata members given by the caller are inserted after the opening `{`, and a checker
//! thread validates the result, so a trace that is still not strict JSON fails the export
//! instead of being written. Optionally it rewrites Kineto's `"traceName": "<the FIFO's
//! path>"` to the destination's name: it keeps the last few KB back until the end of the
//! stream, and replaces the last occurrence of the given bytes there.
//!
//! The object owns the FIFOs' write ends too (kept open so that no reader sees end of file
//! before `save` is over): `finish` closes them, and `abort` or dropping the object closes
//! them, stops and joins the readers and removes the temporary output before it returns, so
//! no temporary file outlives an interrupted export.

use std::fs::File;
use std::io::{self, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use crate::error::{panic_message, Error, Result};
use crate::fragment;
use crate::kineto::{HeadInsert, QuoteRepair, Validator};
use crate::render::push_json_string;
use crate::sink::{Encoding, Sink};

/// How long `finish` waits with the GIL released before checking for Ctrl-C.
const POLL: Duration = Duration::from_millis(50);
/// Read size (a pipe hands over at most its buffer, 64 KiB by default, per read).
const CHUNK: usize = 256 << 10;
/// Bytes kept back at the end of the stream (beyond the searched bytes themselves) for the
/// trace-name rewrite: Kineto writes the name within the last few hundred bytes.
const TAIL: usize = 4096;
/// Every trace event has exactly one `"ph"` key; `finish` reports how many were seen.
const PH: &[u8] = b"\"ph\"";

/// Replace the last occurrence of `needle` near the end of the stream with `replacement`.
struct Rewrite {
    needle: Vec<u8>,
    replacement: Vec<u8>,
}

impl Rewrite {
    fn keep(&self) -> usize {
        TAIL + self.needle.len()
    }

    fn apply(&self, tail: &mut Vec<u8>) {
        let n = self.needle.len();
        if n == 0 || tail.len() < n {
            return;
        }
        if let Some(at) = tail.windows(n).rposition(|w| w == self.needle.as_slice()) {
            tail.splice(at..at + n, self.replacement.iter().copied());
        }
    }
}

/// Counts `"ph"` keys across chunk boundaries.
#[derive(Default)]
struct EventCounter {
    count: u64,
    /// The last (up to) 3 bytes seen.
    tail: [u8; 3],
    tail_len: usize,
}

impl EventCounter {
    fn feed(&mut self, data: &[u8]) {
        // Matches spanning the boundary: every 4-byte window of (tail + first 3 bytes)
        // spans it, since neither part alone holds 4 bytes.
        let head = data.len().min(3);
        let mut joined = [0u8; 6];
        joined[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        joined[self.tail_len..self.tail_len + head].copy_from_slice(&data[..head]);
        self.count += count_ph(&joined[..self.tail_len + head]);
        self.count += count_ph(data);
        // New tail: the last 3 bytes of (old tail + data); short data is all in `joined`.
        if data.len() >= 3 {
            self.tail.copy_from_slice(&data[data.len() - 3..]);
            self.tail_len = 3;
        } else {
            let n = self.tail_len + head;
            let keep = n.min(3);
            self.tail[..keep].copy_from_slice(&joined[n - keep..n]);
            self.tail_len = keep;
        }
    }
}

fn count_ph(hay: &[u8]) -> u64 {
    let mut count = 0;
    let mut i = 0;
    while i + PH.len() <= hay.len() {
        match hay[i..].iter().position(|&b| b == b'"') {
            Some(off) => {
                i += off;
                if hay[i..].starts_with(PH) {
                    count += 1;
                    i += PH.len();
                } else {
                    i += 1;
                }
            }
            None => break,
        }
    }
    count
}

/// What the readers share.
struct Shared {
    /// The output, until the first reader that receives data claims it.
    sink: Mutex<Option<Sink>>,
    /// Set by `abort` and on drop: readers stop at their next read.
    cancel: AtomicBool,
    rewrite: Option<Rewrite>,
    /// Members inserted after the document's opening `{` (may be empty).
    head: Vec<u8>,
}

/// How one reader ended.
enum Outcome {
    /// End of file without a byte.
    Empty,
    /// Everything that arrived is in the sink (not yet committed).
    Filled {
        sink: Box<Sink>,
        events: u64,
    },
    Failed(Error),
    /// Stopped by `abort` (or a drop).
    Cancelled,
}

fn claim(shared: &Shared) -> Result<Sink> {
    let mut slot = shared
        .sink
        .lock()
        .map_err(|_| Error::State("output poisoned by an earlier panic".into()))?;
    slot.take().ok_or_else(|| {
        Error::State(
            "Kineto wrote its trace into more than one file, so kinetrace cannot tell which \
             one is the trace"
                .into(),
        )
    })
}

/// The claimed output of one reader: the sink and the checker that sees the same bytes.
struct Output {
    sink: Sink,
    validator: Validator,
}

impl Output {
    fn write(&mut self, data: &[u8]) -> Result<()> {
        self.validator.feed(data);
        self.sink.write_all(data)
    }
}

/// Streams one FIFO into the shared sink (claimed on the first byte), to end of file.
fn read_stream(src: &mut File, shared: &Shared) -> Outcome {
    let mut buf = vec![0u8; CHUNK];
    let mut out: Option<Output> = None;
    let mut failed: Option<Error> = None;
    let mut events = EventCounter::default();
    let mut head = HeadInsert::new(shared.head.clone());
    let mut repair = QuoteRepair::default();
    let mut inserted: Vec<u8> = Vec::new();
    let mut held: Vec<u8> = Vec::new();
    loop {
        if shared.cancel.load(Ordering::Relaxed) {
            return Outcome::Cancelled;
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Outcome::Failed(Error::io("cannot read Kineto's output", e)),
        };
        if failed.is_some() {
            continue; // drain, so Kineto (holding the GIL) never blocks on a full pipe
        }
        let data = &buf[..n];
        let output = match &mut out {
            Some(output) => output,
            None => match claim(shared).and_then(|sink| {
                Ok(Output {
                    sink,
                    validator: Validator::start()?,
                })
            }) {
                Ok(output) => out.insert(output),
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            },
        };
        events.feed(data);
        inserted.clear();
        head.feed(data, &mut inserted);
        repair.feed(&inserted, &mut held);
        let keep = shared.rewrite.as_ref().map_or(0, Rewrite::keep);
        let written = if held.len() >= 2 * keep.max(1) {
            let cut = held.len() - keep;
            let written = output.write(&held[..cut]);
            held.drain(..cut);
            written
        } else {
            Ok(())
        };
        if let Err(e) = written {
            failed = Some(e);
            out = None; // removes the temporary file now, freeing the space
            held = Vec::new();
        }
    }
    if let Some(e) = failed {
        return Outcome::Failed(e);
    }
    let Some(mut output) = out else {
        return Outcome::Empty;
    };
    repair.finish(&mut held);
    if let Some(rewrite) = &shared.rewrite {
        rewrite.apply(&mut held);
    }
    let Output { sink, validator } = {
        if let Err(e) = output.write(&held) {
            return Outcome::Failed(e);
        }
        output
    };
    match validator.finish() {
        Ok(()) => Outcome::Filled {
            sink: Box::new(sink),
            events: events.count,
        },
        Err(e) => Outcome::Failed(e),
    }
}

/// The readers of one export and what they reported so far.
struct Streams {
    shared: Arc<Shared>,
    /// The FIFOs' write ends, open until `save` is over (closed by `finish`, `abort`, drop).
    writers: Vec<File>,
    rx: Receiver<(usize, Outcome)>,
    outcomes: Vec<Option<Outcome>>,
    pending: usize,
    handles: Vec<JoinHandle<()>>,
}

/// A finished export: (events, bytes of text, bytes in the file).
type Counts = (u64, u64, u64);

impl Streams {
    fn start(
        sources: Vec<File>,
        writers: Vec<File>,
        dst: &std::path::Path,
        encoding: Encoding,
        rewrite: Option<Rewrite>,
        head: Vec<u8>,
    ) -> Result<Streams> {
        // Before any reader starts, so a bad destination fails while the sources are idle.
        let sink = Sink::create(dst, encoding)?;
        let shared = Arc::new(Shared {
            sink: Mutex::new(Some(sink)),
            cancel: AtomicBool::new(false),
            rewrite,
            head,
        });
        let (tx, rx) = mpsc::channel();
        let mut streams = Streams {
            shared: Arc::clone(&shared),
            writers,
            rx,
            outcomes: Vec::new(),
            pending: 0,
            handles: Vec::new(),
        };
        for (index, mut src) in sources.into_iter().enumerate() {
            let shared = Arc::clone(&shared);
            let tx = tx.clone();
            let handle = thread::Builder::new()
                .name(format!("kinetrace-kineto-{index}"))
                .spawn(move || {
                    let outcome =
                        panic::catch_unwind(AssertUnwindSafe(|| read_stream(&mut src, &shared)))
                            .unwrap_or_else(|p| Outcome::Failed(Error::Panic(panic_message(&*p))));
                    drop(src);
                    let _ = tx.send((index, outcome));
                })
                // Dropping `streams` cancels the readers already started.
                .map_err(|e| Error::io("cannot start a reader thread", e))?;
            streams.handles.push(handle);
            streams.outcomes.push(None);
            streams.pending += 1;
        }
        Ok(streams)
    }

    /// Collects outcomes for at most `step`; true once every reader has reported.
    fn wait(&mut self, step: Duration) -> bool {
        while self.pending > 0 {
            match self.rx.recv_timeout(step) {
                Ok((index, outcome)) => {
                    self.outcomes[index] = Some(outcome);
                    self.pending -= 1;
                }
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => {
                    // Every reader reports (panics included); this only guards the loop.
                    for slot in self.outcomes.iter_mut().filter(|o| o.is_none()) {
                        *slot = Some(Outcome::Failed(Error::Panic(
                            "a reader thread ended without reporting".into(),
                        )));
                    }
                    self.pending = 0;
                }
            }
        }
        true
    }

    fn join(&mut self) {
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }

    /// After every reader reported: commits the one output that received data. `None`
    /// when nothing arrived at all (the output stays open until this is dropped).
    fn commit(&mut self) -> Result<Option<Counts>> {
        self.join();
        let mut filled = None;
        let mut error = None;
        for outcome in self.outcomes.iter_mut().filter_map(Option::take) {
            match outcome {
                Outcome::Filled { sink, events } => filled = Some((sink, events)),
                Outcome::Failed(e) => {
                    error.get_or_insert(e);
                }
                Outcome::Empty | Outcome::Cancelled => {}
            }
        }
        if let Some(e) = error {
            return Err(e); // `filled` is dropped: its temporary file is removed
        }
        match filled {
            Some((sink, events)) => {
                let stats = sink.finish()?;
                Ok(Some((events, stats.uncompressed_bytes, stats.file_bytes)))
            }
            None => Ok(None),
        }
    }

    fn abort(&mut self) {
        // Write ends first: a reader blocked in read() returns only at end of file.
        self.writers.clear();
        self.shared.cancel.store(true, Ordering::Relaxed);
        self.join();
        self.outcomes.clear();
        if let Ok(mut slot) = self.shared.sink.lock() {
            slot.take();
        }
    }
}

impl Drop for Streams {
    /// Like `abort`: once the write ends are closed the readers reach end of file at once
    /// (`save` is not running: it holds the GIL, and so does whoever drops this), and they
    /// remove the temporary file before the drop returns.
    fn drop(&mut self) {
        self.abort();
    }
}

/// Streams Kineto's output from FIFOs (or a finished file) into the destination.
///
/// `read_fds`: read ends of FIFOs, handed over to this object (it closes them). Once the
/// arguments are accepted the descriptors belong to it, even when the constructor raises.
/// `dst`: the destination (written atomically through a temporary file beside it; a
/// destination that exists and is not a regular file is written directly).
/// `write_fds`: the FIFOs' write ends, handed over too: kept open until `finish` (so no
/// reader sees end of file while `save` runs), closed by `finish`, `abort` or a drop.
/// `compresslevel`: None for plain text, 0-9 for one gzip member. `trace_name`: optional
/// `(find, replace)` bytes for Kineto's `"traceName"` value near the end of the stream.
/// `metadata`: `(key, JSON text)` pairs written as top-level members after the opening
/// `{` (a value that is not valid JSON is repaired or written as a string, as the main
/// exporter does).
#[pyclass(module = "kinetrace._kinetrace", name = "_KinetoStream")]
pub struct PyKinetoStream {
    streams: Mutex<Option<Streams>>,
}

fn encoding(compresslevel: Option<u32>, threads: usize) -> Encoding {
    match compresslevel {
        None => Encoding::Plain,
        Some(level) => Encoding::Gzip { level, threads },
    }
}

fn head_members(metadata: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in metadata {
        out.extend_from_slice(b"\n  ");
        push_json_string(&mut out, key.as_bytes());
        out.extend_from_slice(b": ");
        fragment::push_value(&mut out, value.as_bytes());
        out.push(b',');
    }
    out
}

fn rewrite(trace_name: Option<(PyBackedBytes, PyBackedBytes)>) -> Option<Rewrite> {
    trace_name.map(|(needle, replacement)| Rewrite {
        needle: needle.to_vec(),
        replacement: replacement.to_vec(),
    })
}

#[cfg(unix)]
fn files_from_fds(fds: &[i32]) -> PyResult<Vec<File>> {
    use std::os::fd::FromRawFd;

    let mut seen = std::collections::HashSet::new();
    for &fd in fds {
        if fd < 0 || !seen.insert(fd) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "read_fds and write_fds must be distinct open descriptors, got {fds:?}"
            )));
        }
    }
    Ok(fds
        .iter()
        // SAFETY: the caller hands over descriptors it opened (distinct and non-negative,
        // checked above) and never uses or closes them again; each becomes owned by exactly
        // one `File`, which closes it once.
        .map(|&fd| unsafe { File::from_raw_fd(fd) })
        .collect())
}

#[cfg(not(unix))]
fn files_from_fds(fds: &[i32]) -> PyResult<Vec<File>> {
    if fds.is_empty() {
        return Ok(Vec::new());
    }
    Err(pyo3::exceptions::PyOSError::new_err(
        "reading Kineto's output from FIFOs needs a POSIX system; use _KinetoStream.from_path",
    ))
}

impl PyKinetoStream {
    #[allow(clippy::too_many_arguments)]
    fn start(
        py: Python<'_>,
        sources: Vec<File>,
        writers: Vec<File>,
        dst: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let encoding = encoding(compresslevel, threads);
        let rewrite = rewrite(trace_name);
        let head = head_members(&metadata);
        let streams =
            py.detach(move || Streams::start(sources, writers, &dst, encoding, rewrite, head))?;
        Ok(PyKinetoStream {
            streams: Mutex::new(Some(streams)),
        })
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, Option<Streams>>> {
        self.streams
            .lock()
            .map_err(|_| PyRuntimeError::new_err("stream state poisoned by an earlier panic"))
    }
}

#[pymethods]
impl PyKinetoStream {
    #[new]
    #[pyo3(signature = (
        read_fds, write_fds, dst, compresslevel=None, threads=1, trace_name=None, metadata=vec![]
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        read_fds: Vec<i32>,
        write_fds: Vec<i32>,
        dst: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let all: Vec<i32> = read_fds.iter().chain(&write_fds).copied().collect();
        let mut files = files_from_fds(&all)?;
        let writers = files.split_off(read_fds.len());
        Self::start(
            py,
            files,
            writers,
            dst,
            compresslevel,
            threads,
            trace_name,
            metadata,
        )
    }

    /// Streams a file Kineto already wrote (where FIFOs are unavailable, or Kineto replaced
    /// one with a regular file). The source is only read, never removed.
    #[staticmethod]
    #[pyo3(signature = (src, dst, compresslevel=None, threads=1, trace_name=None, metadata=vec![]))]
    fn from_path(
        py: Python<'_>,
        src: PathBuf,
        dst: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        trace_name: Option<(PyBackedBytes, PyBackedBytes)>,
        metadata: Vec<(String, String)>,
    ) -> PyResult<Self> {
        let file =
            File::open(&src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
        Self::start(
            py,
            vec![file],
            Vec::new(),
            dst,
            compresslevel,
            threads,
            trace_name,
            metadata,
        )
    }

    /// Closes the write ends (`save` is over), waits (GIL released, Ctrl-C checked) until
    /// every source reached its end, then moves
    /// the output into place. Returns (events, bytes of text, bytes in the file), or None
    /// when no source received anything (then nothing is written; call `abort`). Raises if
    /// a source failed or more than one received data (the output is discarded).
    fn finish(&self, py: Python<'_>) -> PyResult<Option<Counts>> {
        let mut guard = self.lock()?;
        let streams = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the stream is already finished or aborted"))?;
        streams.writers.clear();
        loop {
            if py.detach(|| streams.wait(POLL)) {
                break;
            }
            py.check_signals()?;
        }
        let counts = py.detach(|| streams.commit());
        match counts {
            Ok(None) => Ok(None), // keep the unused output open until `abort`
            other => {
                guard.take();
                Ok(other?)
            }
        }
    }

    /// Closes the write ends, stops and joins the readers and discards the output (its
    /// temporary file is removed before this returns). Safe to call more than once, and
    /// after `finish`.
    fn abort(&self, py: Python<'_>) {
        let streams = self.streams.lock().ok().and_then(|mut s| s.take());
        if let Some(mut streams) = streams {
            py.detach(move || streams.abort());
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyKinetoStream>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(chunks: &[&[u8]]) -> u64 {
        let mut c = EventCounter::default();
        for chunk in chunks {
            c.feed(chunk);
        }
        c.count
    }

    #[test]
    fn counts_ph_keys_across_boundaries() {
        let text: &[u8] = br#"[{"ph": "X"}, {"ph":"M"}, "phx", "p", {"ph" : 1}]"#;
        assert_eq!(counted(&[text]), 3);
        for cut in 0..=text.len() {
            assert_eq!(counted(&[&text[..cut], &text[cut..]]), 3, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(counted(&bytes), 3);
        let pairs: Vec<&[u8]> = text.chunks(2).collect();
        assert_eq!(counted(&pairs), 3);
        assert_eq!(counted(&[b"\"p", b"h", b"\"", b"\"ph\""]), 2);
    }

    #[test]
    fn rewrite_replaces_the_last_occurrence() {
        let rewrite = Rewrite {
            needle: b"\"/tmp/x/trace.json\"".to_vec(),
            replacement: b"\"out.json\"".to_vec(),
        };
        let mut tail =
            br#"{"a": "/tmp/x/trace.json"}],"traceName": "/tmp/x/trace.json" }"#.to_vec();
        rewrite.apply(&mut tail);
        assert_eq!(
            tail,
            br#"{"a": "/tmp/x/trace.json"}],"traceName": "out.json" }"#.to_vec()
        );
        let mut short = b"\"/tmp".to_vec();
        rewrite.apply(&mut short);
        assert_eq!(short, b"\"/tmp");
    }
}

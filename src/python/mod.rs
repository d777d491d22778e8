//! The thin PyO3 layer: copies Python lists into owned columns, then does everything else
//! with the GIL released. The public API is in `python/kinetrace/`.

mod check;
mod compress;
mod diff;
mod errors;
mod fallback;
mod gzip_writer;
mod interrupt;
mod merge;
mod ops;
mod parquet;
mod reader;
mod repair;
mod split;
mod summary;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use self::interrupt::detached;
use self::reader::Accessors;
use crate::error::lock;
use crate::error::Error;
use crate::export::format::Header;
use crate::export::graphs::{Annotation, CharClasses, GraphAnnotations, GraphState};
use crate::export::pipeline::{ExportStats, Exporter, Queue, SliceOutput, QUEUE_DEPTH};
use crate::export::trace::{self, PartialSummary, StrColumn};
use crate::output::sink::Encoding;

/// A slice's first pass as Python carries it: (activities, min ts, max end,
/// [(device, first ts)], [((device, tid), first ts)]).
type PartialTuple = (usize, i128, i128, Vec<(i64, i64)>, Vec<((i64, i64), i64)>);

/// A finished export: (events, uncompressed bytes, file bytes, CRC-32 of a gzip slice).
type Finished = (u64, u64, u64, Option<u32>);

/// A new descriptor of the open file `fd` (the caller keeps and closes its own).
#[cfg(unix)]
fn duplicate_fd(fd: i32) -> PyResult<std::fs::File> {
    use std::os::fd::{BorrowedFd, RawFd};
    if fd < 0 {
        return Err(Error::InvalidArgument(format!("not a file descriptor: {fd}")).into());
    }
    // SAFETY: only duplicated (fcntl F_DUPFD_CLOEXEC), never closed or used beyond this
    // call; a descriptor that is not open makes the duplication fail with EBADF.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd as RawFd) };
    let owned = borrowed
        .try_clone_to_owned()
        .map_err(|e| Error::io(format!("cannot use file descriptor {fd}"), e))?;
    Ok(std::fs::File::from(owned))
}

#[cfg(not(unix))]
fn duplicate_fd(fd: i32) -> PyResult<std::fs::File> {
    Err(Error::InvalidArgument(format!("file descriptors need a POSIX system, got {fd}")).into())
}

/// Calls `f` with the bytes of a Python string. Strings holding lone surrogates (which
/// UTF-8 cannot encode) come as `surrogatepass` bytes; the renderer writes them as
/// `\udXXX` the way `json.dumps` does.
fn with_str_bytes<R>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    f: impl FnOnce(&[u8]) -> R,
) -> PyResult<R> {
    let s = obj
        .cast::<PyString>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be str, not {}", type_name(obj))))?;
    match s.to_str() {
        Ok(text) => Ok(f(text.as_bytes())),
        Err(_) => {
            let encoded = s.call_method1("encode", ("utf-8", "surrogatepass"))?;
            Ok(f(encoded.cast::<PyBytes>()?.as_bytes()))
        }
    }
}

fn str_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    with_str_bytes(obj, what, <[u8]>::to_vec)
}

fn push_str(col: &mut StrColumn, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    with_str_bytes(obj, what, |bytes| col.push(bytes))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// One export in progress (private: driven by `kinetrace._export.export`).
#[pyclass(module = "kinetrace._kinetrace", name = "_Exporter")]
struct PyExporter {
    inner: Mutex<ExporterState>,
}

struct ExporterState {
    exporter: Exporter,
    /// When the export began (the test hooks' slowdown measures from here).
    started: Instant,
    /// Writes `"cudaGraphInlineAnnotated": true` in the header.
    inline_annotated: bool,
}

impl PyExporter {
    fn state(&self) -> PyResult<MutexGuard<'_, ExporterState>> {
        Ok(lock(&self.inner, "exporter")?)
    }
}

#[pymethods]
impl PyExporter {
    /// `background`: never wait for the writer while extracting (batches queue up in
    /// memory), so the caller is released as soon as the fields are read.
    /// `slice`: an open file descriptor (an anonymous file the parent made): write only
    /// this process's activity events into it (a worker's slice; a raw deflate piece for
    /// gzip), for the parent to splice in with `append_slice`; `path` (the destination)
    /// then only names it in errors.
    #[new]
    #[pyo3(signature = (path, compresslevel=None, threads=1, background=false, slice=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        compresslevel: Option<u32>,
        threads: usize,
        background: bool,
        slice: Option<i32>,
    ) -> PyResult<Self> {
        let encoding = match compresslevel {
            None => Encoding::Plain,
            Some(level) => Encoding::Gzip { level, threads },
        };
        let queue = if background {
            Queue::Unbounded
        } else {
            Queue::Bounded(QUEUE_DEPTH)
        };
        let exporter = match slice {
            Some(fd) => {
                let file = duplicate_fd(fd)?;
                Exporter::create_in_file(file, &path, encoding, queue)?
            }
            None => py.detach(|| Exporter::create(&path, encoding, queue))?,
        };
        Ok(PyExporter {
            inner: Mutex::new(ExporterState {
                exporter,
                started: Instant::now(),
                inline_annotated: false,
            }),
        })
    }

    /// The first pass over activities `lo..hi` of `activities` (device, resource id,
    /// timestamp, duration of each), read through `accessors` (see `reader`).
    fn read_first_pass(
        &self,
        py: Python<'_>,
        accessors: &Accessors,
        activities: &Bound<'_, PyList>,
        lo: usize,
        hi: usize,
    ) -> PyResult<()> {
        // Read before the state is locked: an accessor written in Python may call back.
        let timings = reader::read_timings(py, accessors, activities, lo, hi)?;
        let mut state = self.state()?;
        let first = state.exporter.first_pass()?;
        first.reserve(timings.len());
        for [device, resource, ts, dur] in timings {
            first.push(device, resource, ts, dur);
        }
        Ok(())
    }

    /// This slice's first pass, for the parent to merge: (activities, min ts, max end,
    /// [(device, first ts)], [((device, tid), first ts)]).
    #[allow(clippy::type_complexity)]
    fn partial_summary(
        &self,
    ) -> PyResult<(usize, i128, i128, Vec<(i64, i64)>, Vec<((i64, i64), i64)>)> {
        let mut state = self.state()?;
        let p = state.exporter.first_pass()?.partial();
        Ok((p.activities, p.min_ts, p.max_end, p.devices, p.threads))
    }

    /// Merges the first pass of the next slice (a worker's `partial_summary()`).
    fn merge_partial(&self, partial: PartialTuple) -> PyResult<()> {
        let (activities, min_ts, max_end, devices, threads) = partial;
        let later = PartialSummary {
            activities,
            min_ts,
            max_end,
            devices,
            threads,
        };
        self.state()?.exporter.first_pass()?.merge(&later);
        Ok(())
    }

    /// Bakes CUDA-graph annotations into the trace (before `start`). `entries`: (node
    /// id, args members or None, lane or None, lane name or None) per annotated node;
    /// `digits` / `spaces`: Python's `\d` ((first, last, zero) runs) and `\s` (code
    /// points) beyond ASCII; `inline_annotated`: write the header flag.
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::type_complexity)]
    fn set_graph_annotations(
        &self,
        entries: Vec<(
            u64,
            Option<Bound<'_, PyAny>>,
            Option<i64>,
            Option<Bound<'_, PyAny>>,
        )>,
        lanes_all: bool,
        default_stream: i64,
        digits: Vec<(u32, u32, u32)>,
        spaces: Vec<u32>,
        inline_annotated: bool,
    ) -> PyResult<()> {
        let mut map = std::collections::HashMap::with_capacity(entries.len());
        for (node, args, stream, lane_name) in entries {
            let args = args.map(|a| str_bytes(&a, "annotation args")).transpose()?;
            let lane_name = lane_name
                .map(|n| str_bytes(&n, "annotation lane name"))
                .transpose()?;
            map.insert(
                node,
                Annotation {
                    args,
                    stream,
                    lane_name,
                },
            );
        }
        let graphs = GraphAnnotations {
            entries: map,
            lanes_all,
            default_stream,
            classes: CharClasses { digits, spaces },
        };
        let mut state = self.state()?;
        state.exporter.set_graph_annotations(graphs)?;
        state.inline_annotated = inline_annotated;
        Ok(())
    }

    /// A finished slice's CUDA-graph state as bytes (for `append_slice` in the parent),
    /// or None without annotations.
    fn graph_state<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let state = self.state()?.exporter.take_graph_state()?;
        Ok(state.map(|s| PyBytes::new(py, &s.encode())))
    }

    /// Queues a worker's finished output after the events submitted so far: the file open
    /// as `fd`, which must still be the regular file `identity` (device, inode) and hold
    /// `file_len` bytes (`path`, the destination, names it in errors), with the slice's
    /// CUDA-graph state (`graph_state()` in the worker) when it has one.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, fd, identity, events, text_len, file_len, crc=None, graph_state=None))]
    fn append_slice(
        &self,
        py: Python<'_>,
        path: PathBuf,
        fd: i32,
        identity: (u64, u64),
        events: u64,
        text_len: u64,
        file_len: u64,
        crc: Option<u32>,
        graph_state: Option<&[u8]>,
    ) -> PyResult<()> {
        let graph = graph_state.map(GraphState::decode).transpose()?;
        let file = duplicate_fd(fd)?;
        crate::output::sink::check_worker_output(&file, identity, file_len, &path)?;
        let mut state = self.state()?;
        let exporter = &mut state.exporter;
        let slice = SliceOutput {
            file,
            events,
            text_len,
            crc,
        };
        detached(py, |interrupted| {
            exporter.append_slice(slice, graph, interrupted)
        })
    }

    /// The earliest activity timestamp seen by the first pass, or None.
    fn min_timestamp(&self) -> PyResult<Option<i64>> {
        Ok(self.state()?.exporter.first_pass()?.min_ts())
    }

    /// Ends the first pass; the writer thread starts with the header.
    #[pyo3(signature = (base_ns, host_pid, device_properties, metadata, versions))]
    fn start(
        &self,
        base_ns: i128,
        host_pid: i64,
        device_properties: &Bound<'_, PyAny>,
        metadata: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
        versions: Vec<(String, i64)>,
    ) -> PyResult<()> {
        let mut header = Header {
            device_properties: str_bytes(device_properties, "device properties")?,
            metadata: Vec::with_capacity(metadata.len()),
            versions,
            inline_annotated: false,
        };
        for (key, value) in &metadata {
            header.metadata.push((
                str_bytes(key, "metadata key")?,
                str_bytes(value, "metadata value")?,
            ));
        }
        let mut state = self.state()?;
        header.inline_annotated = state.inline_annotated;
        state.exporter.start(base_ns, host_pid, header)?;
        Ok(())
    }

    /// Reads activities `lo..hi` of `activities` through `accessors` (every field the
    /// format needs, and only those: see `reader`) as the next batch and queues it for the
    /// writer thread, waiting (GIL released, Ctrl-C answered) while the queue is full.
    fn read_batch(
        &self,
        py: Python<'_>,
        accessors: &Accessors,
        activities: &Bound<'_, PyList>,
        lo: usize,
        hi: usize,
    ) -> PyResult<()> {
        let start = self.state()?.exporter.next_start();
        let batch = reader::read_batch(py, accessors, activities, lo, hi, start)?;
        let mut state = self.state()?;
        let exporter = &mut state.exporter;
        if exporter.next_start() != start {
            return Err(Error::State("batches were read concurrently".into()).into());
        }
        let mut batch = Some(batch);
        detached(py, |interrupted| {
            crate::output::interrupt::wait(interrupted, |timeout| {
                let offered = batch.take().expect("a batch is held until it is queued");
                batch = exporter.offer_batch(offered, timeout)?;
                Ok(batch.is_none().then_some(()))
            })
        })
    }

    /// Queues the closing events; the writer thread finishes the file on its own.
    fn close(&self, py: Python<'_>, trace_name: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = str_bytes(trace_name, "trace name")?;
        let mut state = self.state()?;
        let exporter = &mut state.exporter;
        detached(py, |interrupted| exporter.close(name, interrupted))?;
        Ok(())
    }

    /// Waits for the output to be complete and in place (GIL released, Ctrl-C answered),
    /// at most `timeout` seconds when given. Returns (events, uncompressed bytes, file
    /// bytes, CRC-32 of a gzip timeout or None), or None on timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Finished>> {
        let deadline = match timeout {
            Some(t) if t.is_finite() && t >= 0.0 => {
                Some(Instant::now() + Duration::from_secs_f64(t.min(1e9)))
            }
            Some(t) if t.is_nan() || t < 0.0 => {
                return Err(Error::InvalidArgument(format!("timeout must be >= 0, got {t}")).into())
            }
            _ => None,
        };
        let mut state = self.state()?;
        let exporter = &mut state.exporter;
        let finished = detached(py, |interrupted| {
            crate::output::interrupt::wait_until(deadline, interrupted, |timeout| {
                exporter.wait(timeout).transpose()
            })
        })?;
        if finished.is_some() {
            let started = state.started;
            py.detach(|| slow_down_for_tests(started));
        }
        Ok(finished.map(|stats| {
            let ExportStats {
                events,
                uncompressed_bytes,
                file_bytes,
                slice_crc,
            } = stats;
            (events, uncompressed_bytes, file_bytes, slice_crc)
        }))
    }

    /// Makes the writer thread panic (tests of the panic path only).
    #[cfg(feature = "test-hooks")]
    fn _inject_panic(&self) -> PyResult<()> {
        self.state()?.exporter.inject_panic_for_tests()?;
        Ok(())
    }

    /// Bytes of event text written so far (for progress bars).
    fn bytes_written(&self) -> PyResult<u64> {
        Ok(self.state()?.exporter.bytes_written())
    }

    /// Stops the export and removes its temporary file. Safe to call more than once.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        let mut state = self.state()?;
        let exporter = &mut state.exporter;
        py.detach(|| exporter.abort());
        Ok(())
    }
}

/// `KINETRACE_TEST_SLOWDOWN=F` (builds with the `test-hooks` feature only, never a release
/// wheel): work that began at `started` is held until it has taken F times as long (an
/// export from its exporter's creation to the file in place; a summary's or a diff's native
/// read), so
/// `tests/test_bench_gate.py` can show that a slower kinetrace turns the benchmark gate red.
#[cfg(feature = "test-hooks")]
pub(crate) fn slow_down_for_tests(started: Instant) {
    let factor = std::env::var("KINETRACE_TEST_SLOWDOWN")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|f| f.is_finite() && (1.0..1000.0).contains(f));
    if let Some(factor) = factor {
        std::thread::sleep(started.elapsed().mul_f64(factor - 1.0));
    }
}

#[cfg(not(feature = "test-hooks"))]
pub(crate) fn slow_down_for_tests(_started: Instant) {}

/// Panics on the calling thread (tests of the panic path only): PyO3 turns it into
/// `pyo3_runtime.PanicException` and the interpreter goes on.
#[cfg(feature = "test-hooks")]
#[pyfunction]
fn _panic_for_tests() {
    panic!("panic requested by a test");
}

/// Creates an empty temporary file for the destination name `name` in `directory` (the
/// shape every temporary has, see `crate::output::temps`; stale ones are removed first) and returns
/// its path: for a file that is renamed into place once complete.
#[pyfunction]
fn create_temporary(directory: PathBuf, name: std::ffi::OsString) -> PyResult<PathBuf> {
    let (_, path) = crate::output::temps::create(&directory, &name).map_err(|e| {
        Error::io(
            format!(
                "cannot create a temporary file for {}",
                directory.join(&name).display()
            ),
            e,
        )
    })?;
    Ok(path)
}

/// Creates an empty temporary folder (mode 0700) for the name `name` in `directory` (named
/// as every temporary is, see `crate::output::temps`; stale ones are removed first) and
/// returns its path: a private folder that one a killed process left is removed by a later
/// run there.
#[pyfunction]
fn create_temporary_dir(directory: PathBuf, name: std::ffi::OsString) -> PyResult<PathBuf> {
    let path = crate::output::temps::create_dir(&directory, &name).map_err(|e| {
        let what = directory.join(&name);
        Error::io(
            format!("cannot create a temporary folder for {}", what.display()),
            e,
        )
    })?;
    Ok(path)
}

/// Removes the folder `path` and everything in it (never following a link), in one native
/// call with the GIL released: a Ctrl-C meanwhile is raised once it returns, never midway
/// (`shutil.rmtree` interrupted between closing a folder and noting it closed closes it
/// again, and that `OSError` then replaces the `KeyboardInterrupt`). A folder already gone
/// is no error; returns whether the folder is gone, as removing a temporary is best effort.
#[pyfunction]
fn remove_temporary_dir(py: Python<'_>, path: PathBuf) -> bool {
    py.detach(move || match std::fs::remove_dir_all(&path) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    })
}

/// Removes the temporary files process `pid` (a killed and reaped child) left beside
/// `path` (beside its target, for a symbolic link); returns how many.
#[pyfunction]
fn remove_temporaries(path: PathBuf, pid: u32) -> usize {
    crate::output::temps::remove_of_process(&crate::output::sink::target_dir(&path), pid)
}

/// The trimonth time base for a trace whose earliest time is `earliest_ns`.
#[pyfunction]
fn trimonth_base_ns(earliest_ns: i128) -> i128 {
    trace::trimonth_base_ns(earliest_ns)
}

#[pymodule]
fn _kinetrace(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let excluded: Vec<&str> = trace::EXTERNAL_ID_EXCLUDED
        .iter()
        .map(|c| std::str::from_utf8(c).expect("category names are ASCII"))
        .collect();
    m.add("EXTERNAL_ID_EXCLUDED", excluded)?;
    m.add_class::<PyExporter>()?;
    gzip_writer::register(m)?;
    fallback::register(m)?;
    interrupt::register(m)?;
    check::register(m)?;
    repair::register(m)?;
    compress::register(m)?;
    split::register(m)?;
    merge::register(m)?;
    summary::register(m)?;
    diff::register(m)?;
    ops::register(m)?;
    parquet::register(m)?;
    reader::register(m)?;
    m.add_function(wrap_pyfunction!(trimonth_base_ns, m)?)?;
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add_function(wrap_pyfunction!(create_temporary, m)?)?;
    m.add_function(wrap_pyfunction!(create_temporary_dir, m)?)?;
    m.add_function(wrap_pyfunction!(remove_temporaries, m)?)?;
    m.add_function(wrap_pyfunction!(remove_temporary_dir, m)?)?;
    Ok(())
}

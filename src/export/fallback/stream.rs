//! The stream: Kineto's output read from its sources (the read ends of FIFOs, or a file
//! Kineto already wrote) by one thread each, checked and repaired on the way by that thread
//! ([`Validator`]: each read is checked up to its last complete token, written with the
//! repairs, and the rest kept for the next read) and written into the destination through
//! [`Sink`] (plain, or one gzip member from the parallel encoder), so no copy of the trace
//! lands on disk beside the destination.
//!
//! The output is created before any reader starts (so a bad destination fails while the
//! result can still be saved) and is claimed by the first reader that receives a byte; a
//! second reader receiving data is an error. The readers never need the GIL (`save` holds
//! it for its whole run). A reader whose output failed (a full disk) keeps draining its
//! source to the end, so Kineto never blocks on a full pipe while holding the GIL; the
//! error is reported by [`Stream::finish`].
//!
//! The stream owns the FIFOs' write ends too, kept open so that no reader sees end of file
//! before `save` is over: [`Stream::finish`] closes them and waits for the readers in
//! [`crate::output::interrupt::POLL`] slices; [`Stream::abort`] (also on drop, and when `finish`
//! is interrupted) closes them, stops and joins the readers and removes the temporary
//! output before it returns, so no temporary file outlives an interrupted export.

use std::fs::File;
use std::io::{self, Read};
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::text::{head_members, TraceNameRewrite};
use super::validator::{not_strict, Validator};
use crate::error::{panic_message, Error, Result};
use crate::output::interrupt::{self, Interrupted};
use crate::output::sink::{Encoding, Sink};

/// Read size (a pipe hands over at most its buffer, 64 KiB by default, per read).
const CHUNK: usize = 256 << 10;

/// A finished stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamStats {
    /// Trace events written (`"ph"` keys seen).
    pub(crate) events: u64,
    /// Bytes of JSON text written.
    pub(crate) text_bytes: u64,
    /// Bytes in the file.
    pub(crate) file_bytes: u64,
}

/// What the readers share.
struct Shared {
    /// The output, until the first reader that receives data claims it.
    sink: Mutex<Option<Sink>>,
    /// Set by `abort` and on drop: readers stop at their next read.
    cancel: AtomicBool,
    rewrite: Option<TraceNameRewrite>,
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
        .map_err(|_| Error::Poisoned("fallback output"))?;
    slot.take().ok_or_else(|| {
        Error::State(
            "Kineto wrote its trace into more than one file, so kinetrace cannot tell which \
             one is the trace"
                .into(),
        )
    })
}

/// The claimed output of one reader: the sink, the validator that checks (and repairs) what
/// goes into it, and the tail held back for the trace-name rewrite.
struct Output {
    sink: Sink,
    validator: Validator,
    /// The members to insert after the opening `{` (taken once written).
    head: Vec<u8>,
    /// The last bytes written, held back for the rewrite.
    held: Vec<u8>,
    keep: usize,
}

impl Output {
    fn new(sink: Sink, shared: &Shared) -> Output {
        Output {
            sink,
            validator: Validator::new(shared.head.clone()),
            head: shared.head.clone(),
            held: Vec::new(),
            keep: shared.rewrite.as_ref().map_or(0, TraceNameRewrite::keep),
        }
    }

    /// Checks the complete tokens at the start of `text` (what earlier calls left, then
    /// new bytes) and writes them, repaired: the bytes consumed.
    fn take(&mut self, text: &[u8]) -> Result<usize> {
        let start = self.validator.offset();
        let used = self.validator.feed(text).map_err(not_strict)?;
        self.emit(&text[..used], start)?;
        Ok(used)
    }

    /// The end of the text: checks and writes `rest`, then the held tail, rewritten.
    fn end(&mut self, rest: &[u8], rewrite: Option<&TraceNameRewrite>) -> Result<()> {
        let start = self.validator.offset();
        self.validator.finish(rest).map_err(not_strict)?;
        self.emit(rest, start)?;
        if let Some(rewrite) = rewrite {
            rewrite.apply(&mut self.held);
        }
        self.sink.write_all(&self.held)
    }

    /// Writes `text` (checked; it starts at `start` in Kineto's text) with the repairs and
    /// the members the validator placed in it.
    fn emit(&mut self, text: &[u8], start: u64) -> Result<()> {
        let mut from = 0;
        if let Some(at) = self.validator.head_at().filter(|_| !self.head.is_empty()) {
            // Once: the members are gone from `self.head` after this.
            let at = (at - start) as usize;
            let members = std::mem::take(&mut self.head);
            self.push(&text[..at])?;
            self.push(&members)?;
            from = at;
        }
        let mut repairs = std::mem::take(self.validator.repairs());
        let mut result = Ok(());
        for &at in &repairs {
            let at = (at - start) as usize;
            result = result
                .and_then(|()| self.push(&text[from..at]))
                .and_then(|()| self.push(b"\\"));
            from = at;
        }
        repairs.clear();
        *self.validator.repairs() = repairs; // the allocation, for the next piece
        result.and_then(|()| self.push(&text[from..]))
    }

    /// Writes `data`, holding back the last `keep` bytes of the text for the rewrite.
    fn push(&mut self, data: &[u8]) -> Result<()> {
        if self.keep == 0 {
            return self.sink.write_all(data);
        }
        if data.len() >= self.keep {
            self.sink.write_all(&self.held)?;
            self.held.clear();
            let cut = data.len() - self.keep;
            self.sink.write_all(&data[..cut])?;
            self.held.extend_from_slice(&data[cut..]);
        } else {
            self.held.extend_from_slice(data);
            if self.held.len() >= 2 * self.keep {
                let cut = self.held.len() - self.keep;
                self.sink.write_all(&self.held[..cut])?;
                self.held.drain(..cut);
            }
        }
        Ok(())
    }
}

/// Streams one source into the shared sink (claimed on the first byte), to end of file.
fn read_source(src: &mut File, shared: &Shared) -> Outcome {
    let mut buf = vec![0u8; CHUNK];
    // Bytes at the front of `buf` the validator left (a token cut by the read).
    let mut filled = 0;
    let mut out: Option<Output> = None;
    let mut failed: Option<Error> = None;
    loop {
        if shared.cancel.load(Ordering::Relaxed) {
            return Outcome::Cancelled;
        }
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // one token longer than the buffer
        }
        let n = match src.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Outcome::Failed(Error::io("cannot read Kineto's output", e)),
        };
        if failed.is_some() {
            continue; // drain, so Kineto (holding the GIL) never blocks on a full pipe
        }
        let output = match &mut out {
            Some(output) => output,
            None => match claim(shared) {
                Ok(sink) => out.insert(Output::new(sink, shared)),
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            },
        };
        filled += n;
        match output.take(&buf[..filled]) {
            Ok(used) => {
                buf.copy_within(used..filled, 0);
                filled -= used;
            }
            Err(e) => {
                failed = Some(e);
                out = None; // removes the temporary file now, freeing the space
                filled = 0;
            }
        }
    }
    if let Some(e) = failed {
        return Outcome::Failed(e);
    }
    let Some(mut output) = out else {
        return Outcome::Empty;
    };
    if let Err(e) = output.end(&buf[..filled], shared.rewrite.as_ref()) {
        return Outcome::Failed(e);
    }
    Outcome::Filled {
        events: output.validator.events(),
        sink: Box::new(output.sink),
    }
}

/// The readers of one export and what they reported so far.
pub(crate) struct Stream {
    shared: Arc<Shared>,
    /// The FIFOs' write ends, open until `save` is over (closed by `finish`, `abort`, drop).
    writers: Vec<File>,
    rx: Receiver<(usize, Outcome)>,
    outcomes: Vec<Option<Outcome>>,
    pending: usize,
    handles: Vec<JoinHandle<()>>,
}

impl Stream {
    /// Creates the output at `dst` (atomically through a temporary file beside it; an
    /// existing destination that is not a regular file is written directly), then starts
    /// one reader per source. `writers`: the sources' write ends, held until
    /// [`Stream::finish`]. `trace_name`: the rewrite of Kineto's `"traceName"` value, if
    /// any; `metadata`: `(key, JSON text)` pairs written as top-level members after the
    /// opening `{`.
    pub(crate) fn start(
        sources: Vec<File>,
        writers: Vec<File>,
        dst: &Path,
        encoding: Encoding,
        trace_name: Option<TraceNameRewrite>,
        metadata: &[(String, String)],
    ) -> Result<Stream> {
        // Before any reader starts, so a bad destination fails while the sources are idle.
        let sink = Sink::create(dst, encoding)?;
        let shared = Arc::new(Shared {
            sink: Mutex::new(Some(sink)),
            cancel: AtomicBool::new(false),
            rewrite: trace_name,
            head: head_members(metadata),
        });
        let (tx, rx) = mpsc::channel();
        let mut stream = Stream {
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
                .name(format!("kinetrace-fallback-{index}"))
                .spawn(move || {
                    let outcome =
                        panic::catch_unwind(AssertUnwindSafe(|| read_source(&mut src, &shared)))
                            .unwrap_or_else(|p| Outcome::Failed(Error::Panic(panic_message(&*p))));
                    drop(src);
                    let _ = tx.send((index, outcome));
                })
                // Dropping `stream` cancels the readers already started.
                .map_err(|e| Error::io("cannot start a reader thread", e))?;
            stream.handles.push(handle);
            stream.outcomes.push(None);
            stream.pending += 1;
        }
        Ok(stream)
    }

    /// Streams a file Kineto already wrote (where FIFOs are unavailable, or Kineto replaced
    /// one with a regular file). The source is only read, never removed.
    pub(crate) fn from_path(
        src: &Path,
        dst: &Path,
        encoding: Encoding,
        trace_name: Option<TraceNameRewrite>,
        metadata: &[(String, String)],
    ) -> Result<Stream> {
        let file =
            File::open(src).map_err(|e| Error::io(format!("cannot open {}", src.display()), e))?;
        Stream::start(vec![file], Vec::new(), dst, encoding, trace_name, metadata)
    }

    /// Closes the write ends (`save` is over), waits until every source reached its end
    /// (calling `interrupted` every [`interrupt::POLL`]), then moves the output into place. `None`
    /// when no source received anything: nothing is written, and the output stays open
    /// (an existing FIFO destination sees no end of file) until [`Stream::abort`] or a
    /// drop. An error (a source failed, more than one received data, `interrupted`
    /// failed) discards the output; after an interrupt the readers are stopped and joined
    /// before this returns.
    pub(crate) fn finish(&mut self, interrupted: &mut Interrupted) -> Result<Option<StreamStats>> {
        self.writers.clear();
        if let Err(e) = interrupt::wait(interrupted, |timeout| {
            Ok(self.collect(timeout).then_some(()))
        }) {
            self.abort();
            return Err(e);
        }
        self.commit()
    }

    /// Collects outcomes for at most `timeout`; true once every reader has reported.
    fn collect(&mut self, timeout: Duration) -> bool {
        while self.pending > 0 {
            match self.rx.recv_timeout(timeout) {
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

    /// After every reader reported: commits the one output that received data.
    fn commit(&mut self) -> Result<Option<StreamStats>> {
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
                Ok(Some(StreamStats {
                    events,
                    text_bytes: stats.uncompressed_bytes,
                    file_bytes: stats.file_bytes,
                }))
            }
            None => Ok(None),
        }
    }

    /// Closes the write ends, stops and joins the readers and discards the output (its
    /// temporary file is removed before this returns). Safe to call more than once, and
    /// after `finish`.
    pub(crate) fn abort(&mut self) {
        // Write ends first: a reader blocked in read() returns only at end of file.
        self.writers.clear();
        self.shared.cancel.store(true, Ordering::Relaxed);
        self.join();
        self.outcomes.clear();
        while self.rx.try_recv().is_ok() {} // outcomes not collected yet: their outputs too
        self.pending = 0;
        // A poisoned slot still holds the output: take it all the same, to remove it.
        let mut slot = self
            .shared
            .sink
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.take();
    }
}

impl Drop for Stream {
    /// Like `abort`: once the write ends are closed the readers reach end of file at once
    /// (`save` is not running: it holds the GIL, and so does whoever drops this), and they
    /// remove the temporary file before the drop returns.
    fn drop(&mut self) {
        self.abort();
    }
}

/// The readers driven through real FIFOs, opened the way `kinetrace._export.fallback` opens them,
/// with a thread in Kineto's place writing into them.
#[cfg(all(test, unix))]
mod tests {
    use std::ffi::CString;
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;
    use std::time::Instant;

    use super::*;
    use crate::testing::{kineto_doc, scratch, ScratchDir};

    /// A new FIFO at `path`: (read end, blocking; write end, held as `_fallback` holds it).
    fn fifo(path: &Path) -> (File, File) {
        let _ = fs::remove_file(path); // the previous round's
        let c_path = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo: {}", io::Error::last_os_error());
        let nonblocking = |write: bool| {
            OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .unwrap()
        };
        let read = nonblocking(false);
        let write = nonblocking(true);
        let fd = read.as_raw_fd();
        // SAFETY: fcntl on a descriptor `read` owns, changing only its O_NONBLOCK flag.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            assert!(flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0);
        }
        (read, write)
    }

    /// One export's setting: FIFOs at `<dir>/fifos/trace.json` and `.tmp` (where Kineto
    /// writes), the destination `<dir>/out.json`.
    struct Setup {
        dir: ScratchDir,
        fifos: [PathBuf; 2],
        dst: PathBuf,
    }

    impl Setup {
        fn new(name: &str) -> Setup {
            let dir = scratch(name);
            fs::create_dir(dir.join("fifos")).unwrap();
            let target = dir.join("fifos").join("trace.json");
            let fifos = [target.clone(), dir.join("fifos").join("trace.json.tmp")];
            let dst = dir.join("out.json");
            Setup { dir, fifos, dst }
        }

        fn start(
            &self,
            dst: &Path,
            encoding: Encoding,
            trace_name: Option<TraceNameRewrite>,
            metadata: &[(String, String)],
        ) -> Stream {
            let (sources, writers) = self.fifos.iter().map(|p| fifo(p)).unzip();
            Stream::start(sources, writers, dst, encoding, trace_name, metadata).unwrap()
        }

        fn plain(&self) -> Stream {
            self.start(&self.dst, Encoding::Plain, None, &[])
        }

        /// The `"traceName"` rewrite `_fallback` asks for.
        fn rewrite(&self) -> TraceNameRewrite {
            TraceNameRewrite {
                needle: format!("\"{}\"", self.fifos[0].display()).into_bytes(),
                replacement: b"\"out.json\"".to_vec(),
            }
        }

        /// What is in the destination's folder besides the FIFOs' folder.
        fn outputs(&self) -> Vec<String> {
            let mut names: Vec<String> = fs::read_dir(&*self.dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "fifos")
                .collect();
            names.sort();
            names
        }

        /// Waits (at most 10 s) until a reader has received data and claimed the output
        /// (a temporary file, created when the stream started).
        fn wait_for_claim(&self, stream: &Stream) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while stream.shared.sink.lock().unwrap().is_some() {
                assert!(Instant::now() < deadline, "no reader received data");
                thread::sleep(Duration::from_millis(5));
            }
            let outputs = self.outputs();
            assert!(
                outputs.len() == 1 && outputs[0].ends_with(".kinetrace-tmp"),
                "{outputs:?}"
            );
        }
    }

    /// Kineto's part: opens `path` for writing, writes `chunks` (sleeping `pause` after
    /// each, so that the reader receives them one by one), then closes it.
    fn kineto(path: &Path, chunks: Vec<Vec<u8>>, pause: Duration) -> JoinHandle<io::Result<()>> {
        let path = path.to_path_buf();
        thread::spawn(move || {
            let mut file = OpenOptions::new().write(true).open(&path)?;
            for chunk in chunks {
                file.write_all(&chunk)?;
                if !pause.is_zero() {
                    thread::sleep(pause);
                }
            }
            Ok(())
        })
    }

    /// Joins Kineto's thread, failing (instead of hanging the suite) after 20 s.
    fn join_kineto(handle: JoinHandle<io::Result<()>>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !handle.is_finished() {
            assert!(Instant::now() < deadline, "Kineto's writes never completed");
            thread::sleep(Duration::from_millis(5));
        }
        handle.join().unwrap().unwrap();
    }

    /// An interrupt callback that fails the test's wait after 20 s instead of hanging.
    fn within_20s() -> impl FnMut() -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        move || {
            if Instant::now() < deadline {
                Ok(())
            } else {
                Err(Error::State("the stream never finished".into()))
            }
        }
    }

    fn parse(bytes: &[u8]) -> serde_json::Value {
        serde_json::from_slice(bytes).expect("strict JSON")
    }

    fn gunzip(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn a_trace_in_one_chunk_is_written_as_is() {
        let s = Setup::new("one-chunk");
        let mut stream = s.plain();
        let doc = kineto_doc(3, |i| format!("op{i}"), &s.fifos[0]);
        join_kineto(kineto(&s.fifos[0], vec![doc.clone()], Duration::ZERO));
        let stats = stream.finish(&mut within_20s()).unwrap().unwrap();
        let len = doc.len() as u64;
        assert_eq!(
            stats,
            StreamStats {
                events: 3,
                text_bytes: len,
                file_bytes: len
            }
        );
        assert_eq!(fs::read(&s.dst).unwrap(), doc);
        assert_eq!(s.outputs(), ["out.json"]);
    }

    #[test]
    fn a_trace_in_many_small_chunks_is_written_whole() {
        let s = Setup::new("small-chunks");
        // Larger than a read (CHUNK) and than the tail held back for the rewrite.
        let doc = kineto_doc(8000, |i| format!("aten::op_{i}"), &s.fifos[1]);
        assert!(doc.len() > 2 * CHUNK);
        let sizes = [1, 2, 3, 5, 8, 13, 4096, 7, 65536, 11];
        let mut chunks = Vec::new();
        let mut at = 0;
        for size in sizes.iter().cycle() {
            if at == doc.len() {
                break;
            }
            let end = (at + size).min(doc.len());
            chunks.push(doc[at..end].to_vec());
            at = end;
        }
        for encoding in [
            Encoding::Plain,
            Encoding::Gzip {
                level: 1,
                threads: 2,
            },
        ] {
            let mut stream = s.start(&s.dst, encoding, Some(s.rewrite()), &[]);
            // Kineto 2.15 writes `trace.json.tmp` and renames it: the second FIFO.
            let writer = kineto(&s.fifos[1], chunks.clone(), Duration::ZERO);
            join_kineto(writer);
            let stats = stream.finish(&mut within_20s()).unwrap().unwrap();
            assert_eq!(stats.events, 8000);
            let file = fs::read(&s.dst).unwrap();
            let text = match encoding {
                Encoding::Plain => file,
                _ => gunzip(&file),
            };
            assert_eq!(stats.text_bytes, text.len() as u64);
            // The rewrite names the other FIFO: nothing changes.
            assert_eq!(text, doc);
            assert_eq!(s.outputs(), ["out.json"]);
        }
    }

    #[test]
    fn quotes_kineto_left_unescaped_are_repaired_across_reads() {
        let s = Setup::new("quotes");
        let names = ["a\"b", "say \"hi\", ok", "plain", "\"quoted\""];
        let doc = kineto_doc(4, |i| names[i].to_string(), &s.fifos[0]);
        assert!(serde_json::from_slice::<serde_json::Value>(&doc).is_err());
        let mut stream = s.plain();
        // One byte a write, a pause after each: every quote is judged at a read boundary.
        let chunks = doc.chunks(1).map(<[u8]>::to_vec).collect();
        join_kineto(kineto(&s.fifos[0], chunks, Duration::from_micros(50)));
        let stats = stream.finish(&mut within_20s()).unwrap().unwrap();
        assert_eq!(stats.events, 4);
        let trace = parse(&fs::read(&s.dst).unwrap());
        let got: Vec<&str> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(got, names);
    }

    #[test]
    fn the_trace_name_is_rewritten_across_chunk_boundaries() {
        let s = Setup::new("trace-name");
        let fifo = s.fifos[0].display().to_string();
        // The FIFO's path also appears early in the trace (an event's name): only the
        // last occurrence, Kineto's traceName, is rewritten.
        let doc = kineto_doc(
            300,
            |i| {
                if i == 0 {
                    fifo.clone()
                } else {
                    format!("op{i}")
                }
            },
            &s.fifos[0],
        );
        let needle = format!("\"{fifo}\"");
        let at = doc
            .windows(needle.len())
            .rposition(|w| w == needle.as_bytes())
            .unwrap();
        assert!(
            at > 2 * s.rewrite().keep(),
            "the early name lies outside the tail"
        );
        let metadata = [("kinetrace".to_string(), "{\"version\": 1}".to_string())];
        for cut in [at, at + 1, at + needle.len() / 2, at + needle.len() - 1] {
            let mut stream = s.start(&s.dst, Encoding::Plain, Some(s.rewrite()), &metadata);
            let chunks = vec![doc[..cut].to_vec(), doc[cut..].to_vec()];
            let pause = Duration::from_millis(20);
            join_kineto(kineto(&s.fifos[0], chunks, pause));
            stream.finish(&mut within_20s()).unwrap().unwrap();
            let trace = parse(&fs::read(&s.dst).unwrap());
            assert_eq!(trace["traceName"], "out.json", "cut at {cut}");
            assert_eq!(trace["traceEvents"][0]["name"], fifo.as_str());
            assert_eq!(trace["kinetrace"]["version"], 1);
        }
    }

    #[test]
    fn data_in_a_second_fifo_is_an_error() {
        let s = Setup::new("two-writers");
        let mut stream = s.plain();
        let doc = kineto_doc(2, |i| format!("op{i}"), &s.fifos[0]);
        let first = kineto(&s.fifos[0], vec![doc.clone()], Duration::ZERO);
        let second = kineto(&s.fifos[1], vec![doc], Duration::ZERO);
        join_kineto(first);
        join_kineto(second);
        let err = stream.finish(&mut within_20s()).unwrap_err().to_string();
        assert!(err.contains("more than one file"), "{err}");
        assert!(s.outputs().is_empty(), "{:?}", s.outputs());
    }

    #[test]
    fn nothing_received_writes_nothing() {
        let s = Setup::new("nothing");
        let mut stream = s.plain();
        assert_eq!(stream.finish(&mut within_20s()).unwrap(), None);
        // The output stays open (not committed) until the stream is aborted.
        assert_eq!(s.outputs().len(), 1);
        stream.abort();
        assert!(s.outputs().is_empty(), "{:?}", s.outputs());
    }

    #[test]
    fn abort_removes_the_temporary_output() {
        let s = Setup::new("abort");
        let doc = kineto_doc(100, |i| format!("op{i}"), &s.fifos[0]);
        let half = doc[..doc.len() / 2].to_vec();
        for drop_it in [false, true] {
            let mut stream = s.plain();
            join_kineto(kineto(&s.fifos[0], vec![half.clone()], Duration::ZERO));
            s.wait_for_claim(&stream);
            if drop_it {
                drop(stream);
            } else {
                stream.abort();
                stream.abort(); // twice is fine
            }
            assert!(s.outputs().is_empty(), "{:?}", s.outputs());
        }
    }

    #[test]
    fn an_interrupted_finish_stops_the_readers_and_removes_the_output() {
        let s = Setup::new("interrupted");
        let doc = kineto_doc(100, |i| format!("op{i}"), &s.fifos[0]);
        let mut stream = s.plain();
        // Kineto writes part of the trace and holds its FIFO open until the interrupt:
        // the readers cannot be done before it.
        let (release, released) = mpsc::channel::<()>();
        let path = s.fifos[0].clone();
        let part = doc[..100].to_vec();
        let writer = thread::spawn(move || -> io::Result<()> {
            let mut file = OpenOptions::new().write(true).open(&path)?;
            file.write_all(&part)?;
            let _ = released.recv();
            Ok(())
        });
        s.wait_for_claim(&stream);
        let mut asked = 0;
        let mut interrupted = || {
            asked += 1;
            let _ = release.send(());
            Err(Error::Interrupted)
        };
        let err = stream.finish(&mut interrupted).unwrap_err();
        assert!(matches!(err, Error::Interrupted), "{err}");
        assert_eq!(asked, 1);
        // `finish` returned after the readers were joined and the output removed.
        assert!(s.outputs().is_empty(), "{:?}", s.outputs());
        join_kineto(writer);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_failed_output_still_drains_the_fifo() {
        let s = Setup::new("full");
        // A device that fails every write with ENOSPC, written in place.
        let mut stream = s.start(Path::new("/dev/full"), Encoding::Plain, None, &[]);
        let doc = kineto_doc(60_000, |i| format!("op{i}"), &s.fifos[0]);
        assert!(
            doc.len() > 4 << 20,
            "far more than a pipe and the sink's buffer hold"
        );
        let chunks = doc.chunks(64 << 10).map(<[u8]>::to_vec).collect();
        // Completes only if the reader keeps reading after its output failed.
        join_kineto(kineto(&s.fifos[0], chunks, Duration::ZERO));
        match stream.finish(&mut within_20s()) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{source}")
            }
            other => panic!("expected ENOSPC, got {other:?}"),
        }
    }

    #[test]
    fn a_trace_that_is_still_not_json_is_not_written() {
        let s = Setup::new("invalid");
        let mut stream = s.plain();
        let mut doc = kineto_doc(3, |i| format!("op{i}"), &s.fifos[0]);
        doc.extend_from_slice(b"}\n");
        join_kineto(kineto(&s.fifos[0], vec![doc], Duration::ZERO));
        let err = stream.finish(&mut within_20s()).unwrap_err().to_string();
        assert!(err.contains("not strict JSON"), "{err}");
        assert!(s.outputs().is_empty(), "{:?}", s.outputs());
    }

    #[test]
    fn a_finished_file_streams_from_its_path() {
        let s = Setup::new("from-path");
        let src = s.dir.join("fifos").join("saved.json");
        let doc = kineto_doc(5, |i| format!("op{i}"), &src);
        fs::write(&src, &doc).unwrap();
        let rewrite = TraceNameRewrite {
            needle: format!("\"{}\"", src.display()).into_bytes(),
            replacement: b"\"out.json\"".to_vec(),
        };
        let encoding = Encoding::Gzip {
            level: 6,
            threads: 1,
        };
        let mut stream = Stream::from_path(&src, &s.dst, encoding, Some(rewrite), &[]).unwrap();
        let stats = stream.finish(&mut within_20s()).unwrap().unwrap();
        assert_eq!(stats.events, 5);
        let trace = parse(&gunzip(&fs::read(&s.dst).unwrap()));
        assert_eq!(trace["traceName"], "out.json");
        assert_eq!(fs::read(&src).unwrap(), doc, "the source is only read");
        let missing = Stream::from_path(&s.dir.join("nope"), &s.dst, Encoding::Plain, None, &[]);
        assert!(missing.is_err());
    }
}

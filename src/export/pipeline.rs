//! One export: the first pass is collected on the caller's thread, then batches go through
//! a bounded queue to a writer thread that formats them and writes the output.
//!
//! The queue holds at most a few batches, so memory does not grow with the trace beyond
//! the first-pass timings. Nothing here blocks without a timeout, so the Python layer can
//! check for Ctrl-C while it waits.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::error::{lock, panic_message, Error, Result};
use crate::export::format::{self, Header};
use crate::export::graphs::{GraphAnnotations, GraphState};
use crate::export::trace::{Batch, FirstPass, Summary};
use crate::output::interrupt::{Interrupted, POLL};
use crate::output::sink::{Encoding, Sink, SinkStats};

/// The writer writes a batch's text in chunks of at most this size, checking between
/// them whether the export was cancelled, so an interrupt never waits for a huge batch.
const WRITE_CHUNK: usize = 1 << 20;

/// Batches waiting to be formatted; two keep the writer busy while one more is extracted.
pub(crate) const QUEUE_DEPTH: usize = 2;

/// How many batches may wait for the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    /// At most this many: extraction waits for the writer, memory stays bounded.
    Bounded(usize),
    /// As many as extraction produces: the caller never waits for the writer (background
    /// exports), at the cost of holding the extracted batches in memory.
    Unbounded,
}

/// What the output holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// A whole trace: header, process/thread events, the activities, the closing events.
    Whole,
    /// Only the events of this process's activities: a worker's slice of a trace, which
    /// the parent splices into the whole.
    Slice,
}

/// What a finished export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ExportStats {
    /// Trace events written (metadata, activity, flow and closing events).
    pub(crate) events: u64,
    pub(crate) uncompressed_bytes: u64,
    pub(crate) file_bytes: u64,
    /// For a gzip slice: the CRC-32 of its text (its length is `uncompressed_bytes`).
    pub(crate) slice_crc: Option<u32>,
}

/// A worker's finished slice, to be appended where the parent's own events end.
#[derive(Debug)]
pub(crate) struct SliceOutput {
    /// The worker's output, read from its start (the caller checked what it is).
    pub(crate) file: std::fs::File,
    pub(crate) events: u64,
    pub(crate) text_len: u64,
    /// The CRC-32 of the text, present for a gzip slice.
    pub(crate) crc: Option<u32>,
}

enum Job {
    Header(Box<Header>),
    Batch(Box<Batch>),
    /// A worker's slice, and its CUDA-graph state (see `graphs`).
    Append(SliceOutput, Option<Box<GraphState>>),
    Tail(Vec<u8>),
    /// Makes the writer thread panic: lets tests check that a panic becomes an error.
    #[cfg(any(test, feature = "test-hooks"))]
    PanicForTests,
}

/// Result of offering an item to the queue.
pub(crate) enum Offer<T> {
    Accepted,
    /// The queue stayed full for the whole timeout; the item is handed back.
    TimedOut(T),
    /// The consumer is gone (it failed or the export was aborted).
    Closed,
}

struct QueueState<T> {
    items: VecDeque<T>,
    /// No more items will be pushed.
    closed: bool,
    /// The consumer stopped: pushes fail, pops return nothing.
    cancelled: bool,
}

/// A bounded multi-producer queue whose waits all take a timeout.
struct BoundedQueue<T> {
    state: Mutex<QueueState<T>>,
    not_full: Condvar,
    not_empty: Condvar,
    capacity: usize,
}

impl<T> BoundedQueue<T> {
    fn new(capacity: usize) -> Self {
        BoundedQueue {
            state: Mutex::new(QueueState {
                items: VecDeque::with_capacity(capacity.min(64)),
                closed: false,
                cancelled: false,
            }),
            not_full: Condvar::new(),
            not_empty: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState<T>> {
        // A panic while holding this lock cannot leave the queue inconsistent (each
        // operation is a single push or pop), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offer(&self, item: T, timeout: Duration) -> Offer<T> {
        let guard = self.lock();
        let (mut guard, _) = self
            .not_full
            .wait_timeout_while(guard, timeout, |s| {
                !s.cancelled && s.items.len() >= self.capacity
            })
            .unwrap_or_else(|p| p.into_inner());
        if guard.cancelled || guard.closed {
            return Offer::Closed;
        }
        if guard.items.len() >= self.capacity {
            return Offer::TimedOut(item);
        }
        guard.items.push_back(item);
        self.not_empty.notify_one();
        Offer::Accepted
    }

    /// Blocks until an item arrives; `None` once closed and drained, or cancelled.
    fn pop(&self) -> Option<T> {
        let guard = self.lock();
        let mut guard = self
            .not_empty
            .wait_while(guard, |s| !s.cancelled && !s.closed && s.items.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        if guard.cancelled {
            return None;
        }
        let item = guard.items.pop_front();
        self.not_full.notify_all();
        item
    }

    fn is_cancelled(&self) -> bool {
        self.lock().cancelled
    }

    fn close(&self) {
        self.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }

    fn cancel(&self) {
        let mut guard = self.lock();
        guard.cancelled = true;
        guard.items.clear();
        drop(guard);
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// The writer thread: formats jobs in order and writes them; finishes the sink after the
/// tail, discards it (removing the temporary file) otherwise.
fn run_writer(
    summary: &Summary,
    queue: &BoundedQueue<Job>,
    mut sink: Sink,
    written: &AtomicU64,
    framing: Framing,
    graph_out: &Mutex<Option<GraphState>>,
) -> Result<ExportStats> {
    let mut buf = Vec::with_capacity(4 << 20);
    let mut graph = GraphState::default();
    let mut events = match framing {
        Framing::Whole => format::push_process_events(&mut buf, summary),
        Framing::Slice => 0,
    };
    let mut header_done = false;
    let mut tail_done = false;
    while let Some(job) = queue.pop() {
        match job {
            Job::Header(header) => {
                let mut head = Vec::with_capacity(4096);
                format::push_header(&mut head, summary, &header);
                sink.write_all(&head)?;
                sink.write_all(&buf)?;
                header_done = true;
            }
            Job::Batch(batch) => {
                batch.validate(summary)?;
                buf.clear();
                events += format::push_batch(&mut buf, summary, &batch, &mut graph);
                for chunk in buf.chunks(WRITE_CHUNK) {
                    if queue.is_cancelled() {
                        return Err(Error::Interrupted);
                    }
                    sink.write_all(chunk)?;
                }
                written.fetch_add(buf.len() as u64, Ordering::Relaxed);
            }
            Job::Append(mut slice, slice_graph) => {
                // The worker wrote through a descriptor that shares this one's offset.
                std::io::Seek::rewind(&mut slice.file)
                    .map_err(|e| Error::io("cannot read a worker's output", e))?;
                sink.append_slice(slice.file, slice.text_len, slice.crc)?;
                events += slice.events;
                written.fetch_add(slice.text_len, Ordering::Relaxed);
                if let Some(later) = slice_graph {
                    graph.merge(*later);
                }
            }
            #[cfg(any(test, feature = "test-hooks"))]
            Job::PanicForTests => panic!("panic requested by a test"),
            Job::Tail(trace_name) => {
                buf.clear();
                if summary.graphs.is_some() {
                    events += format::push_graph_closing(&mut buf, summary, &graph);
                }
                events += format::push_tail(&mut buf, summary, &trace_name);
                sink.write_all(&buf)?;
                tail_done = true;
            }
        }
    }
    let complete = match framing {
        Framing::Whole => header_done && tail_done,
        Framing::Slice => !queue.is_cancelled(),
    };
    if !complete {
        return Err(Error::Interrupted);
    }
    if framing == Framing::Slice && summary.graphs.is_some() {
        *lock(graph_out, "graph state")? = Some(graph);
    }
    let SinkStats {
        uncompressed_bytes,
        file_bytes,
        slice_crc,
    } = sink.finish()?;
    Ok(ExportStats {
        events,
        uncompressed_bytes,
        file_bytes,
        slice_crc,
    })
}

struct Running {
    queue: Arc<BoundedQueue<Job>>,
    done: Receiver<Result<ExportStats>>,
    thread: Option<JoinHandle<()>>,
    /// The output is an existing FIFO or device written in place: a reader that stopped
    /// reading can block the writer forever, so abort does not wait for it for long.
    in_place: bool,
}

enum Stage {
    FirstPass { first: FirstPass, sink: Box<Sink> },
    Streaming { running: Running, next_start: usize },
    Finished,
}

/// One export in progress. Dropping it before [`Exporter::wait`] returned a result aborts
/// it: the writer thread stops and the temporary file is removed.
pub(crate) struct Exporter {
    stage: Stage,
    queue: Queue,
    framing: Framing,
    /// CUDA-graph annotations, until `start` hands them to the summary.
    graphs: Option<GraphAnnotations>,
    /// A finished slice's CUDA-graph state, for the parent.
    graph_state: Arc<Mutex<Option<GraphState>>>,
    /// Bytes of event text formatted so far (for progress reports).
    written: Arc<AtomicU64>,
}

impl Exporter {
    /// Opens the output (so a bad path fails before any work is done).
    pub(crate) fn create(path: &Path, encoding: Encoding, queue: Queue) -> Result<Exporter> {
        Ok(Self::with_sink(
            Sink::create(path, encoding)?,
            queue,
            Framing::Whole,
        ))
    }

    /// A worker's slice written into `file` (an anonymous file its parent made and will
    /// splice; a raw deflate slice for gzip); `label` names it in errors.
    pub(crate) fn create_in_file(
        file: std::fs::File,
        label: &Path,
        encoding: Encoding,
        queue: Queue,
    ) -> Result<Exporter> {
        let encoding = match encoding {
            Encoding::Gzip { level, threads } => Encoding::GzipSlice { level, threads },
            other => other,
        };
        let sink = Sink::in_file(file, label, encoding)?;
        Ok(Self::with_sink(sink, queue, Framing::Slice))
    }

    fn with_sink(sink: Sink, queue: Queue, framing: Framing) -> Exporter {
        let sink = Box::new(sink);
        Exporter {
            stage: Stage::FirstPass {
                first: FirstPass::new(),
                sink,
            },
            queue,
            framing,
            graphs: None,
            graph_state: Arc::new(Mutex::new(None)),
            written: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Bakes CUDA-graph annotations into the trace (before [`Exporter::start`]).
    pub(crate) fn set_graph_annotations(&mut self, graphs: GraphAnnotations) -> Result<()> {
        match self.stage {
            Stage::FirstPass { .. } => {
                self.graphs = Some(graphs);
                Ok(())
            }
            _ => Err(Error::State(
                "annotations are set before the export starts".into(),
            )),
        }
    }

    /// A finished slice's CUDA-graph state (once [`Exporter::wait`] returned it; None for
    /// an export without annotations).
    pub(crate) fn take_graph_state(&mut self) -> Result<Option<GraphState>> {
        Ok(lock(&self.graph_state, "graph state")?.take())
    }

    /// Bytes of event text the writer has formatted and written so far.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// The first pass, while it is being collected.
    pub(crate) fn first_pass(&mut self) -> Result<&mut FirstPass> {
        match &mut self.stage {
            Stage::FirstPass { first, .. } => Ok(first),
            _ => Err(Error::State("the first pass is over".into())),
        }
    }

    /// Ends the first pass and starts the writer thread with the header queued.
    /// `base_ns` is the time base; `host_pid` the exporting process's pid.
    pub(crate) fn start(&mut self, base_ns: i128, host_pid: i64, header: Header) -> Result<()> {
        let (first, sink) = match std::mem::replace(&mut self.stage, Stage::Finished) {
            Stage::FirstPass { first, sink } => (first, sink),
            other => {
                self.stage = other;
                return Err(Error::State("the export has already started".into()));
            }
        };
        let in_place = sink.writes_in_place();
        let mut summary = first.finish(base_ns, host_pid);
        summary.graphs = self.graphs.take();
        let summary = Arc::new(summary);
        let capacity = match self.queue {
            Queue::Bounded(depth) => depth.max(1),
            Queue::Unbounded => usize::MAX,
        };
        let queue = Arc::new(BoundedQueue::new(capacity));
        let (done_tx, done) = mpsc::channel();
        let thread = {
            let summary = Arc::clone(&summary);
            let queue = Arc::clone(&queue);
            let written = Arc::clone(&self.written);
            let graph_out = Arc::clone(&self.graph_state);
            let framing = self.framing;
            thread::Builder::new()
                .name("kinetrace-writer".into())
                .spawn(move || {
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        run_writer(&summary, &queue, *sink, &written, framing, &graph_out)
                    }))
                    .unwrap_or_else(|p| Err(Error::Panic(panic_message(p.as_ref()))));
                    // Whatever happened, producers must not wait on a queue nobody reads.
                    queue.cancel();
                    let _ = done_tx.send(result);
                })
                .map_err(|e| Error::io("cannot start the writer thread", e))?
        };
        let running = Running {
            queue,
            done,
            thread: Some(thread),
            in_place,
        };
        if self.framing == Framing::Whole {
            if let Offer::Closed = running
                .queue
                .offer(Job::Header(Box::new(header)), Duration::ZERO)
            {
                return Err(Error::State("the writer stopped before the header".into()));
            }
        }
        self.stage = Stage::Streaming {
            running,
            next_start: 0,
        };
        Ok(())
    }

    /// Index of the first activity of the next batch.
    pub(crate) fn next_start(&self) -> usize {
        match &self.stage {
            Stage::Streaming { next_start, .. } => *next_start,
            _ => 0,
        }
    }

    /// Queues a batch, waiting up to `timeout` for room. A batch handed back with
    /// `Ok(Some(batch))` was not queued (the queue stayed full): offer it again. An error
    /// means the writer failed; its error is returned.
    pub(crate) fn offer_batch(&mut self, batch: Batch, timeout: Duration) -> Result<Option<Batch>> {
        let Stage::Streaming {
            running,
            next_start,
            ..
        } = &mut self.stage
        else {
            return Err(Error::State(
                "batches come after start and before finish".into(),
            ));
        };
        let len = batch.len();
        match running.queue.offer(Job::Batch(Box::new(batch)), timeout) {
            Offer::Accepted => {
                *next_start += len;
                Ok(None)
            }
            Offer::TimedOut(Job::Batch(batch)) => Ok(Some(*batch)),
            Offer::TimedOut(_) => unreachable!("the queue hands back what it was given"),
            Offer::Closed => Err(self.writer_error()),
        }
    }

    /// Makes the writer thread panic (for tests of the panic path).
    #[cfg(any(test, feature = "test-hooks"))]
    pub(crate) fn inject_panic_for_tests(&mut self) -> Result<()> {
        let Stage::Streaming { running, .. } = &mut self.stage else {
            return Err(Error::State("the writer is not running".into()));
        };
        match running
            .queue
            .offer(Job::PanicForTests, Duration::from_secs(60))
        {
            Offer::Accepted => Ok(()),
            _ => Err(Error::State("the writer is not accepting work".into())),
        }
    }

    /// Queues a worker's finished slice after the events queued so far. While the queue
    /// is full, `interrupted` is called every [`POLL`]; an error from it abandons the wait.
    /// `graph` is the slice's CUDA-graph state, merged after the slices before it.
    pub(crate) fn append_slice(
        &mut self,
        slice: SliceOutput,
        graph: Option<GraphState>,
        interrupted: &mut Interrupted,
    ) -> Result<()> {
        self.offer_job(Job::Append(slice, graph.map(Box::new)), interrupted)
    }

    /// Queues the closing events (none for a slice) and closes the queue; then call
    /// [`Exporter::wait`]. `interrupted` as for [`Exporter::append_slice`].
    pub(crate) fn close(
        &mut self,
        trace_name: Vec<u8>,
        interrupted: &mut Interrupted,
    ) -> Result<()> {
        if self.framing == Framing::Whole {
            self.offer_job(Job::Tail(trace_name), interrupted)?;
        }
        match &mut self.stage {
            Stage::Streaming { running, .. } => {
                running.queue.close();
                Ok(())
            }
            _ => Err(Error::State("close comes after start".into())),
        }
    }

    /// Queues a job, waiting as long as it takes for room (or until `interrupted` fails).
    fn offer_job(&mut self, mut job: Job, interrupted: &mut Interrupted) -> Result<()> {
        let Stage::Streaming { running, .. } = &mut self.stage else {
            return Err(Error::State("the export has not started".into()));
        };
        loop {
            match running.queue.offer(job, POLL) {
                Offer::Accepted => return Ok(()),
                Offer::TimedOut(j) => job = j,
                Offer::Closed => return Err(self.writer_error()),
            }
            interrupted()?;
        }
    }

    /// Waits up to `timeout` for the writer to finish; `None` if it is still running.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Option<Result<ExportStats>> {
        let Stage::Streaming { running, .. } = &mut self.stage else {
            return Some(Err(Error::State("nothing to wait for".into())));
        };
        let result = match running.done.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Panic("the writer thread vanished".into()))
            }
        };
        if let Some(thread) = running.thread.take() {
            let _ = thread.join();
        }
        self.stage = Stage::Finished;
        Some(result)
    }

    /// The writer's error after it stopped early (it always stops with one).
    fn writer_error(&mut self) -> Error {
        loop {
            match self.wait(Duration::from_secs(3600)) {
                Some(Err(e)) => return e,
                Some(Ok(_)) => return Error::State("the export already finished".into()),
                None => continue,
            }
        }
    }

    /// Stops the export: the writer thread exits and the temporary file is removed.
    pub(crate) fn abort(&mut self) {
        if let Stage::Streaming { running, .. } = &mut self.stage {
            running.queue.cancel();
            if let Some(thread) = running.thread.take() {
                // A file of ours is removed by the writer as it stops: wait for that. A
                // FIFO or device has nothing to remove, and its writer may be stuck in a
                // write nobody reads: give it a moment, then leave it to end on its own.
                let stopped = !running.in_place
                    || !matches!(
                        running.done.recv_timeout(Duration::from_millis(200)),
                        Err(RecvTimeoutError::Timeout)
                    );
                if stopped {
                    let _ = thread.join();
                }
            }
        }
        // Dropping a first-pass sink removes its temporary file too.
        self.stage = Stage::Finished;
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::trace::StrColumn;
    use std::fs;

    use crate::testing::scratch;

    fn cpu_batch(start: usize, n: usize) -> Batch {
        Batch {
            start,
            categories: (0..n).map(|_| "cpu_op").collect(),
            names: (start..start + n).map(|i| format!("op{i}")).collect(),
            metadata: (0..n).map(|i| format!("\"Ev Idx\": {i}")).collect(),
            linked_correlation_ids: vec![0; n],
            flow_ids: vec![0; n],
            correlation_ids: (0..n as i64).collect(),
            ..Batch::default()
        }
    }

    fn run_export(path: &Path, encoding: Encoding, n: usize, batch: usize) -> Result<ExportStats> {
        let mut ex = Exporter::create(path, encoding, Queue::Bounded(QUEUE_DEPTH))?;
        let fp = ex.first_pass()?;
        for i in 0..n as i64 {
            fp.push(7, 7, 1_000_000 + i * 1000, 500);
        }
        ex.start(
            0,
            7,
            Header {
                device_properties: b"[]".to_vec(),
                ..Header::default()
            },
        )?;
        let mut start = 0;
        while start < n {
            let len = batch.min(n - start);
            let mut b = Some(cpu_batch(start, len));
            while let Some(pending) = b.take() {
                b = ex.offer_batch(pending, Duration::from_millis(50))?;
            }
            start += len;
        }
        ex.close(path.to_string_lossy().as_bytes().to_vec(), &mut || Ok(()))?;
        loop {
            if let Some(r) = ex.wait(Duration::from_millis(50)) {
                return r;
            }
        }
    }

    #[test]
    fn exports_valid_json_in_order() {
        let dir = scratch("order");
        let path = dir.join("t.json");
        let stats = run_export(&path, Encoding::Plain, 10_000, 333).unwrap();
        let text = fs::read(&path).unwrap();
        assert_eq!(stats.uncompressed_bytes, text.len() as u64);
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        assert_eq!(stats.events, events.len() as u64);
        // 5 M events, then the activities in order, then 4 closing events.
        assert_eq!(events.len(), 5 + 10_000 + 4);
        for (i, e) in events[5..5 + 10_000].iter().enumerate() {
            assert_eq!(e["name"], format!("op{i}"));
        }
    }

    #[test]
    fn bad_batch_fails_cleanly() {
        let dir = scratch("bad");
        let path = dir.join("t.json");
        let mut ex = Exporter::create(&path, Encoding::Plain, Queue::Bounded(QUEUE_DEPTH)).unwrap();
        ex.first_pass().unwrap().push(1, 1, 1, 1);
        ex.start(0, 1, Header::default()).unwrap();
        let mut b = cpu_batch(0, 1);
        b.names = StrColumn::default();
        assert!(ex.offer_batch(b, Duration::from_secs(1)).unwrap().is_none());
        let err = loop {
            match ex.offer_batch(cpu_batch(0, 1), Duration::from_millis(10)) {
                Err(e) => break e,
                Ok(_) => thread::sleep(Duration::from_millis(5)),
            }
        };
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        drop(ex);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn abort_removes_the_temporary_file() {
        let dir = scratch("abort");
        let path = dir.join("t.json");
        let mut ex = Exporter::create(&path, Encoding::Plain, Queue::Bounded(QUEUE_DEPTH)).unwrap();
        ex.first_pass().unwrap().push(1, 1, 1, 1);
        ex.start(0, 1, Header::default()).unwrap();
        ex.abort();
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
        assert!(ex.offer_batch(cpu_batch(0, 1), Duration::ZERO).is_err());
    }

    #[test]
    fn writer_panic_becomes_an_error_and_removes_the_file() {
        let dir = scratch("panic");
        let path = dir.join("t.json");
        let mut ex = Exporter::create(&path, Encoding::Plain, Queue::Bounded(QUEUE_DEPTH)).unwrap();
        ex.first_pass().unwrap().push(1, 1, 1, 1);
        ex.start(0, 1, Header::default()).unwrap();
        ex.inject_panic_for_tests().unwrap();
        let err = loop {
            if let Some(r) = ex.wait(Duration::from_millis(50)) {
                break r.unwrap_err();
            }
        };
        assert!(
            matches!(err, Error::Panic(ref m) if m.contains("requested by a test")),
            "{err:?}"
        );
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
    }

    #[test]
    fn gzip_output_matches_plain() {
        use std::io::Read;
        let dir = scratch("gz");
        let plain = dir.join("t.json");
        let gz = dir.join("t.json.gz");
        run_export(&plain, Encoding::Plain, 20_000, 1000).unwrap();
        let stats = run_export(
            &gz,
            Encoding::Gzip {
                level: 6,
                threads: 2,
            },
            20_000,
            1000,
        )
        .unwrap();
        let mut text = Vec::new();
        flate2::read::GzDecoder::new(fs::File::open(&gz).unwrap())
            .read_to_end(&mut text)
            .unwrap();
        let expected = fs::read(&plain).unwrap();
        // Only traceName differs (the path).
        let strip = |t: &[u8]| {
            let t = std::str::from_utf8(t).unwrap();
            t[..t.find("\"traceName\"").unwrap()].to_string()
        };
        assert!(
            strip(&text) == strip(&expected),
            "decompressed text differs"
        );
        assert_eq!(stats.file_bytes, fs::metadata(&gz).unwrap().len());
    }
}

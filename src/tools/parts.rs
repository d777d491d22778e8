//! What `split` and `merge` share to write traces in parts: the time histogram and the
//! plan of windows cut from it ([`Histogram`], [`Plan`]), the writer of one output trace
//! ([`TraceWriter`]), the parts' temporary files and their putting in place, all or none
//! ([`Temps`], [`finish_parts`]), and the caps on text kept in memory.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, FormatKind, Result};
use crate::json::render::{push_int, push_json_string, push_micros};
use crate::output::sink::{Encoding, Sink};
use crate::read::hash::Fast;

/// Most cells of the split's time histogram.
pub(crate) const MAX_CELLS: usize = 1 << 18;

/// Most bytes of header text, and of metadata events, kept in memory.
pub(crate) const MAX_KEPT_TEXT: usize = 64 << 20;

/// Most parts of a split (the names have three digits).
pub(crate) const MAX_PARTS: usize = 999;

/// Write buffer of each part during a split.
pub(crate) const PART_BUFFER: usize = 64 << 10;

/// The member `"traceName": <trace_name>` when `key` is `traceName` and a name is given.
pub(crate) fn renamed(key: &[u8], trace_name: Option<&str>) -> Option<Vec<u8>> {
    let name = trace_name.filter(|_| key == b"traceName")?;
    let mut out = b"\"traceName\": ".to_vec();
    push_json_string(&mut out, name.as_bytes());
    Some(out)
}

/// Adds `n` bytes to a kept-text total, failing past [`MAX_KEPT_TEXT`].
pub(crate) fn keep_text(total: &mut usize, n: usize, what: &str, path: &Path) -> Result<()> {
    *total += n;
    if *total > MAX_KEPT_TEXT {
        return Err(Error::trace_fault(
            path,
            FormatKind::TooLarge,
            format!(
                "too large: more than {} MiB of {what}: not a trace this tool can cut",
                MAX_KEPT_TEXT >> 20
            ),
        ));
    }
    Ok(())
}

/// An output trace being written: the top-level object, the `traceEvents` array, and its
/// separators.
pub(crate) struct TraceWriter<W: Write> {
    pub(crate) out: W,
    pub(crate) events: u64,
    pub(crate) in_events: bool,
    pub(crate) members: u64,
    pub(crate) bytes: u64,
}

impl<W: Write> TraceWriter<W> {
    pub(crate) fn new(out: W) -> Self {
        TraceWriter {
            out,
            events: 0,
            in_events: false,
            members: 0,
            bytes: 0,
        }
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// A top-level member (`"key": value`).
    pub(crate) fn member(&mut self, raw: &[u8]) -> std::io::Result<()> {
        self.put(if self.members == 0 { b"{\n" } else { b",\n" })?;
        self.members += 1;
        self.put(raw)
    }

    pub(crate) fn open_events(&mut self) -> std::io::Result<()> {
        self.member(b"\"traceEvents\": [")?;
        self.in_events = true;
        Ok(())
    }

    pub(crate) fn event(&mut self, raw: &[u8]) -> std::io::Result<()> {
        debug_assert!(self.in_events);
        self.put(if self.events == 0 { b"\n" } else { b",\n" })?;
        self.events += 1;
        self.put(raw)
    }

    pub(crate) fn close_events(&mut self) -> std::io::Result<()> {
        self.in_events = false;
        self.put(b"\n]")
    }

    pub(crate) fn end(&mut self) -> std::io::Result<()> {
        if self.members == 0 {
            self.put(b"{")?;
        }
        self.put(b"\n}\n")
    }
}

/// A [`Sink`] as an `io::Write`.
pub(crate) struct SinkWrite(pub(crate) Sink);

impl Write for SinkWrite {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf).map_err(Error::into_io)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of events over time, in cells of `1 << shift` ns.
#[derive(Default)]
pub(crate) struct Histogram {
    pub(crate) cells: HashMap<i64, u64, Fast>,
    pub(crate) shift: u32,
}

impl Histogram {
    pub(crate) fn add(&mut self, ts_ns: i64, bytes: u64) {
        *self.cells.entry(ts_ns >> self.shift).or_default() += bytes;
        while self.cells.len() > MAX_CELLS {
            self.shift += 1;
            let mut merged =
                HashMap::with_capacity_and_hasher(self.cells.len(), Default::default());
            for (cell, n) in self.cells.drain() {
                *merged.entry(cell >> 1).or_default() += n;
            }
            self.cells = merged;
        }
    }
}

/// An event's time in integer ns (what the windows are cut on).
pub(crate) fn ts_ns(ts: f64) -> i64 {
    (ts * 1000.0).round() as i64
}

/// One part of a split, as planned and then as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartStats {
    /// Where it is (its final name).
    pub(crate) path: PathBuf,
    /// Its window [start, end) in µs.
    pub(crate) start_us: f64,
    pub(crate) end_us: f64,
    /// Events written, metadata included.
    pub(crate) events: u64,
    /// Bytes of JSON.
    pub(crate) json_bytes: u64,
}

/// Where the windows are.
pub(crate) struct Plan {
    pub(crate) shift: u32,
    /// The first cell of each part.
    pub(crate) firsts: Vec<i64>,
    /// One past the last cell of the last part.
    pub(crate) end_cell: i64,
}

impl Plan {
    /// Cuts the histogram's cells (emptied) into windows of at most `budget` bytes each
    /// (more only where one cell holds more); `untimed` bytes go to the first.
    pub(crate) fn cut(histogram: &mut Histogram, untimed: u64, budget: u64) -> Plan {
        let mut cells: Vec<(i64, u64)> = histogram.cells.drain().collect();
        cells.sort_unstable();
        let mut firsts = Vec::new();
        let mut acc = untimed;
        for (i, &(cell, bytes)) in cells.iter().enumerate() {
            if i == 0 {
                firsts.push(cell);
            } else if acc > 0 && acc + bytes > budget {
                firsts.push(cell);
                acc = 0;
            }
            acc += bytes;
        }
        if firsts.is_empty() {
            firsts.push(0);
        }
        Plan {
            shift: histogram.shift,
            end_cell: cells.last().map_or(1, |c| c.0 + 1),
            firsts,
        }
    }

    pub(crate) fn part_of(&self, ts: Option<f64>) -> usize {
        match ts {
            None => 0,
            Some(ts) => {
                let cell = ts_ns(ts) >> self.shift;
                self.firsts
                    .partition_point(|&f| f <= cell)
                    .saturating_sub(1)
            }
        }
    }

    pub(crate) fn window_us(&self, part: usize) -> (f64, f64) {
        let start = self.firsts[part];
        let end = self.firsts.get(part + 1).copied().unwrap_or(self.end_cell);
        let us = |cell: i64| ((cell as i128) << self.shift) as f64 / 1000.0;
        (us(start), us(end))
    }
}

/// Files of a split not yet in place: removed on drop unless committed.
#[derive(Default)]
pub(crate) struct Temps {
    pub(crate) paths: Vec<PathBuf>,
    pub(crate) committed: bool,
}

impl Drop for Temps {
    fn drop(&mut self) {
        if !self.committed {
            for p in &self.paths {
                let _ = fs::remove_file(p);
            }
        }
    }
}

/// `name` without a trace suffix (`.json.gz`, `.json`, `.gz`).
pub(crate) fn stem(name: &str) -> &str {
    for suffix in [".json.gz", ".json", ".gz"] {
        if let Some(s) = name.strip_suffix(suffix) {
            if !s.is_empty() {
                return s;
            }
        }
    }
    name
}

/// Puts parts written as plain temporary files (`plain`) in place at `finals`, all or none:
/// for gzip, each is first compressed with the parallel encoder into a second temporary
/// file (`progress` is called after each); then all are renamed, and `temps` committed.
pub(crate) fn finish_parts(
    plain: &[PathBuf],
    finals: &[PathBuf],
    gzip: Option<(u32, usize)>,
    temps: &mut Temps,
    progress: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let ready: Vec<PathBuf> = match gzip {
        None => plain.to_vec(),
        Some((level, threads)) => {
            let mut ready = Vec::with_capacity(plain.len());
            for (plain, fin) in plain.iter().zip(finals) {
                // An empty temporary the encoder's own temporary replaces when complete.
                let dir = fin.parent().unwrap_or(Path::new("."));
                let (_, gz) =
                    crate::output::temps::create(dir, fin.file_name().expect("a file name"))
                        .map_err(|e| {
                            Error::io(
                                format!("cannot create a temporary file for {}", fin.display()),
                                e,
                            )
                        })?;
                temps.paths.push(gz.clone());
                let mut sink = Sink::create(&gz, Encoding::Gzip { level, threads })?;
                let mut file = File::open(plain)
                    .map_err(|e| Error::io(format!("cannot open {}", plain.display()), e))?;
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = std::io::Read::read(&mut file, &mut buf)
                        .map_err(|e| Error::io(format!("cannot read {}", plain.display()), e))?;
                    if n == 0 {
                        break;
                    }
                    sink.write_all(&buf[..n])?;
                }
                sink.finish()?;
                let _ = fs::remove_file(plain);
                progress()?;
                ready.push(gz);
            }
            ready
        }
    };
    for (i, (from, to)) in ready.iter().zip(finals).enumerate() {
        if let Err(e) = fs::rename(from, to) {
            // All or nothing: take back the parts already moved.
            for done in &finals[..i] {
                let _ = fs::remove_file(done);
            }
            return Err(Error::io(format!("cannot create {}", to.display()), e));
        }
    }
    temps.committed = true;
    Ok(())
}

/// The `kinetrace_part` member that opens part `i` of `plan`, cut from the trace `name`.
pub(crate) fn part_head(plan: &Plan, i: usize, name: &str) -> Vec<u8> {
    let mut head = b"\"kinetrace_part\": {\"index\": ".to_vec();
    push_int(&mut head, i + 1);
    head.extend_from_slice(b", \"count\": ");
    push_int(&mut head, plan.firsts.len());
    head.extend_from_slice(b", \"start_us\": ");
    push_micros(&mut head, (plan.firsts[i] as i128) << plan.shift);
    head.extend_from_slice(b", \"end_us\": ");
    let end_cell = plan.firsts.get(i + 1).copied().unwrap_or(plan.end_cell);
    push_micros(&mut head, (end_cell as i128) << plan.shift);
    head.extend_from_slice(b", \"source\": ");
    push_json_string(&mut head, name.as_bytes());
    head.push(b'}');
    head
}

//! Pass 4 of a merge, on the calling thread: the outputs (one trace, or the parts of a
//! plan as temporary files), the readers' blocks appended as they come, the keys after the
//! events, and the outputs put in place.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::render::push_int;
use crate::output::sink::{Encoding, Sink};
use crate::read::events::read_trace_with;
use crate::tools::parts::{
    finish_parts, part_head, stem, Plan, SinkWrite, Temps, TraceWriter, PART_BUFFER,
};

use super::probe::base_in;
use super::rewrite::{Block, ReaderOut, Rewriting, SourceDone, BLOCK};
use super::{MergeStats, OutputStats, Timeline};
use crate::read::sources::{Msg, Sources};

/// An output being written by the calling thread.
pub(super) enum OutFile {
    Single(Box<SinkWrite>),
    Part(BufWriter<File>),
}

impl Write for OutFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            OutFile::Single(w) => w.write(buf),
            OutFile::Part(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            OutFile::Single(w) => w.flush(),
            OutFile::Part(w) => w.flush(),
        }
    }
}

/// Pass 4: every source's events rewritten by the readers, written here in blocks to their
/// outputs; what each source's reader found.
pub(super) fn pass_write(
    pool: &Sources<'_>,
    timeline: &Timeline<'_>,
    plan: Option<&Plan>,
    outs: &mut Outputs,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Vec<SourceDone>> {
    let parts = outs.writers.len();
    let mut dones: Vec<Option<SourceDone>> = (0..pool.paths.len()).map(|_| None).collect();
    pool.run::<Block, SourceDone>(
        &|i, ctl| {
            let mut ctx = timeline.ctx(i);
            ctx.plan = plan;
            ctx.parts = parts;
            let blocks = (0..parts)
                .map(|part| Block {
                    part,
                    text: Vec::with_capacity(BLOCK + (BLOCK >> 3)),
                    events: 0,
                })
                .collect();
            let mut v = Rewriting::new(&ctx, ReaderOut::Write { ctl, blocks });
            let mut reading = ctl.reading();
            let path = &pool.paths[i];
            let bytes = read_trace_with(path, &mut v, &mut reading, pool.read_options)?;
            let found = base_in(v.header.iter().map(|(k, r)| (&k[..], &r[..])), path)?;
            if found.flatten() != ctx.base {
                return Err(Error::not_a_trace(
                    path,
                    "its baseTimeNanoseconds is not the one found ahead of the events (did \
                     the file change while it was merged?)",
                ));
            }
            v.finish(bytes)
        },
        &mut |msg| {
            match msg {
                Msg::Part(block) => outs.append(&block)?,
                Msg::Done(i, done) => dones[i] = Some(done),
            }
            Ok(())
        },
        progress,
    )?;
    dones
        .into_iter()
        .map(|d| d.ok_or_else(|| Error::Panic("a source was not merged".into())))
        .collect()
}

/// The merged outputs being written: one trace, or the parts of a plan (plain temporary
/// files until [`Outputs::finish`]).
pub(super) struct Outputs {
    pub(super) writers: Vec<TraceWriter<OutFile>>,
    /// Where each goes in the end.
    pub(super) finals: Vec<PathBuf>,
    temps: Temps,
    /// The destination (a single output's temporary is the sink's own).
    dst: PathBuf,
}

pub(super) fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("cannot write {}", path.display()), e)
}

impl Outputs {
    /// The outputs, opened with their leading keys and the `traceEvents` array.
    pub(super) fn open(
        dst: &Path,
        gzip: Option<(u32, usize)>,
        plan: Option<&Plan>,
    ) -> Result<Outputs> {
        let mut outs = Outputs {
            writers: Vec::new(),
            finals: Vec::new(),
            temps: Temps::default(),
            dst: dst.to_path_buf(),
        };
        let Some(plan) = plan else {
            let encoding = match gzip {
                Some((level, threads)) => Encoding::Gzip { level, threads },
                None => Encoding::Plain,
            };
            let sink = SinkWrite(Sink::create(dst, encoding)?);
            let mut w = TraceWriter::new(OutFile::Single(Box::new(sink)));
            w.member(b"\"schemaVersion\": 1")
                .map_err(|e| write_error(dst, e))?;
            w.open_events().map_err(|e| write_error(dst, e))?;
            outs.writers.push(w);
            outs.finals.push(dst.to_path_buf());
            return Ok(outs);
        };
        let name = dst
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "merged".into());
        let dir = dst
            .parent()
            .map(Path::to_path_buf)
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        let suffix = if gzip.is_some() { ".json.gz" } else { ".json" };
        let parts = plan.firsts.len();
        let stem = stem(&name).to_string();
        for i in 0..parts {
            let fin = dir.join(format!("{stem}.part-{:03}-of-{parts:03}{suffix}", i + 1));
            outs.open_part(&dir, fin, plan, i, &name)?;
        }
        Ok(outs)
    }

    /// Part `i` of `plan`, as a temporary file in `dir` that becomes `fin`.
    fn open_part(
        &mut self,
        dir: &Path,
        fin: PathBuf,
        plan: &Plan,
        i: usize,
        name: &str,
    ) -> Result<()> {
        let (file, temp) = crate::output::temps::create(dir, fin.file_name().expect("a file name"))
            .map_err(|e| {
                Error::io(
                    format!("cannot create a temporary file for {}", fin.display()),
                    e,
                )
            })?;
        self.temps.paths.push(temp.clone());
        let mut w = TraceWriter::new(OutFile::Part(BufWriter::with_capacity(PART_BUFFER, file)));
        let head = part_head(plan, i, name);
        w.member(&head).map_err(|e| write_error(&temp, e))?;
        w.member(b"\"schemaVersion\": 1")
            .map_err(|e| write_error(&temp, e))?;
        w.open_events().map_err(|e| write_error(&temp, e))?;
        self.writers.push(w);
        self.finals.push(fin);
        Ok(())
    }

    /// A reader's block of events, after the events already in its output.
    fn append(&mut self, block: &Block) -> Result<()> {
        let w = &mut self.writers[block.part];
        let sep: &[u8] = if w.events == 0 { b"\n" } else { b",\n" };
        let written = w.put(sep).and_then(|_| w.put(&block.text));
        if let Err(e) = written {
            let path = self.temps.paths.get(block.part).unwrap_or(&self.dst);
            return Err(write_error(path, e));
        }
        w.events += block.events;
        Ok(())
    }

    /// Ends every output: the `traceEvents` array, then the keys after it (the merged base,
    /// the common time unit, the merge's `record`); their stats.
    pub(super) fn close(
        &mut self,
        record: &[u8],
        unit: Option<&[u8]>,
        max_bytes: Option<u64>,
        plan: Option<&Plan>,
        spans: &[(usize, (i128, i128))],
        stats: &mut MergeStats,
    ) -> Result<()> {
        for (part, w) in self.writers.iter_mut().enumerate() {
            let path = self.finals[part].clone();
            let io = |e| write_error(&path, e);
            w.close_events().map_err(io)?;
            if let Some(base) = stats.base_time_ns {
                let mut m = b"\"baseTimeNanoseconds\": ".to_vec();
                push_int(&mut m, base);
                w.member(&m).map_err(io)?;
            }
            if let Some(unit) = unit {
                let mut m = b"\"displayTimeUnit\": \"".to_vec();
                m.extend_from_slice(unit);
                m.push(b'"');
                w.member(&m).map_err(io)?;
            }
            w.member(record).map_err(io)?;
            w.end().map_err(io)?;
            stats.events_written += w.events;
            stats.json_bytes_written += w.bytes;
            if max_bytes.is_some_and(|m| w.bytes > m) {
                stats.oversized_parts += 1;
            }
            let (start_us, end_us) = match plan {
                Some(p) => p.window_us(part),
                None => spans
                    .iter()
                    .fold(None, |acc: Option<(i128, i128)>, (_, s)| {
                        Some(acc.map_or(*s, |a| (a.0.min(s.0), a.1.max(s.1))))
                    })
                    .map_or((0.0, 0.0), |(a, b)| (a as f64 / 1000.0, b as f64 / 1000.0)),
            };
            stats.outputs.push(OutputStats {
                path,
                start_us,
                end_us,
                events: w.events,
                json_bytes: w.bytes,
            });
        }
        Ok(())
    }

    /// Puts the outputs in place: the single one's sink finished, or the parts compressed
    /// (for gzip) and renamed, all or none.
    pub(super) fn finish(
        self,
        parted: bool,
        gzip: Option<(u32, usize)>,
        read: u64,
        progress: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let Outputs {
            writers,
            finals,
            mut temps,
            ..
        } = self;
        let mut plain_temps = Vec::new();
        for (part, w) in writers.into_iter().enumerate() {
            match w.out {
                OutFile::Single(sink) => {
                    sink.0.finish()?;
                }
                OutFile::Part(mut file) => {
                    file.flush().map_err(|e| write_error(&finals[part], e))?;
                    plain_temps.push(temps.paths[part].clone());
                }
            }
        }
        if parted {
            finish_parts(&plain_temps, &finals, gzip, &mut temps, &mut || {
                progress(read)
            })?;
        }
        Ok(())
    }
}

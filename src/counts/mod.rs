//! Instruction-count benchmarks (the cargo feature `counts`, never in a wheel): the native
//! work of each tool on fixed inputs, which `benches/counts.py` runs one at a time under
//! Valgrind and compares with the committed baseline.
//!
//! Wall-clock time on a shared machine moves by 6-30% between runs; the instructions a
//! program executes do not, so a change that makes the formatter or the scanner a few
//! percent slower shows here when no timing could show it. Each benchmark is one call of
//! the function a binding calls (`src/python/`), with its `threads` at 1; the gate runs the
//! process on one CPU, so the defaults that follow the CPUs (a reader's chunk threads, the
//! gzip pool) are 1 too and the count does not depend on scheduling.

mod synthetic;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::export::format::Header;
use crate::export::pipeline::{Exporter, Queue, QUEUE_DEPTH};
use crate::export::trace::{trimonth_base_ns, FirstPass};
use crate::output::sink::Encoding;
use crate::read::filter::FilterSpec;
use crate::tools::{check, diff, merge, ops, parquet, split, summary};

/// The benchmarks: name, what it is given, and what it measures.
pub const BENCHMARKS: &[(&str, Inputs, &str)] = &[
    (
        "export-input",
        Inputs::Activities,
        "the export benchmarks' activities alone, made and dropped",
    ),
    (
        "export-json",
        Inputs::Activities,
        "the exporter's formatter and writer, plain JSON",
    ),
    (
        "export-gzip",
        Inputs::Activities,
        "the exporter at gzip level 7 (the default), one thread",
    ),
    (
        "check",
        Inputs::Files(1),
        "check_trace: every rule over a trace",
    ),
    ("summary-exact", Inputs::Files(1), "summarize, exact rules"),
    ("summary-hta", Inputs::Files(1), "summarize, HTA's rules"),
    (
        "diff",
        Inputs::Files(2),
        "diff's read of two traces: summaries and operators",
    ),
    (
        "ops",
        Inputs::Files(1),
        "ops, exact rules: rows, rooflines, groups",
    ),
    ("ops-tracelens", Inputs::Files(1), "ops, TraceLens's rules"),
    (
        "parquet",
        Inputs::Files(1),
        "to_parquet: one trace's dataset",
    ),
    (
        "split",
        Inputs::Files(1),
        "split into parts of 1 MB of JSON",
    ),
    ("merge", Inputs::Files(2), "merge two ranks into one trace"),
];

/// The export's default gzip level (`kinetrace._env.DEFAULT_COMPRESSLEVEL`).
const GZIP_LEVEL: u32 = 7;

/// What a benchmark is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inputs {
    /// A number of synthetic activities (`synthetic.rs`).
    Activities,
    /// This many trace files.
    Files(usize),
}

/// Runs the benchmark `name` on `inputs` (trace paths, or one number of activities),
/// writing any output under `scratch` (an empty folder); returns one line saying what
/// it did (events, bytes), so a benchmark that silently did less shows in its output.
pub fn run(name: &str, inputs: &[String], scratch: &Path) -> std::result::Result<String, String> {
    let Some((_, wants, _)) = BENCHMARKS.iter().find(|(n, _, _)| *n == name) else {
        let known: Vec<&str> = BENCHMARKS.iter().map(|(n, _, _)| *n).collect();
        return Err(format!(
            "no benchmark {name:?}; known: {}",
            known.join(", ")
        ));
    };
    let given = match wants {
        Inputs::Activities => 1,
        Inputs::Files(n) => *n,
    };
    if inputs.len() != given {
        return Err(format!(
            "{name} takes {given} input(s), not {}",
            inputs.len()
        ));
    }
    let paths: Vec<PathBuf> = inputs.iter().map(PathBuf::from).collect();
    let done = match *wants {
        Inputs::Activities => {
            let n: usize = inputs[0]
                .parse()
                .map_err(|_| format!("{name} takes a number of activities, not {:?}", inputs[0]))?;
            let encoding = if name == "export-gzip" {
                Encoding::Gzip {
                    level: GZIP_LEVEL,
                    threads: 1,
                }
            } else {
                Encoding::Plain
            };
            if name == "export-input" {
                Ok(export_input(n))
            } else {
                export(n, encoding, &scratch.join("trace.json"))
            }
        }
        Inputs::Files(_) => match name {
            "parquet" | "split" | "merge" => writing_tool(name, &paths, scratch),
            _ => reading_tool(name, &paths),
        },
    };
    done.map_err(|e| format!("{name}: {e}"))
}

/// What the export benchmarks do besides exporting: the activities' first pass and
/// batches made, and dropped.
fn export_input(activities: usize) -> String {
    let texts = synthetic::Texts::new();
    let mut first = FirstPass::new();
    synthetic::first_pass(activities, &mut first);
    let mut flows = 0;
    for start in (0..activities).step_by(synthetic::BATCH) {
        let batch = texts.batch(start, synthetic::BATCH.min(activities - start));
        flows += std::hint::black_box(batch).flows.len();
    }
    format!("{activities} activities, {flows} flow ends")
}

/// The export of `activities` synthetic activities to `out`, as `_Exporter` drives it.
fn export(activities: usize, encoding: Encoding, out: &Path) -> Result<String> {
    let texts = synthetic::Texts::new();
    let mut exporter = Exporter::create(out, encoding, Queue::Bounded(QUEUE_DEPTH))?;
    let first = exporter.first_pass()?;
    synthetic::first_pass(activities, first);
    let base = trimonth_base_ns(first.min_ts().unwrap_or(0).into());
    let header = Header {
        device_properties: b"[]".to_vec(),
        ..Header::default()
    };
    exporter.start(base, 4242, header)?;
    let mut start = 0;
    while start < activities {
        let len = synthetic::BATCH.min(activities - start);
        let mut batch = Some(texts.batch(start, len));
        while let Some(waiting) = batch {
            batch = exporter.offer_batch(waiting, Duration::from_secs(1))?;
        }
        start += len;
    }
    exporter.close(b"counts".to_vec(), &mut || Ok(()))?;
    let stats = loop {
        if let Some(done) = exporter.wait(Duration::from_secs(1)) {
            break done?;
        }
    };
    Ok(format!(
        "{} events, {} bytes of JSON, {} bytes written",
        stats.events, stats.uncompressed_bytes, stats.file_bytes
    ))
}

/// One call of a tool that reads and reports, with `threads` at 1.
fn reading_tool(name: &str, paths: &[PathBuf]) -> Result<String> {
    let mut quiet = |_: u64| Ok(());
    let mut quiet_unit = || Ok(());
    Ok(match name {
        "check" => {
            let report = check::check_path(&paths[0], check::CheckOptions::default(), &mut quiet)?;
            let s = &report.summary;
            format!(
                "{} events, {} bytes of JSON, {} errors, {} warnings",
                s.events,
                s.json_bytes,
                report.errors.len(),
                report.warnings.len()
            )
        }
        "summary-exact" | "summary-hta" => {
            let rules = if name == "summary-hta" {
                summary::events::Rules::Hta
            } else {
                summary::events::Rules::Exact
            };
            let ranks = summary::summarize(paths, rules, 1, &mut quiet_unit)?;
            let r = &ranks[0];
            format!("{} events, {} steps", r.events, r.steps.len())
        }
        "diff" => {
            let runs = [vec![paths[0].clone()], vec![paths[1].clone()]];
            let found = diff::read::read_runs(&runs, 1, &mut quiet_unit)?;
            let groups: usize = found.files.iter().map(|f| f.operators.len()).sum();
            let events: u64 = found.ranks.iter().flatten().map(|r| r.events).sum();
            format!("{events} events, {groups} operator groups")
        }
        "ops" | "ops-tracelens" => {
            let rules = if name == "ops" {
                ops::Rules::Exact
            } else {
                ops::Rules::TraceLens
            };
            let found = ops::reports(paths, rules, None, 1, &mut quiet)?;
            let (_, rows, groups, _) = ops::groups::ranked(found, rules);
            format!("{} rows, {} groups", rows.len(), groups.len())
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "no tool benchmark {other:?}"
            )))
        }
    })
}

/// One call of a tool that writes files under `scratch`, with `threads` at 1.
fn writing_tool(name: &str, paths: &[PathBuf], scratch: &Path) -> Result<String> {
    let mut quiet = |_: u64| Ok(());
    Ok(match name {
        "parquet" => {
            let named = [(paths[0].clone(), "rank".to_owned())];
            let options = parquet::ParquetOptions {
                force: false,
                threads: 1,
                zstd_level: 3,
                spill_bytes: parquet::SPILL_BYTES,
            };
            let written =
                parquet::to_parquet(&named, &scratch.join("dataset"), options, &mut quiet)?;
            let w = &written[0];
            format!(
                "{} events, {} flows, {} tracks",
                w.rows[0], w.rows[1], w.rows[2]
            )
        }
        "split" => {
            let options = split::SplitOptions {
                max_bytes: 1 << 20,
                out_dir: Some(scratch.to_path_buf()),
                gzip: Some(None),
                default_gzip: (7, 1),
                stem: None,
                suffix: None,
                trace_name: None,
            };
            let stats = split::split(&paths[0], &options, &mut quiet)?;
            format!(
                "{} events into {} parts",
                stats.events_read,
                stats.parts.len()
            )
        }
        "merge" => {
            let options = merge::MergeOptions {
                labels: Vec::new(),
                align_step: false,
                spec: FilterSpec::default(),
                max_bytes: None,
                gzip: None,
                threads: 1,
            };
            let stats = merge::merge(paths, &scratch.join("merged.json"), &options, &mut quiet)?;
            format!(
                "{} events read, {} written",
                stats.events_read, stats.events_written
            )
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "no tool benchmark {other:?}"
            )))
        }
    })
}

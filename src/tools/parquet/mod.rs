//! `parquet`: trace files as one Parquet dataset (`kinetrace parquet`, docs/parquet.md):
//! `events/`, `flows/`, `tracks/`, `ops/` and `meta/`, each partitioned by rank the Hive
//! way. `ops` is `kinetrace ops`' instance rows (`ops.rs`), from what the same read keeps.
//!
//! Each file is read once by the crate's reader into its rows (`rows.rs`), which are then
//! written in time order (`table.rs`); files are read and written on worker threads, one
//! file each at a time (a single plain `.json` is itself read in parallel chunks). The
//! dataset is made in a temporary folder beside `DIR` (`output::temps`: mode 0700 until it is
//! complete, its spilled runs inside) and renamed into place when every file is written: a
//! failure or Ctrl-C leaves nothing behind, and an existing `DIR` is replaced (with `force`)
//! only then. A process killed outright leaves the folder, which the next run that makes a
//! temporary in that place removes (`temps`' sweep of a dead process's temporaries). Ranks
//! are found as `merge` finds them.

pub(crate) mod ops;
pub(crate) mod rows;
pub(crate) mod runs;
pub(crate) mod table;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::json::render::push_json_string;
use crate::output::temps;
use crate::read::attribution::{Collected, Keep};
use crate::read::events::{scan_trace, ReadOptions};
use crate::read::ranks::{assign_ranks, RankFrom};
use crate::read::sources::{Msg, Reader, Sources};

use self::ops::{write_ops_table, Reading};
use self::rows::{Rows, TABLES};
use self::runs::Runs;
use self::table::{beyond_i64, column, int, string, Def, Table, SCHEMA_VERSION, SEQ, TS};

/// The file that marks a folder as a kinetrace dataset (what `force` may replace).
pub(crate) const MARKER: &str = "_kinetrace.json";

/// `meta`'s columns (docs/parquet.md), one row per rank.
const META: &[Def] = &[
    string("source"),
    string("rank_from"),
    int("base_time_ns"),
    string("schema_version"),
    string("device_properties"),
    string("distributed_info"),
    string("header"),
    int("events"),
    int("flows"),
    int("tracks"),
    int("json_bytes"),
    int("kinetrace_schema"),
];

/// How a dataset is written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParquetOptions {
    /// Replace an existing dataset at `DIR`.
    pub(crate) force: bool,
    /// Files read and written at once.
    pub(crate) threads: usize,
    /// zstd's level (1-22).
    pub(crate) zstd_level: i32,
    /// Bytes of rows a file's tables hold in memory before the largest spills to disk.
    pub(crate) spill_bytes: usize,
}

/// [`ParquetOptions::spill_bytes`]' default: with one row group being written, a file's
/// conversion stays within 64 MiB plus a row group.
pub(crate) const SPILL_BYTES: usize = 48 << 20;

/// A source and the name the dataset gives it (`meta.source`): its path, or what the
/// caller calls it (a profile exported through a FIFO).
pub(crate) type Named = (PathBuf, String);

/// What one source became.
#[derive(Debug, Clone)]
pub(crate) struct RankWritten {
    pub(crate) source: String,
    pub(crate) rank: i64,
    pub(crate) rank_from: &'static str,
    /// Rows of `events`, `flows` and `tracks`.
    pub(crate) rows: [u64; 3],
    pub(crate) json_bytes: u64,
}

/// What a source's worker reports: its `distributedInfo.rank`, the rows of `events`,
/// `flows` and `tracks`, and the JSON bytes read.
type Done = (Option<i64>, [u64; 3], u64);

/// One source read and written under the temporary folder (its rank not yet known to be
/// unique).
struct Converted {
    distributed_rank: Option<i64>,
    rows: Rows,
    ops: Collected,
    json_bytes: u64,
}

/// Reads the trace at `path` into rows.
fn read_one(
    path: &Path,
    (options, spill_dir, spill_bytes): (ReadOptions, &Path, usize),
    reading: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Converted> {
    let mut both = Reading {
        rows: Rows::new(spill_dir, spill_bytes),
        ops: Collected::new(Keep::Rows),
    };
    let end = scan_trace(path, &mut both, reading, options)?;
    if let Some(invalid) = end.invalid {
        return Err(Error::trace_format(path, invalid));
    }
    let Reading { rows, ops } = both;
    Ok(Converted {
        distributed_rank: rows.header.distributed_rank,
        rows,
        ops,
        json_bytes: end.json_bytes,
    })
}

/// Writes one source's tables under `tmp` as `TABLE/rank=R/part-NNNNN.parquet` (`index`:
/// the source's place in the list).
fn write_one(
    tmp: &Path,
    c: Converted,
    (index, source): (usize, &str),
    (rank, rank_from): RankFrom,
    options: ParquetOptions,
    check: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let file = format!("part-{index:05}.parquet");
    let place = |table: &str| -> Result<PathBuf> {
        let dir = tmp.join(table).join(format!("rank={rank}"));
        fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
        Ok(dir.join(&file))
    };
    let Converted {
        rows: mut r,
        ops,
        json_bytes,
        ..
    } = c;
    // The operators first: their attribution is freed before the other tables are merged
    // (each table's merge holds a row group).
    write_ops_table(ops, &place("ops")?, options.zstd_level, check)?;
    let base = r.header.base_time_ns.unwrap_or(0);
    let runs = std::mem::replace(&mut r.runs, TABLES.map(|_| Runs::new(PathBuf::new())));
    let tables = [&mut r.events, &mut r.flows, &mut r.tracks];
    for ((name, table), runs) in TABLES.iter().zip(tables).zip(runs) {
        let path = place(name)?;
        if runs.is_empty() {
            table
                .shift(TS, base)
                .map_err(|seq| beyond_i64(source, seq))?;
            let order = table.time_order(TS, SEQ);
            table.write(&path, &order, options.zstd_level, check)?;
        } else {
            runs.write_merged(table, &path, (source, base, options.zstd_level), check)?;
        }
        *table = Table::new(table.defs()); // its memory back before the next table
    }
    let h = &r.header;
    let [events, flows, tracks] = r.counts();
    let mut meta = Table::new(META);
    let header = Some(&[&h.text[..], b"}"].concat())
        .filter(|_| !h.text.is_empty())
        .map(|v| v.to_vec());
    meta.str(const { column(META, "source") }, Some(source.as_bytes()))
        .str(
            const { column(META, "rank_from") },
            Some(rank_from.as_bytes()),
        )
        .int(
            const { column(META, "base_time_ns") },
            Some(h.base_time_ns.unwrap_or(0)),
        )
        .str(
            const { column(META, "schema_version") },
            h.schema_version.as_deref(),
        )
        .str(
            const { column(META, "device_properties") },
            h.device_properties.as_deref(),
        )
        .str(
            const { column(META, "distributed_info") },
            h.distributed_info.as_deref(),
        )
        .str(const { column(META, "header") }, header.as_deref())
        .int(const { column(META, "events") }, Some(events as i64))
        .int(const { column(META, "flows") }, Some(flows as i64))
        .int(const { column(META, "tracks") }, Some(tracks as i64))
        .int(
            const { column(META, "json_bytes") },
            Some(json_bytes as i64),
        )
        .int(
            const { column(META, "kinetrace_schema") },
            Some(SCHEMA_VERSION),
        )
        .end_row();
    meta.write(&place("meta")?, &[0], options.zstd_level, check)
}

/// Converts the traces at `paths` (one rank each) into a dataset at `out`; `progress` is
/// told the JSON bytes read so far, on the calling thread between waits (its error stops
/// the work). Ranks come back in the order of `paths`.
pub(crate) fn to_parquet(
    sources: &[Named],
    out: &Path,
    options: ParquetOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Vec<RankWritten>> {
    if sources.is_empty() {
        return Err(Error::InvalidArgument("no trace file given".into()));
    }
    if !(1..=22).contains(&options.zstd_level) {
        return Err(Error::InvalidArgument(format!(
            "the zstd level must be 1 to 22, not {}",
            options.zstd_level
        )));
    }
    check_replaceable(out, options.force)?;
    progress(0)?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = temp_dir(&parent, out)?;
    let result = convert_all(sources, &tmp, options, progress).and_then(|written| {
        // The last chance to stop: after the rename the dataset is there.
        progress(written.iter().map(|w| w.json_bytes).sum())?;
        write_marker(&tmp, &written)?;
        open_up(&tmp)?;
        put_in_place(&tmp, out, options.force)?;
        Ok(written)
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// A new temporary folder in `parent` for the dataset `out` (or for the old one it replaces).
fn temp_dir(parent: &Path, out: &Path) -> Result<PathBuf> {
    let name = out.file_name().unwrap_or(OsStr::new("dataset"));
    temps::create_dir(parent, name).map_err(|e| {
        let what = format!("cannot create a temporary folder for {}", out.display());
        Error::io(what, e)
    })
}

/// Gives the finished dataset's folder the mode a plain `mkdir` gives (its `meta` folder's,
/// made with the umask applied) instead of its temporary's 0700.
fn open_up(tmp: &Path) -> Result<()> {
    let meta = tmp.join("meta");
    let mode =
        fs::metadata(&meta).map_err(|e| Error::io(format!("cannot stat {}", meta.display()), e))?;
    fs::set_permissions(tmp, mode.permissions())
        .map_err(|e| Error::io(format!("cannot set the mode of {}", tmp.display()), e))
}

/// Refuses an existing `out` unless `force` and it is a kinetrace dataset or an empty folder.
fn check_replaceable(out: &Path, force: bool) -> Result<()> {
    let Ok(meta) = fs::symlink_metadata(out) else {
        return Ok(());
    };
    let exists = |why: &str| {
        Error::io(
            format!("{} {why}", out.display()),
            std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        )
    };
    if !force {
        return Err(exists("exists: pass --force (force=True) to replace it"));
    }
    let empty = meta.is_dir() && fs::read_dir(out).is_ok_and(|mut d| d.next().is_none());
    if meta.is_dir() && (empty || out.join(MARKER).is_file()) {
        return Ok(());
    }
    Err(exists(
        "is not a kinetrace dataset (no _kinetrace.json), so --force does not replace it",
    ))
}

/// Reads and writes every source on up to `options.threads` threads (`read::sources`).
fn convert_all(
    sources: &[Named],
    tmp: &Path,
    options: ParquetOptions,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Vec<RankWritten>> {
    let paths: Vec<PathBuf> = sources.iter().map(|(p, _)| p.clone()).collect();
    let paths = &paths[..];
    // Nothing is sent but each file's report: no queue to bound.
    let pool = Sources::new(paths, options.threads, 0);
    let read_options = pool.read_options;
    let work = |i: usize, reader: &Reader<'_, Msg<(), Done>>| {
        let spill_dir = tmp.join(format!(".runs-{i:05}"));
        let reading = (read_options, spill_dir.as_path(), options.spill_bytes);
        let c = read_one(&paths[i], reading, &mut reader.reading())?;
        let rank = crate::read::ranks::rank_of(&paths[i], c.distributed_rank, i);
        let done = (c.distributed_rank, c.rows.counts(), c.json_bytes);
        write_one(tmp, c, (i, &sources[i].1), rank, options, &|| {
            reader.check()
        })?;
        let _ = fs::remove_dir(&spill_dir); // made only where a table spilled
        Ok(done)
    };
    let done = pool.each(&work, progress)?;
    ranked(sources, done)
}

/// Each source's report with its rank, refused when two sources claim one rank.
fn ranked(sources: &[Named], done: Vec<Done>) -> Result<Vec<RankWritten>> {
    let distributed: Vec<Option<i64>> = done.iter().map(|d| d.0).collect();
    let paths: Vec<PathBuf> = sources.iter().map(|(p, _)| p.clone()).collect();
    let ranks = assign_ranks(&paths, &distributed, "convert them into separate datasets")?;
    Ok(done
        .into_iter()
        .zip(ranks)
        .zip(sources)
        .map(
            |(((_, rows, json_bytes), (rank, rank_from)), (_, name))| RankWritten {
                source: name.clone(),
                rank,
                rank_from,
                rows,
                json_bytes,
            },
        )
        .collect())
}

/// `_kinetrace.json`: the schema version and each rank's source.
fn write_marker(tmp: &Path, written: &[RankWritten]) -> Result<()> {
    let mut text = format!("{{\"schema\": {SCHEMA_VERSION}, \"ranks\": [").into_bytes();
    for (i, w) in written.iter().enumerate() {
        if i > 0 {
            text.extend_from_slice(b", ");
        }
        text.extend_from_slice(format!("{{\"rank\": {}, \"source\": ", w.rank).as_bytes());
        push_json_string(&mut text, w.source.as_bytes());
        text.push(b'}');
    }
    text.extend_from_slice(b"]}\n");
    let path = tmp.join(MARKER);
    fs::write(&path, text).map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
}

/// Renames the finished dataset `tmp` to `out`; an existing `out` (checked replaceable) is
/// moved aside first, over an empty temporary folder (so a kill before it is removed leaves
/// a temporary the next run sweeps), and removed once the new one is in place.
fn put_in_place(tmp: &Path, out: &Path, force: bool) -> Result<()> {
    let rename = |from: &Path, to: &Path| {
        fs::rename(from, to).map_err(|e| {
            Error::io(
                format!("cannot rename {} to {}", from.display(), to.display()),
                e,
            )
        })
    };
    if force && fs::symlink_metadata(out).is_ok() {
        check_replaceable(out, force)?;
        let old = temp_dir(tmp.parent().unwrap_or(Path::new(".")), out)?;
        // rename(2) replaces an empty folder.
        if let Err(e) = rename(out, &old) {
            let _ = fs::remove_dir(&old);
            return Err(e);
        }
        if let Err(e) = rename(tmp, out) {
            let _ = fs::rename(&old, out);
            return Err(e);
        }
        let _ = fs::remove_dir_all(&old);
        return Ok(());
    }
    // Never over something made meanwhile: rename(2) would replace an empty folder.
    if fs::symlink_metadata(out).is_ok() {
        return check_replaceable(out, false);
    }
    rename(tmp, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{entries, scratch};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    use std::fs::File;

    const OPTIONS: ParquetOptions = ParquetOptions {
        force: false,
        threads: 2,
        zstd_level: 3,
        spill_bytes: SPILL_BYTES,
    };

    fn named(paths: &[PathBuf]) -> Vec<Named> {
        let name = |p: &PathBuf| (p.clone(), p.to_string_lossy().into_owned());
        paths.iter().map(name).collect()
    }

    /// Every row of one Parquet file as (column, value) pairs.
    fn rows(path: &Path) -> Vec<Vec<(String, Field)>> {
        let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let iter = reader.get_row_iter(None).unwrap();
        let pairs = |row: parquet::record::Row| {
            let cols = row.get_column_iter();
            cols.map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        iter.map(|r| pairs(r.unwrap())).collect()
    }

    fn field<'r>(row: &'r [(String, Field)], name: &str) -> &'r Field {
        &row.iter().find(|(k, _)| k == name).unwrap().1
    }

    const TRACE: &str = r#"{"distributedInfo": {"rank": 5}, "traceEvents": [
  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}},
  {"ph": "X", "name": "late", "pid": 1, "tid": 2, "ts": 20.0005, "dur": 1, "args": {"correlation": 4}},
  {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 4, "pid": 1, "tid": 2, "ts": 20.5},
  {"ph": "X", "name": "early", "pid": "gpu", "tid": 7, "ts": 3.25, "args": {"stream": "7"}}
], "baseTimeNanoseconds": 1000}"#;

    #[test]
    fn a_trace_becomes_four_tables_in_time_order() {
        let dir = scratch("parquet-tables");
        let src = dir.join("t.json");
        fs::write(&src, TRACE).unwrap();
        let out = dir.join("ds");
        let written = to_parquet(&named(&[src]), &out, OPTIONS, &mut |_| Ok(())).unwrap();
        assert_eq!(
            (written[0].rank, written[0].rank_from),
            (5, "distributedInfo")
        );
        assert_eq!(written[0].rows, [2, 1, 1]);
        assert_eq!(
            entries(&out),
            [
                "_kinetrace.json",
                "events",
                "flows",
                "meta",
                "ops",
                "tracks"
            ]
        );
        let events = rows(&out.join("events/rank=5/part-00000.parquet"));
        let names: Vec<&Field> = events.iter().map(|r| field(r, "name")).collect();
        assert_eq!(
            names,
            [&Field::Str("early".into()), &Field::Str("late".into())]
        );
        // 1000 ns of base time + the µs as written, exactly (20.0005 µs is 20000 ns + a
        // half ns, floored).
        assert_eq!(field(&events[0], "ts_ns"), &Field::Long(4250));
        assert_eq!(field(&events[1], "ts_ns"), &Field::Long(21000));
        assert_eq!(field(&events[0], "dur_ns"), &Field::Null);
        assert_eq!(field(&events[0], "pid_text"), &Field::Str("gpu".into()));
        assert_eq!(field(&events[0], "stream"), &Field::Long(7));
        assert_eq!(field(&events[1], "correlation"), &Field::Long(4));
        let flows = rows(&out.join("flows/rank=5/part-00000.parquet"));
        assert_eq!(field(&flows[0], "event_seq"), &Field::Long(1));
        assert_eq!(field(&flows[0], "id"), &Field::Str("4".into()));
        let tracks = rows(&out.join("tracks/rank=5/part-00000.parquet"));
        assert_eq!(field(&tracks[0], "value"), &Field::Str("main".into()));
        let meta = rows(&out.join("meta/rank=5/part-00000.parquet"));
        assert_eq!(field(&meta[0], "base_time_ns"), &Field::Long(1000));
        assert_eq!(field(&meta[0], "events"), &Field::Long(2));
    }

    #[test]
    fn a_damaged_source_or_a_clash_leaves_nothing() {
        let dir = scratch("parquet-damaged");
        let good = dir.join("rank-1.json");
        fs::write(&good, TRACE.replace("\"rank\": 5", "\"rank\": 1")).unwrap();
        let cut = dir.join("rank-2.json");
        fs::write(&cut, &TRACE[..TRACE.len() / 2]).unwrap();
        let out = dir.join("ds");
        let err = to_parquet(&named(&[good.clone(), cut]), &out, OPTIONS, &mut |_| Ok(()));
        assert!(matches!(err, Err(Error::TraceFormat(_))), "{err:?}");
        assert_eq!(entries(&dir), ["rank-1.json", "rank-2.json"]);
        let twin = dir.join("twin.json");
        fs::copy(&good, &twin).unwrap();
        let err = to_parquet(&named(&[good, twin]), &out, OPTIONS, &mut |_| Ok(()));
        assert!(err.unwrap_err().to_string().contains("are both rank 1"));
        assert_eq!(entries(&dir), ["rank-1.json", "rank-2.json", "twin.json"]);
    }

    #[test]
    fn a_stop_leaves_nothing_and_an_existing_folder_needs_force() {
        let dir = scratch("parquet-stop");
        let src = dir.join("t.json");
        fs::write(&src, TRACE).unwrap();
        let out = dir.join("ds");
        let mut calls = 0;
        let mut stop_late = |_| {
            calls += 1;
            if calls > 1 {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        };
        let err = to_parquet(
            &named(std::slice::from_ref(&src)),
            &out,
            OPTIONS,
            &mut stop_late,
        );
        assert!(matches!(err, Err(Error::Interrupted)), "{err:?}");
        assert_eq!(entries(&dir), ["t.json"]);
        fs::create_dir(&out).unwrap();
        fs::write(out.join("mine.txt"), "keep").unwrap();
        for force in [false, true] {
            let options = ParquetOptions { force, ..OPTIONS };
            assert!(to_parquet(
                &named(std::slice::from_ref(&src)),
                &out,
                options,
                &mut |_| Ok(())
            )
            .is_err());
            assert_eq!(entries(&out), ["mine.txt"]);
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_dataset_is_made_in_a_private_temporary_that_a_later_run_sweeps() {
        use crate::output::temps::{host_tag, parse, SUFFIX};
        use crate::testing::dead_pid;
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("parquet-temp");
        let src = dir.join("t.json");
        fs::write(&src, TRACE).unwrap();
        // What a conversion killed mid-spill leaves: its folder, a table, a run.
        let killed = dir.join(format!(
            ".ds.{}.{:08x}.0123456789abcdef{SUFFIX}",
            dead_pid(),
            host_tag()
        ));
        fs::create_dir_all(killed.join(".runs-00000/events")).unwrap();
        fs::write(killed.join(".runs-00000/events/run-00000"), b"rows").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        // The temporaries in `dir` at each call of `progress`: the first comes before the
        // conversion made its folder, the last just before the rename.
        let mut seen = Vec::new();
        let out = dir.join("ds");
        let src = std::slice::from_ref(&src);
        to_parquet(&named(src), &out, OPTIONS, &mut |_| {
            let mut now = Vec::new();
            for e in fs::read_dir(&dir).unwrap() {
                let name = e.unwrap().file_name();
                if let Some(pid_host) = parse(name.as_bytes()) {
                    now.push((name.clone(), pid_host, mode(&dir.join(&name))));
                }
            }
            seen.push(now);
            Ok(())
        })
        .unwrap();
        assert!(seen.len() >= 2);
        assert_eq!(seen[0].len(), 1);
        assert_eq!(dir.join(&seen[0][0].0), killed);
        let [(name, pid_host, mode_then)] = &seen[seen.len() - 1][..] else {
            panic!("{seen:?}");
        };
        assert!(name.as_bytes().starts_with(b".ds."), "{name:?}");
        assert_eq!(*pid_host, (std::process::id(), host_tag()));
        assert_eq!(*mode_then, 0o700);
        // The killed one went before this conversion's was made; the dataset has the mode
        // a plain mkdir gives.
        assert_eq!(entries(&dir), ["ds", "t.json"]);
        fs::create_dir(dir.join("plain")).unwrap();
        assert_eq!(mode(&out), mode(&dir.join("plain")));
    }

    /// `src` converted twice into folders of `dir`: with its rows in memory ("whole") and
    /// spilled to runs every 4 KiB ("spilled"); each conversion's name, folder and result.
    fn whole_and_spilled(
        dir: &Path,
        src: &Path,
    ) -> Vec<(&'static str, PathBuf, Result<Vec<RankWritten>>)> {
        [("whole", SPILL_BYTES), ("spilled", 4096)]
            .into_iter()
            .map(|(name, spill_bytes)| {
                let out = dir.join(name);
                let options = ParquetOptions {
                    spill_bytes,
                    ..OPTIONS
                };
                let sources = named(std::slice::from_ref(&src.to_path_buf()));
                let written = to_parquet(&sources, &out, options, &mut |_| Ok(()));
                (name, out, written)
            })
            .collect()
    }

    #[test]
    fn spilled_runs_merge_into_the_same_tables() {
        let dir = scratch("parquet-spill");
        // Events out of time order (three interleaved runs), flows, metadata, a base time.
        let mut events = Vec::new();
        for i in 0..600 {
            let ts = (i % 3) * 1000 + i / 3;
            events.push(format!(
                r#"{{"ph": "X", "name": "op{i}", "pid": 1, "tid": {t}, "ts": {ts}.5, "dur": 1, "args": {{"correlation": {i}}}}}"#,
                t = i % 3
            ));
            if i % 7 == 0 {
                events.push(format!(
                    r#"{{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": {i}, "pid": 1, "tid": {t}, "ts": {ts}.5}}"#,
                    t = i % 3
                ));
                events.push(format!(r#"{{"ph": "M", "name": "thread_name", "pid": 1, "tid": {i}, "args": {{"name": "t"}}}}"#));
            }
        }
        let text = format!(
            r#"{{"traceEvents": [{}], "baseTimeNanoseconds": 1700000000000000000}}"#,
            events.join(",\n")
        );
        let src = dir.join("t.json");
        fs::write(&src, text).unwrap();
        let mut tables = Vec::new();
        for (name, out, written) in whole_and_spilled(&dir, &src) {
            let written = written.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(written[0].rows, [600, 86, 86]);
            assert_eq!(
                entries(&out),
                [
                    "_kinetrace.json",
                    "events",
                    "flows",
                    "meta",
                    "ops",
                    "tracks"
                ]
            );
            let read = |t: &str| rows(&out.join(format!("{t}/rank=0/part-00000.parquet")));
            tables.push(["events", "flows", "tracks"].map(read));
        }
        assert_eq!(tables[0], tables[1]);
        let first = field(&tables[1][0][0], "ts_ns");
        assert_eq!(first, &Field::Long(1_700_000_000_000_000_500));
    }

    /// A ts that, with the file's base time, is beyond 64-bit ns is the trace's own fault:
    /// a `TraceFormat` error naming the file and the event, in memory and when spilled.
    #[test]
    fn times_beyond_64_bits_are_the_files_fault() {
        let dir = scratch("parquet-beyond");
        let mut events: Vec<String> = (0..300)
            .map(|i| {
                format!(r#"{{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": {i}, "dur": 1}}"#)
            })
            .collect();
        events.push(
            r#"{"ph": "X", "name": "late", "pid": 1, "tid": 1, "ts": 9000000000000000, "dur": 1}"#
                .into(),
        );
        let text = format!(
            r#"{{"traceEvents": [{}], "baseTimeNanoseconds": 9000000000000000000}}"#,
            events.join(",\n")
        );
        let src = dir.join("t.json");
        fs::write(&src, text).unwrap();
        for (name, out, written) in whole_and_spilled(&dir, &src) {
            let err = written.unwrap_err();
            let Error::TraceFormat(fault) = &err else {
                panic!("{name}: {err}")
            };
            assert_eq!(fault.kind, crate::error::FormatKind::TooLarge, "{name}");
            assert_eq!(fault.event_index, Some(300), "{name}: {err}");
            assert!(
                err.to_string().starts_with(&src.display().to_string()),
                "{err}"
            );
            assert!(!out.exists(), "{name}");
        }
    }
}

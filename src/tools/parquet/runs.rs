//! Sorted runs: the rows of a table too big to hold in memory, spilled to files in time
//! order and merged back into the Parquet file when the table is written. Memory stays at
//! the spill limit plus one row group, whatever the trace's size.
//!
//! A run file is a sequence of records: 8 bytes of length, then the row's sort key (`ts`,
//! null first, and `seq`: 16 bytes) and its columns as [`Table::push_record`] writes them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::{self, File};
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use super::table::{beyond_i64, ParquetOut, Table, GROUP_BYTES, GROUP_ROWS, SEQ, TS};

/// A row's place in time order: (`ts_ns`, null first; `seq`).
type Key = (i64, i64);

/// The runs of one table.
pub(crate) struct Runs {
    dir: PathBuf,
    files: Vec<PathBuf>,
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("cannot {what} {}", path.display()), e)
}

impl Runs {
    /// Runs kept in `dir` (made at the first spill; removed with the dataset's temporary
    /// folder on failure).
    pub(crate) fn new(dir: PathBuf) -> Runs {
        Runs {
            dir,
            files: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Writes `table`'s rows, sorted by time, as a new run, and empties the table.
    pub(crate) fn spill(&mut self, table: &mut Table) -> Result<()> {
        fs::create_dir_all(&self.dir).map_err(|e| io_error("create", &self.dir, e))?;
        let path = self.dir.join(format!("run-{:05}", self.files.len()));
        let file = File::create_new(&path).map_err(|e| io_error("create", &path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut record = Vec::new();
        for r in table.time_order(TS, SEQ) {
            let r = r as usize;
            record.clear();
            record.extend_from_slice(&table.int_at(TS, r).unwrap_or(i64::MIN).to_le_bytes());
            record.extend_from_slice(&table.int_at(SEQ, r).unwrap_or(i64::MIN).to_le_bytes());
            table.push_record(r, &mut record);
            out.write_all(&(record.len() as u64).to_le_bytes())
                .and_then(|()| out.write_all(&record))
                .map_err(|e| io_error("write", &path, e))?;
        }
        out.flush().map_err(|e| io_error("write", &path, e))?;
        self.files.push(path);
        table.clear();
        Ok(())
    }

    /// Writes the runs and the rows still in `table`, merged in time order, to a new file at
    /// `path`, `base` added to every `ts_ns`; removes the runs.
    pub(crate) fn write_merged(
        mut self,
        table: &mut Table,
        path: &Path,
        (source, base, zstd_level): (&str, i64, i32),
        check: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        if table.rows() > 0 {
            self.spill(table)?;
        }
        let mut readers = Vec::with_capacity(self.files.len());
        let mut heap = BinaryHeap::new();
        for (i, file) in self.files.iter().enumerate() {
            let mut reader = RunReader::open(file)?;
            if let Some(key) = reader.next()? {
                heap.push(Reverse((key, i)));
            }
            readers.push(reader);
        }
        let mut out = ParquetOut::create(path, table.defs(), zstd_level)?;
        let flush = |table: &mut Table, out: &mut ParquetOut| -> Result<()> {
            check()?;
            table
                .shift(TS, base)
                .map_err(|seq| beyond_i64(source, seq))?;
            let order: Vec<u32> = (0..table.rows() as u32).collect();
            out.write_group(table, &order)?;
            table.clear();
            Ok(())
        };
        while let Some(Reverse((_, i))) = heap.pop() {
            let reader = &mut readers[i];
            table
                .add_record(&reader.record)
                .ok_or_else(|| io_error("read", &self.files[i], ErrorKind::InvalidData.into()))?;
            if let Some(key) = reader.next()? {
                heap.push(Reverse((key, i)));
            }
            if table.rows() >= GROUP_ROWS || table.bytes() >= GROUP_BYTES {
                flush(table, &mut out)?;
            }
        }
        if table.rows() > 0 {
            flush(table, &mut out)?;
        }
        out.close()?;
        drop(readers);
        fs::remove_dir_all(&self.dir).map_err(|e| io_error("remove", &self.dir, e))
    }
}

/// One run read back a record at a time.
struct RunReader {
    path: PathBuf,
    input: BufReader<File>,
    /// The current record's columns (after its key).
    record: Vec<u8>,
    buf: Vec<u8>,
}

impl RunReader {
    fn open(path: &Path) -> Result<RunReader> {
        let file = File::open(path).map_err(|e| io_error("open", path, e))?;
        Ok(RunReader {
            path: path.to_path_buf(),
            input: BufReader::with_capacity(1 << 20, file),
            record: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// Reads the next record: its key, or `None` at the end of the run.
    fn next(&mut self) -> Result<Option<Key>> {
        let mut len = [0u8; 8];
        match self.input.read_exact(&mut len) {
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
            r => r.map_err(|e| io_error("read", &self.path, e))?,
        }
        self.buf.resize(u64::from_le_bytes(len) as usize, 0);
        self.input
            .read_exact(&mut self.buf)
            .map_err(|e| io_error("read", &self.path, e))?;
        let word = |at: usize| i64::from_le_bytes(self.buf[at..at + 8].try_into().expect("8"));
        let key = (word(0), word(8));
        self.record.clear();
        self.record.extend_from_slice(&self.buf[16..]);
        Ok(Some(key))
    }
}

//! One table of a dataset in memory, column by column (`events`, `flows`, `tracks`,
//! `meta`), and its writing as one Parquet file: rows in time order, row groups of at most
//! [`GROUP_ROWS`] rows or about [`GROUP_BYTES`], zstd, strings dictionary-encoded, times
//! delta-encoded.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use parquet::basic::{Compression, Encoding, LogicalType, Repetition, Type as Physical, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type as SchemaType};

use crate::error::{Error, FormatKind, Result};

/// The dataset's schema version (docs/parquet.md), in every file's key-value metadata.
/// 2: the `ops` table added (docs/parquet.md says what changed since 1).
pub(crate) const SCHEMA_VERSION: i64 = 2;

/// Columns every row table (`events`, `flows`, `tracks`) has at these places (their
/// shared columns come first, `rows.rs`): the sort key.
pub(crate) const SEQ: usize = 0;
pub(crate) const TS: usize = 4;

/// Most rows in a row group (what Spark and DuckDB read well in parallel).
pub(crate) const GROUP_ROWS: usize = 1 << 20;

/// About the most bytes of values in a row group.
pub(crate) const GROUP_BYTES: usize = 128 << 20;

/// A column's type: Parquet INT64, DOUBLE, BOOLEAN, or a UTF-8 string (BYTE_ARRAY
/// annotated STRING). A double or a boolean is held as 8 bytes like an int (its bits, or 0
/// and 1), so the runs and the sort handle one fixed-width kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int,
    Str,
    Float,
    Bool,
}

/// A column of a table: its name and type; `seq` alone is required.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Def {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
}

pub(crate) const fn int(name: &'static str) -> Def {
    Def {
        name,
        kind: Kind::Int,
    }
}

pub(crate) const fn string(name: &'static str) -> Def {
    Def {
        name,
        kind: Kind::Str,
    }
}

pub(crate) const fn float(name: &'static str) -> Def {
    Def {
        name,
        kind: Kind::Float,
    }
}

pub(crate) const fn boolean(name: &'static str) -> Def {
    Def {
        name,
        kind: Kind::Bool,
    }
}

/// The place of column `name` in `defs`, found when the crate is compiled (in a `const`):
/// a column is always named, never counted to; a name that is not there stops the build.
pub(crate) const fn column(defs: &[Def], name: &str) -> usize {
    let mut i = 0;
    while i < defs.len() {
        if bytes_equal(defs[i].name.as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("no such column")
}

const fn bytes_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The fault of the trace `source` whose event `seq` has a `ts` that, with the file's
/// `baseTimeNanoseconds`, is beyond the `ts_ns` column's 64 bits.
pub(crate) fn beyond_i64(source: &str, seq: Option<i64>) -> Error {
    let message = "a ts plus baseTimeNanoseconds is beyond 64-bit ns";
    let mut error = Error::trace_fault(Path::new(source), FormatKind::TooLarge, message);
    if let Error::TraceFormat(fault) = &mut error {
        fault.event_index = seq.and_then(|s| u64::try_from(s).ok());
    }
    error
}

/// `a` then `b`, as one list of `N` columns (a table's shared columns and its own, each
/// list written once).
pub(crate) const fn joined<const N: usize>(a: &[Def], b: &[Def]) -> [Def; N] {
    assert!(a.len() + b.len() == N, "N must be the sum of the lengths");
    let mut out = [int(""); N];
    let mut i = 0;
    while i < N {
        out[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    out
}

/// The strings of one column, end to end.
#[derive(Default)]
struct Strings {
    data: Vec<u8>,
    ends: Vec<usize>,
    present: Vec<bool>,
}

impl Strings {
    /// Where the value of `row` is in `data`, unless it is null.
    fn span(&self, row: usize) -> Option<std::ops::Range<usize>> {
        let start = if row == 0 { 0 } else { self.ends[row - 1] };
        self.present[row].then(|| start..self.ends[row])
    }
}

/// One column's values, row by row.
enum Values {
    Int(Vec<Option<i64>>),
    Str(Strings),
}

impl Values {
    fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Str(s) => s.ends.len(),
        }
    }
}

/// A table being filled row by row: its columns set ([`Table::int`], [`Table::str`]), then
/// [`Table::end_row`].
pub(crate) struct Table {
    defs: &'static [Def],
    columns: Vec<Values>,
    rows: usize,
    bytes: usize,
    /// A column given a value of the other kind (a bug): writing the table then fails.
    wrong_kind: Option<&'static str>,
}

impl Table {
    pub(crate) fn new(defs: &'static [Def]) -> Table {
        let columns = defs
            .iter()
            .map(|d| match d.kind {
                Kind::Int | Kind::Float | Kind::Bool => Values::Int(Vec::new()),
                Kind::Str => Values::Str(Strings::default()),
            })
            .collect();
        Table {
            defs,
            columns,
            rows: 0,
            bytes: 0,
            wrong_kind: None,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn defs(&self) -> &'static [Def] {
        self.defs
    }

    /// Sets int column `col` of the row being filled (each column at most once a row).
    pub(crate) fn int(&mut self, col: usize, value: Option<i64>) -> &mut Self {
        self.eight(col, Kind::Int, value, "an integer")
    }

    /// Sets double column `col` of the row being filled.
    pub(crate) fn float(&mut self, col: usize, value: Option<f64>) -> &mut Self {
        let bits = value.map(|v| v.to_bits() as i64);
        self.eight(col, Kind::Float, bits, "a double")
    }

    /// Sets boolean column `col` of the row being filled.
    pub(crate) fn boolean(&mut self, col: usize, value: Option<bool>) -> &mut Self {
        self.eight(col, Kind::Bool, value.map(i64::from), "a boolean")
    }

    /// Sets a column held as 8 bytes, of kind `kind`.
    fn eight(&mut self, col: usize, kind: Kind, value: Option<i64>, what: &str) -> &mut Self {
        if self.defs[col].kind != kind {
            self.mismatched(col, what);
        } else if let Values::Int(v) = &mut self.columns[col] {
            debug_assert_eq!(v.len(), self.rows, "{} set twice", self.defs[col].name);
            v.push(value);
            self.bytes += 16;
        } else {
            self.mismatched(col, what);
        }
        self
    }

    /// Sets string column `col` of the row being filled (each column at most once a row).
    pub(crate) fn str(&mut self, col: usize, value: Option<&[u8]>) -> &mut Self {
        if let Values::Str(s) = &mut self.columns[col] {
            debug_assert_eq!(s.ends.len(), self.rows, "{} set twice", self.defs[col].name);
            let bytes = value.unwrap_or_default();
            s.data.extend_from_slice(bytes);
            s.ends.push(s.data.len());
            s.present.push(value.is_some());
            self.bytes += 9 + bytes.len();
        } else {
            self.mismatched(col, "a string");
        }
        self
    }

    /// A value of the wrong kind for column `col`: a panic in debug builds (the tests find
    /// it), and in a release the table refuses to be written ([`Table::write`],
    /// [`ParquetOut::write_group`]): never a silent null.
    fn mismatched(&mut self, col: usize, what: &str) {
        let name = self.defs[col].name;
        if cfg!(debug_assertions) {
            panic!("column {name} was given {what}");
        }
        self.wrong_kind.get_or_insert(name);
    }

    /// An error naming the column that was given a value of the other kind, if one was.
    fn kinds_checked(&self) -> Result<()> {
        match self.wrong_kind {
            None => Ok(()),
            Some(name) => Err(Error::State(format!(
                "the Parquet column {name} was given a value of the wrong kind"
            ))),
        }
    }

    /// Ends the row being filled: the columns it was not given are null.
    pub(crate) fn end_row(&mut self) {
        let rows = self.rows;
        for values in &mut self.columns {
            if values.len() == rows {
                match values {
                    Values::Int(v) => v.push(None),
                    Values::Str(s) => {
                        s.ends.push(s.data.len());
                        s.present.push(false);
                    }
                }
            }
        }
        self.rows += 1;
    }

    /// Adds `by` to every value of the int column `col` (a rank's base time); where a sum
    /// does not fit 64 bits, the `seq` of its row (the event's index in `traceEvents`).
    pub(crate) fn shift(&mut self, col: usize, by: i64) -> std::result::Result<(), Option<i64>> {
        let Values::Int(values) = &mut self.columns[col] else {
            return Err(None);
        };
        let mut beyond = None;
        for (row, value) in values.iter_mut().enumerate() {
            if let Some(v) = value {
                match v.checked_add(by) {
                    Some(sum) => *v = sum,
                    None => {
                        beyond = Some(row);
                        break;
                    }
                }
            }
        }
        match beyond {
            None => Ok(()),
            Some(row) => Err(self.int_at(SEQ, row)),
        }
    }

    /// The int at (`col`, `row`).
    pub(crate) fn int_at(&self, col: usize, row: usize) -> Option<i64> {
        match &self.columns[col] {
            Values::Int(v) => v[row],
            Values::Str(_) => None,
        }
    }

    /// Row numbers in the order of the int columns `time` (null first) then `seq`.
    pub(crate) fn time_order(&self, time: usize, seq: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.rows as u32).collect();
        let key = |r: u32| {
            (
                self.int_at(time, r as usize).unwrap_or(i64::MIN),
                self.int_at(seq, r as usize).unwrap_or(i64::MIN),
            )
        };
        // Traces are mostly runs already in time order: a stable merge sort finds them.
        order.sort_by_key(|&r| key(r));
        order
    }

    /// Writes the rows in `order` to a new file at `path` (created exclusively).
    pub(crate) fn write(
        &self,
        path: &Path,
        order: &[u32],
        zstd_level: i32,
        check: &dyn Fn() -> Result<()>,
    ) -> Result<()> {
        self.kinds_checked()?;
        let mut out = ParquetOut::create(path, self.defs, zstd_level)?;
        for group in order.chunks(self.group_rows()) {
            check()?;
            out.write_group(self, group)?;
        }
        out.close()
    }

    /// Rows in a row group of this table's rows: [`GROUP_ROWS`], or fewer to stay near
    /// [`GROUP_BYTES`].
    pub(crate) fn group_rows(&self) -> usize {
        let per_row = self.bytes / self.rows.max(1) + 1;
        (GROUP_BYTES / per_row).clamp(1, GROUP_ROWS)
    }

    /// Bytes the rows take in memory (about).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Forgets every row (the columns keep their memory for the next rows).
    pub(crate) fn clear(&mut self) {
        for values in &mut self.columns {
            match values {
                Values::Int(v) => v.clear(),
                Values::Str(s) => {
                    s.data.clear();
                    s.ends.clear();
                    s.present.clear();
                }
            }
        }
        self.rows = 0;
        self.bytes = 0;
    }

    /// Writes row `row` as one record of a sorted run (`runs.rs`): each column in order, an
    /// int as a flag byte and 8 bytes, a string as a flag byte, its length and its bytes.
    pub(crate) fn push_record(&self, row: usize, out: &mut Vec<u8>) {
        for values in &self.columns {
            match values {
                Values::Int(v) => match v[row] {
                    Some(n) => {
                        out.push(1);
                        out.extend_from_slice(&n.to_le_bytes());
                    }
                    None => out.push(0),
                },
                Values::Str(s) => match s.span(row) {
                    Some(span) => {
                        out.push(1);
                        out.extend_from_slice(&(span.len() as u64).to_le_bytes());
                        out.extend_from_slice(&s.data[span]);
                    }
                    None => out.push(0),
                },
            }
        }
    }

    /// Adds the row of a record [`Table::push_record`] wrote; `None` if it is cut short.
    pub(crate) fn add_record(&mut self, mut record: &[u8]) -> Option<()> {
        for col in 0..self.columns.len() {
            let (&flag, rest) = record.split_first()?;
            record = rest;
            let kind = match self.columns[col] {
                Values::Int(_) => Kind::Int,
                Values::Str(_) => Kind::Str,
            };
            match (kind, flag) {
                (Kind::Int, 1) => {
                    let n = i64::from_le_bytes(record.get(..8)?.try_into().ok()?);
                    record = &record[8..];
                    let kind = self.defs[col].kind;
                    self.eight(col, kind, Some(n), "");
                }
                (Kind::Str, 1) => {
                    let len = u64::from_le_bytes(record.get(..8)?.try_into().ok()?) as usize;
                    let text = record.get(8..8 + len)?;
                    record = &record[8 + len..];
                    self.str(col, Some(text));
                }
                (Kind::Int, _) => {
                    let kind = self.defs[col].kind;
                    self.eight(col, kind, None, "");
                }
                (Kind::Str, _) => {
                    self.str(col, None);
                }
                (Kind::Float | Kind::Bool, _) => return None, // held as ints
            }
        }
        self.end_row();
        Some(())
    }
}

/// A Parquet file being written a row group at a time.
pub(crate) struct ParquetOut {
    path: std::path::PathBuf,
    writer: SerializedFileWriter<BufWriter<File>>,
}

/// A parquet error while writing `path`, as the crate's I/O error.
fn write_error(path: &Path, e: &parquet::errors::ParquetError) -> Error {
    Error::io(
        format!("cannot write {}", path.display()),
        std::io::Error::other(e.to_string()),
    )
}

impl ParquetOut {
    /// A new file at `path` (created exclusively) for a table of `defs`.
    pub(crate) fn create(path: &Path, defs: &'static [Def], zstd_level: i32) -> Result<Self> {
        let fail = |e: parquet::errors::ParquetError| write_error(path, &e);
        let file = File::create_new(path)
            .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            schema(defs).map_err(fail)?,
            Arc::new(properties(defs, zstd_level).map_err(fail)?),
        )
        .map_err(fail)?;
        Ok(ParquetOut {
            path: path.to_path_buf(),
            writer,
        })
    }

    /// Writes the rows `group` of `table` (in that order) as one row group.
    pub(crate) fn write_group(&mut self, table: &Table, group: &[u32]) -> Result<()> {
        table.kinds_checked()?;
        let path = &self.path;
        let fail = |e: parquet::errors::ParquetError| write_error(path, &e);
        let mut rg = self.writer.next_row_group().map_err(fail)?;
        let mut col = 0;
        while let Some(mut cw) = rg.next_column().map_err(fail)? {
            let required = col == 0 && table.defs[0].name == "seq";
            let mut levels = Vec::with_capacity(group.len());
            match &table.columns[col] {
                Values::Int(values) => {
                    let mut out = Vec::with_capacity(group.len());
                    for &r in group {
                        let v = values[r as usize];
                        levels.push(i16::from(v.is_some()));
                        out.extend(v);
                    }
                    let levels = (!required).then_some(&levels[..]);
                    match table.defs[col].kind {
                        Kind::Float => {
                            let out: Vec<f64> =
                                out.iter().map(|&b| f64::from_bits(b as u64)).collect();
                            cw.typed::<DoubleType>().write_batch(&out, levels, None)
                        }
                        Kind::Bool => {
                            let out: Vec<bool> = out.iter().map(|&b| b != 0).collect();
                            cw.typed::<BoolType>().write_batch(&out, levels, None)
                        }
                        _ => cw.typed::<Int64Type>().write_batch(&out, levels, None),
                    }
                    .map_err(fail)?;
                }
                Values::Str(strings) => {
                    // One shared buffer the values are views of (no copy per value).
                    let data = Bytes::copy_from_slice(&strings.data);
                    let mut out = Vec::with_capacity(group.len());
                    for &r in group {
                        let v = strings.span(r as usize);
                        levels.push(i16::from(v.is_some()));
                        out.extend(v.map(|s| ByteArray::from(data.slice(s))));
                    }
                    cw.typed::<ByteArrayType>()
                        .write_batch(&out, Some(&levels), None)
                        .map_err(fail)?;
                }
            }
            cw.close().map_err(fail)?;
            col += 1;
        }
        rg.close().map_err(fail)?;
        Ok(())
    }

    /// Writes the footer and closes the file.
    pub(crate) fn close(self) -> Result<()> {
        let path = self.path;
        let out = self
            .writer
            .into_inner()
            .map_err(|e| write_error(&path, &e))?;
        out.into_inner()
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e.into_error()))?;
        Ok(())
    }
}

/// The Parquet schema of a table of `defs`.
fn schema(defs: &[Def]) -> parquet::errors::Result<Arc<SchemaType>> {
    let mut fields = Vec::with_capacity(defs.len());
    for (i, d) in defs.iter().enumerate() {
        let required = i == 0 && d.name == "seq";
        let (physical, logical) = match d.kind {
            Kind::Int => (Physical::INT64, None),
            Kind::Float => (Physical::DOUBLE, None),
            Kind::Bool => (Physical::BOOLEAN, None),
            Kind::Str => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
        };
        let field = SchemaType::primitive_type_builder(d.name, physical)
            .with_repetition(if required {
                Repetition::REQUIRED
            } else {
                Repetition::OPTIONAL
            })
            .with_logical_type(logical)
            .build()?;
        fields.push(Arc::new(field));
    }
    Ok(Arc::new(
        SchemaType::group_type_builder("kinetrace")
            .with_fields(fields)
            .build()?,
    ))
}

/// How a table of `defs` is written.
fn properties(defs: &[Def], zstd_level: i32) -> parquet::errors::Result<WriterProperties> {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(zstd_level)?))
        .set_created_by(format!("kinetrace {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "kinetrace.schema".to_owned(),
            SCHEMA_VERSION.to_string(),
        )]))
        .set_max_row_group_row_count(Some(GROUP_ROWS))
        .set_data_page_size_limit(1 << 20)
        .set_dictionary_page_size_limit(1 << 20);
    // JSON text of every event is nearly always unique: a dictionary would only cost.
    for name in ["args", "extra", "header"] {
        if defs.iter().any(|d| d.name == name) {
            props = props.set_column_dictionary_enabled(ColumnPath::from(name), false);
        }
    }
    // Times and indices grow through the file: their differences are small.
    for name in ["seq", "ts_ns", "event_seq"] {
        if defs.iter().any(|d| d.name == name) {
            let path = ColumnPath::from(name);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
        }
    }
    Ok(props.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::scratch;

    const DEFS: &[Def] = &joined::<3>(&[int("seq"), string("name")], &[int("n")]);

    #[test]
    fn columns_are_found_by_name() {
        assert_eq!(column(DEFS, "seq"), 0);
        assert_eq!(column(DEFS, "name"), 1);
        assert_eq!(column(DEFS, "n"), 2);
        assert_eq!(
            DEFS.iter().map(|d| d.kind).collect::<Vec<_>>(),
            [Kind::Int, Kind::Str, Kind::Int]
        );
    }

    /// Doubles and booleans, held as 8 bytes, come back from a run record and reach the
    /// file as Parquet DOUBLE and BOOLEAN, nulls as nulls.
    #[test]
    fn doubles_and_booleans_survive_a_run_and_the_file() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        const D: &[Def] = &[int("n"), float("x"), boolean("b")];
        let mut table = Table::new(D);
        table
            .int(0, Some(1))
            .float(1, Some(-2.5))
            .boolean(2, Some(true));
        table.end_row();
        table.int(0, Some(2)).end_row();
        let mut copy = Table::new(D);
        for row in 0..2 {
            let mut record = Vec::new();
            table.push_record(row, &mut record);
            copy.add_record(&record).unwrap();
        }
        let dir = scratch("doubles");
        let path = dir.join("t.parquet");
        copy.write(&path, &[0, 1], 3, &|| Ok(())).unwrap();
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let rows: Vec<Vec<Field>> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|r| {
                r.unwrap()
                    .get_column_iter()
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            [
                vec![Field::Long(1), Field::Double(-2.5), Field::Bool(true)],
                vec![Field::Long(2), Field::Null, Field::Null],
            ]
        );
    }

    /// A value written to a column of the other kind: a panic in a debug build, and in a
    /// release an error that names the column when the table is written (no file): never
    /// the silent null it was.
    #[test]
    fn a_value_of_the_wrong_kind_is_never_a_silent_null() {
        let dir = scratch("wrong-kind");
        let path = dir.join("t.parquet");
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut table = Table::new(DEFS);
            table
                .int(0, Some(0))
                .int(column(DEFS, "name"), Some(7))
                .end_row();
            table.write(&path, &[0], 3, &|| Ok(()))
        }));
        if cfg!(debug_assertions) {
            assert!(written.is_err(), "a debug build panics");
        } else {
            let err = written.expect("no panic in a release").unwrap_err();
            assert!(err.to_string().contains("column name"), "{err}");
        }
        assert!(!path.exists());
        let mut table = Table::new(DEFS);
        table
            .int(0, Some(0))
            .str(1, Some(b"a"))
            .int(2, Some(7))
            .end_row();
        table.write(&path, &[0], 3, &|| Ok(())).unwrap();
        assert!(path.is_file());
    }
}

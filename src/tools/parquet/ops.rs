//! The `ops` table (docs/parquet.md): `kinetrace ops`' instance rows under the `exact`
//! rules, from the same attribution (`crate::read::attribution`, `crate::tools::ops`), read
//! on the pass that makes the other tables; with each row's peak and the GPU's bandwidth, the
//! roofline inputs of the peaks table. The roofline arithmetic itself is SQL over these
//! columns (docs/analysis.md), as `kinetrace.ops` does it in Python.

use std::path::Path;

use crate::error::Result;
use crate::read::attribution::{tree, Collected};
use crate::read::events::{Event, Visitor};
use crate::tools::ops::peaks::Gpu;
use crate::tools::ops::roofline::{choose_gpu, peak_of};
use crate::tools::ops::{exact_rows_each, InstanceRow};

use super::rows::Rows;
use super::table::{boolean, column, float, int, string, Def, ParquetOut, Table};

/// `ops`' columns, one row per operator instance.
pub(crate) const OPS: &[Def] = &[
    int("uid"),
    string("name"),
    string("family"),
    boolean("bwd"),
    float("flops"),
    float("bytes"),
    int("kernel_time_ns"),
    string("input_dims"),
    string("input_type"),
    int("device"),
    string("gpu"),
    string("precision"),
    float("peak_tflops"),
    float("bandwidth_tbs"),
];

/// Rows of an `ops` row group: the table is written as its rows come, a group at a time
/// (about 10 MB of values held), not kept whole.
const GROUP_ROWS: usize = 1 << 16;

/// A file's rows and what its `ops` table is made of, told by one read.
pub(crate) struct Reading {
    pub(crate) rows: Rows,
    pub(crate) ops: Collected,
}

impl Visitor for Reading {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        self.rows.header(key, raw, after_events)?;
        self.ops.header(key, raw, after_events)
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.rows.event(ev)?;
        self.ops.event(ev)
    }
}

/// Writes the `ops` table of what a file's read collected to a new file at `path`,
/// operators in file order. The rows are made twice, none kept: first for the devices
/// their kernels ran on (the GPU, as `kinetrace ops` chooses it), then into the file.
pub(crate) fn write_ops_table(
    collected: Collected,
    path: &Path,
    zstd_level: i32,
    check: &dyn Fn() -> Result<()>,
) -> Result<()> {
    write_in_groups(collected, path, (zstd_level, GROUP_ROWS), check)
}

/// [`write_ops_table`] with row groups of `group_rows`.
fn write_in_groups(
    collected: Collected,
    path: &Path,
    (zstd_level, group_rows): (i32, usize),
    check: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let a = tree::build(collected);
    let mut devices = Vec::new();
    exact_rows_each(&a, &mut |r| {
        devices.extend(r.device);
        Ok(())
    })?;
    let gpu = choose_gpu(&a.devices, devices, None).gpu;
    let mut out = ParquetOut::create(path, OPS, zstd_level)?;
    let mut t = Table::new(OPS);
    let mut flush = |t: &mut Table| -> Result<()> {
        check()?;
        let order: Vec<u32> = (0..t.rows() as u32).collect();
        out.write_group(t, &order)?;
        t.clear();
        Ok(())
    };
    exact_rows_each(&a, &mut |r| {
        add_row(&mut t, &r, gpu);
        if t.rows() >= group_rows {
            flush(&mut t)?;
        }
        Ok(())
    })?;
    if t.rows() > 0 {
        flush(&mut t)?;
    }
    out.close()
}

/// One row of `ops` (`gpu`: the roofline's GPU, if known).
fn add_row(t: &mut Table, r: &InstanceRow, gpu: Option<&'static Gpu>) {
    let peak = gpu.and_then(|g| peak_of(g, r.table, r.input_type.as_deref()));
    t.int(const { column(OPS, "uid") }, i64::try_from(r.uid).ok())
        .str(const { column(OPS, "name") }, Some(r.name.as_bytes()))
        .str(
            const { column(OPS, "family") },
            Some(r.table.label().as_bytes()),
        )
        .boolean(const { column(OPS, "bwd") }, Some(r.bwd))
        .float(const { column(OPS, "flops") }, r.figures.map(|f| f.flops))
        .float(
            const { column(OPS, "bytes") },
            r.figures.and_then(|f| f.bytes),
        )
        .int(const { column(OPS, "kernel_time_ns") }, Some(r.kernel_ns))
        .str(
            const { column(OPS, "input_dims") },
            r.input_dims.as_deref().map(str::as_bytes),
        )
        .str(
            const { column(OPS, "input_type") },
            r.input_type.as_deref().map(str::as_bytes),
        )
        .int(const { column(OPS, "device") }, r.device)
        .str(const { column(OPS, "gpu") }, gpu.map(|g| g.key.as_bytes()))
        .str(
            const { column(OPS, "precision") },
            peak.map(|(p, _)| p.label().as_bytes()),
        )
        .float(const { column(OPS, "peak_tflops") }, peak.map(|(_, v)| v))
        .float(
            const { column(OPS, "bandwidth_tbs") },
            gpu.map(|g| g.device_bandwidth_tbs()),
        )
        .end_row();
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    use super::*;
    use crate::read::events::{read_trace_with, ReadOptions};

    /// Rows written as they come, a row group at a time: every row once, in file order,
    /// however the groups cut them.
    #[test]
    fn rows_are_written_a_group_at_a_time_in_order() {
        let op = |ts: u32| {
            format!(
                r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": {ts}, "dur": 1, "args": {{"Input Dims": [[64, 512], [64, 512], []], "Input type": ["float", "float", "Scalar"]}}}}"#
            )
        };
        let events: Vec<String> = (0..5).map(|i| op(10 * i)).collect();
        let scratch = crate::testing::scratch("parquet-ops-groups");
        let trace = scratch.join("t.json");
        std::fs::write(
            &trace,
            format!(r#"{{"traceEvents": [{}]}}"#, events.join(",")),
        )
        .unwrap();
        for (group_rows, groups) in [(2, 3), (GROUP_ROWS, 1)] {
            let mut collected = Collected::new(crate::read::attribution::Keep::Rows);
            read_trace_with(
                &trace,
                &mut collected,
                &mut |_| Ok(()),
                ReadOptions::default(),
            )
            .unwrap();
            let path = scratch.join(format!("ops-{group_rows}.parquet"));
            write_in_groups(collected, &path, (3, group_rows), &|| Ok(())).unwrap();
            let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
            assert_eq!(reader.metadata().num_row_groups(), groups);
            let uids: Vec<Field> = reader
                .get_row_iter(None)
                .unwrap()
                .map(|r| r.unwrap().get_column_iter().next().unwrap().1.clone())
                .collect();
            assert_eq!(uids, (0..5).map(Field::Long).collect::<Vec<_>>());
        }
    }
}

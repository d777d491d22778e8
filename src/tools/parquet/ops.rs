//! The `ops` table (docs/parquet.md): `kinetrace ops`' instance rows under the `exact`
//! rules, from the same attribution (`crate::read::attribution`, `crate::tools::ops`), read
//! on the pass that makes the other tables; with each row's peak and the GPU's bandwidth, the
//! roofline inputs of the peaks table. The roofline arithmetic itself is SQL over these
//! columns (docs/analysis.md), as `kinetrace.ops` does it in Python.

use crate::error::Result;
use crate::read::attribution::Collecting;
use crate::read::events::{Event, Visitor};
use crate::tools::ops::exact_rows_each;
use crate::tools::ops::roofline::{choose_gpu, peak_of};

use super::rows::Rows;
use super::table::{boolean, column, float, int, string, Def, Table};

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

/// A file's rows and what its `ops` table is made of, told by one read.
pub(crate) struct Reading {
    pub(crate) rows: Rows,
    pub(crate) ops: Collecting,
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

/// The `ops` table of a file's attribution, operators in file order. The rows are made
/// twice, none kept: first for the devices their kernels ran on (the GPU, as `kinetrace
/// ops` chooses it), then into the table.
pub(crate) fn ops_table(collected: Collecting) -> Table {
    let a = collected.attribution();
    let mut devices = Vec::new();
    exact_rows_each(&a, &mut |r| devices.extend(r.device));
    let gpu = choose_gpu(&a.devices, devices, None).gpu;
    let mut t = Table::new(OPS);
    exact_rows_each(&a, &mut |r| {
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
    });
    t
}

//! `ops`: how much work each CPU operator's GPU time did: FLOPs and bytes from the shapes
//! the trace records (`Input Dims`, `Input type`, `Concrete Inputs`), per operator family
//! (`gemm`, `elementwise`, `reduce`, `norm`, `conv`, `attention`; bytes per element in
//! `dtype`, the recorded inputs parsed by `args`), over the GPU time attribution
//! (`crate::read::attribution`) gives each operator.
//!
//! Under the `exact` rules (`exact`) each modelled operator is counted once, at the
//! outermost, its bytes from each tensor's own dtype. Under the `tracelens` rules the rows are TraceLens's per-instance family tables, quirks
//! included: every operator whose name has a model, at any depth (a `layer_norm` and the
//! `native_layer_norm` inside it both, on the same kernels), and for the families with a
//! backward table a second row per operator with a linked backward frame, timed by that
//! frame's kernels.

pub(crate) mod args;
mod attention;
mod conv;
mod coverage;
mod dtype;
mod elementwise;
mod exact;
mod extensions;
mod gemm;
pub(crate) mod groups;
mod memory;
mod norm;
pub(crate) mod peaks;
pub(crate) mod rates;
mod reduce;
pub(crate) mod roofline;

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::Result;
use crate::read::attribution::{attribute, tree, Attribution, Links, Op};
use crate::read::ranks::assign_ranks;
use crate::read::sources::{Reader, Sources};
use args::{Inputs, Model};
pub(crate) use coverage::Coverage;

/// An operator's work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Figures {
    pub(crate) flops: f64,
    /// `None` where a dtype's size is unknown.
    pub(crate) bytes: Option<f64>,
}

/// The family tables (TraceLens's sheet names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Table {
    Gemm,
    UnaryElementwise,
    BinaryElementwise,
    Normalization,
    Reduce,
    Conv,
    Sdpa,
    RmsNorm,
    InferenceAttention,
    Rope,
    /// `exact`: the softmax and its backward (no TraceLens table).
    Softmax,
    /// `exact`: row gathers (`index_select`, `gather`, `embedding`; no TraceLens table).
    Indexing,
    /// `exact`: an operator whose GPU work no model covers.
    Unmodelled,
}

impl Table {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Table::Gemm => "GEMM",
            Table::UnaryElementwise => "UnaryElementwise",
            Table::BinaryElementwise => "BinaryElementwise",
            Table::Normalization => "Normalization",
            Table::Reduce => "Reduce",
            Table::Conv => "CONV",
            Table::Sdpa => "SDPA",
            Table::RmsNorm => "RMSNorm",
            Table::InferenceAttention => "InferenceAttention",
            Table::Rope => "RoPE",
            Table::Softmax => "Softmax",
            Table::Indexing => "Indexing",
            Table::Unmodelled => "unmodelled",
        }
    }
}

type Compute = fn(&Inputs) -> Model<Figures>;

/// A family's model for one operator name: its table, forward figures and, for the
/// families with a backward table, the figures of its backward.
struct Family {
    table: Table,
    forward: Compute,
    backward: Option<Compute>,
}

const UNARY: [&str; 11] = [
    "aten::copy",
    "aten::copy_",
    "aten::clamp_min",
    "aten::clamp_min_",
    "aten::clamp_max",
    "aten::clamp_max_",
    "aten::sigmoid",
    "aten::rsqrt",
    "aten::silu",
    "aten::neg",
    "aten::pow",
];
const BINARY: [&str; 8] = [
    "aten::div",
    "aten::div_",
    "aten::mul",
    "aten::mul_",
    "aten::add",
    "aten::add_",
    "aten::sigmoid_backward",
    "aten::threshold_backward",
];
const REDUCE: [&str; 13] = [
    "aten::sum",
    "aten::mean",
    "aten::max",
    "aten::min",
    "aten::norm",
    "aten::linalg_norm",
    "aten::std",
    "aten::var",
    "aten::logsumexp",
    "aten::cumsum",
    "aten::cumprod",
    "aten::amin",
    "aten::amax",
];

fn family(name: &str) -> Option<Family> {
    let f = |table, forward: Compute| Family {
        table,
        forward,
        backward: None,
    };
    let with_bwd = |table, forward: Compute, backward: Compute| Family {
        table,
        forward,
        backward: Some(backward),
    };
    Some(match name {
        "aten::mm" => f(Table::Gemm, |i| gemm::mm(i, 0, false)),
        "aten::addmm" => f(Table::Gemm, |i| gemm::mm(i, 1, true)),
        "aten::bmm" => f(Table::Gemm, |i| gemm::bmm(i, 0, false)),
        "aten::baddbmm" => f(Table::Gemm, |i| gemm::bmm(i, 1, true)),
        "aten::_scaled_mm" => f(Table::Gemm, gemm::scaled_mm),
        n if UNARY.contains(&n) => f(Table::UnaryElementwise, elementwise::unary),
        n if BINARY.contains(&n) => f(Table::BinaryElementwise, elementwise::binary),
        n if is_resize(n) => f(Table::UnaryElementwise, elementwise::resize),
        "aten::cumsum" | "aten::cumprod" => with_bwd(
            Table::Reduce,
            |i| reduce::reduce(i, true),
            |i| reduce::reduce(i, true),
        ),
        n if REDUCE.contains(&n) => with_bwd(
            Table::Reduce,
            |i| reduce::reduce(i, false),
            |i| reduce::reduce(i, false),
        ),
        "aten::batch_norm"
        | "aten::native_batch_norm"
        | "aten::cudnn_batch_norm"
        | "aten::miopen_batch_norm" => f(Table::Normalization, norm::batch_norm),
        "aten::layer_norm" | "aten::native_layer_norm" => f(Table::Normalization, norm::layer_norm),
        "aten::native_batch_norm_backward" => f(Table::Normalization, norm::batch_norm_backward),
        "aten::convolution" => with_bwd(Table::Conv, conv::forward, conv::forward_backward),
        "aten::convolution_backward" => f(Table::Conv, conv::backward),
        "aten::_scaled_dot_product_flash_attention" => f(Table::Sdpa, |i| {
            attention::sdpa(i, &attention::Layout { causal_at: 4 })
        }),
        "aten::_scaled_dot_product_efficient_attention"
        | "aten::_scaled_dot_product_cudnn_attention" => f(Table::Sdpa, |i| {
            attention::sdpa(i, &attention::Layout { causal_at: 6 })
        }),
        _ => return extension(name),
    })
}

/// The vendor operators of `extensions`.
fn extension(name: &str) -> Option<Family> {
    let f = |table, forward: Compute| Family {
        table,
        forward,
        backward: None,
    };
    Some(match name {
        "aiter::gemm_a16w16" | "vllm::rocm_unquantized_gemm" => f(Table::Gemm, extensions::gemm_nk),
        "aiter::rms_norm" | "aiter::rmsnorm" => {
            f(Table::RmsNorm, |i| extensions::rms_norm(i, false))
        }
        "aiter::add_rmsnorm" | "aiter::rmsnorm2d_fwd_with_add_ck" => {
            f(Table::RmsNorm, |i| extensions::rms_norm(i, true))
        }
        "aiter::_groupnorm_run" => f(Table::Normalization, norm::batch_norm_training),
        "sglang::store_cache" => f(Table::InferenceAttention, extensions::store_cache),
        "sgl_kernel::rotary_embedding" => f(Table::Rope, extensions::rotary_embedding),
        "sgl_kernel::silu_and_mul" => f(Table::UnaryElementwise, extensions::silu_and_mul),
        _ => return None,
    })
}

fn is_resize(name: &str) -> bool {
    ["aten::replication_pad", "aten::upsample_nearest"]
        .iter()
        .any(|p| {
            name.strip_prefix(p)
                .is_some_and(|d| ["1d", "2d", "3d"].contains(&d))
        })
}

/// One operator instance's row of a family table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InstanceRow {
    /// Index of the operator's event in `traceEvents`.
    pub(crate) uid: u64,
    pub(crate) name: String,
    pub(crate) table: Table,
    /// A backward row: the forward operator's shapes, its backward frames' GPU time.
    pub(crate) bwd: bool,
    /// `None` for an unmodelled operator.
    pub(crate) figures: Option<Figures>,
    /// GPU busy time, µs, as TraceLens computes it (floats at absolute times).
    pub(crate) kernel_us: f64,
    /// GPU busy time, exact ns.
    pub(crate) kernel_ns: i64,
    /// The GPU activities timed (indices in `traceEvents`).
    pub(crate) kernel_uids: Vec<u64>,
    /// The operator's recorded `Input Dims` and `Input type`, as JSON text in one form
    /// (the attribution's, [`crate::json::compact`]).
    pub(crate) input_dims: Option<Box<str>>,
    pub(crate) input_type: Option<Box<str>>,
    /// `args.device` of the first GPU activity timed that has one.
    pub(crate) device: Option<i64>,
    /// A collective's row (the exact rules mark it: [`coverage::is_collective_operator`],
    /// [`coverage::names_a_collective`]).
    pub(crate) collective: bool,
}

fn row(
    a: &Attribution,
    op: &Op,
    table: Table,
    bwd: bool,
    figures: Option<Figures>,
    gpu: &[u32],
) -> InstanceRow {
    InstanceRow {
        uid: op.uid,
        name: a.name(op).to_string(),
        table,
        bwd,
        figures,
        kernel_us: tree::busy_us_float(&a.gpu_details, gpu),
        kernel_ns: tree::busy_ns(&a.gpu, gpu),
        kernel_uids: gpu.iter().map(|&g| a.gpu_details[g as usize].uid).collect(),
        input_dims: a.args(op).input_dims.as_deref().map(Box::from),
        input_type: a.args(op).input_type.as_deref().map(Box::from),
        device: gpu.iter().find_map(|&g| a.device(&a.gpu[g as usize])),
        collective: false,
    }
}

/// TraceLens's instance rows of the family tables for an attributed trace, in file order
/// of the operators (a forward row before its backward row).
pub(crate) fn tracelens_rows_of(a: &Attribution) -> Vec<InstanceRow> {
    let mut rows = Vec::new();
    for (i, op) in a.ops.iter().enumerate() {
        let Some(fam) = family(a.name(op)) else {
            continue;
        };
        let inputs = Inputs::of(a.args(op));
        if let Ok(figures) = (fam.forward)(&inputs) {
            rows.push(row(
                a,
                op,
                fam.table,
                false,
                Some(figures),
                &a.gpu(i as u32),
            ));
        }
        let Some(backward) = fam.backward else {
            continue;
        };
        if a.backward(i as u32).is_empty() {
            continue;
        }
        if let Ok(figures) = backward(&inputs) {
            rows.push(row(
                a,
                op,
                fam.table,
                true,
                Some(figures),
                &a.backward_gpu(i as u32),
            ));
        }
    }
    rows
}

/// The table of an operator the exact rules model: TraceLens's families, then the
/// memory-bound operators only these rules model.
fn exact_table(name: &str) -> Option<Table> {
    family(name)
        .map(|f| f.table)
        .or_else(|| memory::table(name))
}

/// The exact rules' figures of an operator, `None` when its name has no model.
fn exact_figures(name: &str, inputs: &Inputs) -> Option<Model<Figures>> {
    exact::figures(name, inputs).or_else(|| memory::figures(name, inputs))
}

/// What the exact rules read of each of a trace's names, worked out once per name (a trace
/// has millions of operators and a few hundred names): the table it is modelled under, and
/// (once a row is made: `diff`'s FLOPs make none) whether it names a collective's GPU
/// activity.
struct Names {
    tables: Vec<Option<Table>>,
    collective: std::cell::OnceCell<Vec<bool>>,
}

impl Names {
    fn of(a: &Attribution) -> Names {
        Names {
            tables: a.names.iter().map(|n| exact_table(n)).collect(),
            collective: std::cell::OnceCell::new(),
        }
    }

    fn table(&self, op: &Op) -> Option<Table> {
        self.tables[op.name as usize]
    }

    /// Whether an operator has an operator the exact rules model above it.
    fn under_a_model(&self, a: &Attribution, op: &Op) -> bool {
        let mut up = op.parent();
        while let Some(p) = up {
            let parent = &a.ops[p as usize];
            if self.table(parent).is_some() {
                return true;
            }
            up = parent.parent();
        }
        false
    }

    /// A row of `row`'s, marked a collective's where its operator or one of its activities
    /// names one.
    fn row(
        &self,
        a: &Attribution,
        op: &Op,
        table: Table,
        figures: Option<Figures>,
        gpu: &[u32],
    ) -> InstanceRow {
        let collective = self.collective.get_or_init(|| {
            let names = a.names.iter();
            names.map(|n| coverage::names_a_collective(n)).collect()
        });
        let mut r = row(a, op, table, false, figures, gpu);
        r.collective = coverage::is_collective_operator(a.name(op))
            || gpu
                .iter()
                .any(|&g| collective[a.gpu[g as usize].name as usize]);
        r
    }
}

/// The GPU activities an operator launched itself: its subtree's less its child operators'.
fn own_gpu(a: &Attribution, i: u32) -> Vec<u32> {
    let below = a.union_gpu(a.children(i));
    let mut own = a.gpu(i);
    own.retain(|g| below.binary_search(g).is_err());
    own
}

/// The `exact` rules' rows (see `exact`): each modelled operator once, at the outermost;
/// an operator no model covers that launched GPU work itself, or a modelled one whose
/// inputs its model cannot read, as an `Unmodelled` row timed by that work. Every GPU
/// activity under an operator is in exactly one row.
pub(crate) fn exact_rows_of(a: &Attribution) -> Vec<InstanceRow> {
    let mut rows = Vec::new();
    let _ = exact_rows_each(a, &mut |row| {
        rows.push(row);
        Ok(())
    });
    rows
}

/// [`exact_rows_of`]'s rows one at a time, in its order (none kept: `parquet` writes each
/// as it comes); an error from `each` stops them.
pub(crate) fn exact_rows_each(
    a: &Attribution,
    each: &mut dyn FnMut(InstanceRow) -> Result<()>,
) -> Result<()> {
    let names = Names::of(a);
    for (i, op) in a.ops.iter().enumerate() {
        let i = i as u32;
        if names.under_a_model(a, op) {
            continue;
        }
        match names.table(op) {
            Some(table) => match exact_figures(a.name(op), &Inputs::of(a.args(op))) {
                Some(Ok(figures)) => each(names.row(a, op, table, Some(figures), &a.gpu(i)))?,
                // Its inputs are not what its model reads: its GPU work is still reported.
                _ if a.has_gpu(i) => each(names.row(a, op, Table::Unmodelled, None, &a.gpu(i)))?,
                _ => {}
            },
            None if a.has_gpu(i) => {
                let own = own_gpu(a, i);
                if !own.is_empty() {
                    each(names.row(a, op, Table::Unmodelled, None, &own))?;
                }
            }
            None => {}
        }
    }
    Ok(())
}

/// Per operator the `exact` rules model with figures (each at the outermost, its model
/// reading its inputs: the rows [`exact_rows_each`] gives a table other than `Unmodelled`),
/// its start (ns) and its FLOPs, in file order: what `diff` counts per step. Operators of
/// one name and argument set are modelled once.
pub(crate) fn modelled_flops(a: &Attribution) -> Vec<(i64, f64)> {
    let mut modelled: HashMap<(u32, u32), Option<f64>> = HashMap::new();
    let names = Names::of(a);
    a.ops
        .iter()
        .filter(|op| names.table(op).is_some() && !names.under_a_model(a, op))
        .filter_map(|op| {
            let flops =
                *modelled.entry((op.name, op.args)).or_insert_with(|| {
                    match exact_figures(a.name(op), &Inputs::of(a.args(op))) {
                        Some(Ok(figures)) => Some(figures.flops),
                        _ => None,
                    }
                });
            Some((op.start, flops?))
        })
        .collect()
}

/// Which figures `ops` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rules {
    Exact,
    TraceLens,
}

impl Rules {
    /// How the rules link launches to GPU activities: TraceLens through the flows alone.
    pub(crate) fn links(self) -> Links {
        match self {
            Rules::Exact => Links::FlowsThenCorrelation,
            Rules::TraceLens => Links::Flows,
        }
    }
}

/// The rows of one trace, the GPU their roofline is drawn against, and (exact rules) how
/// much of their GPU time has a model.
pub(crate) struct Report {
    pub(crate) rows: Vec<InstanceRow>,
    pub(crate) gpu: roofline::GpuChoice,
    pub(crate) coverage: Option<Coverage>,
}

/// The instance rows of an attributed trace under `rules`, and its GPU (`gpu`, from
/// `--gpu`, overrides the trace's `deviceProperties`).
pub(crate) fn report_of(a: &Attribution, rules: Rules, gpu: Option<&'static peaks::Gpu>) -> Report {
    let rows = match rules {
        Rules::Exact => exact_rows_of(a),
        Rules::TraceLens => tracelens_rows_of(a),
    };
    let devices = rows.iter().filter_map(|r| r.device).collect();
    let gpu = roofline::choose_gpu(&a.devices, devices, gpu);
    // TraceLens's rows count nested operators twice: no split of the time.
    let coverage = (rules == Rules::Exact).then(|| Coverage::of(&rows));
    Report {
        rows,
        gpu,
        coverage,
    }
}

/// One rank's trace file and its [`Report`].
pub(crate) struct RankReport {
    pub(crate) source: PathBuf,
    pub(crate) rank: i64,
    pub(crate) report: Report,
}

/// [`report_of`] each trace at `paths` (one rank each), the files read on `threads` threads
/// of the one sources pool (`read/sources.rs`), `progress` told the bytes read between
/// waits (its error stops them all). Ranks as `merge` and `summary` find them (refused
/// where two files claim one), in rank order.
pub(crate) fn reports(
    paths: &[PathBuf],
    rules: Rules,
    gpu: Option<&'static peaks::Gpu>,
    threads: usize,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<Vec<RankReport>> {
    let sources = Sources::new(paths, threads, 0);
    let options = sources.read_options;
    let work = |i: usize, reader: &Reader<'_, _>| {
        let a = attribute(&paths[i], options, rules.links(), &mut reader.reading())?;
        Ok((a.distributed_rank, report_of(&a, rules, gpu)))
    };
    let found = sources.each(&work, progress)?;
    let distributed: Vec<Option<i64>> = found.iter().map(|(rank, _)| *rank).collect();
    let ranks = assign_ranks(paths, &distributed, "give ops one rank's file at a time")?;
    let mut out: Vec<RankReport> = found
        .into_iter()
        .zip(ranks)
        .zip(paths)
        .map(|(((_, report), (rank, _)), source)| RankReport {
            source: source.clone(),
            rank,
            report,
        })
        .collect();
    out.sort_by_key(|r| r.rank);
    Ok(out)
}

/// The [`Report`] of a trace whose text is `text` (written in a scratch folder named
/// `scratch`) under `rules`: what the rules' unit tests read.
#[cfg(test)]
pub(crate) fn report_of_text(scratch: &str, text: &str, rules: Rules) -> Report {
    let dir = crate::testing::scratch(scratch);
    let path = dir.join("t.json");
    std::fs::write(&path, text).unwrap();
    let found = reports(std::slice::from_ref(&path), rules, None, 1, &mut |_| Ok(()));
    found.unwrap().remove(0).report
}

#[cfg(test)]
mod peaks_tests;
#[cfg(test)]
mod reference_tests;

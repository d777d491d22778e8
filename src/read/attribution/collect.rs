//! What attribution keeps of each event, in one streaming pass: host events (CPU operators
//! and runtime calls) with the few arguments the operator tools read, GPU activities with
//! their times, and the ends of the launch flows. Nothing of the rest of an event's text:
//! a fixed-size record per event in flat lists (no allocation per event), names, threads,
//! argument texts and argument sets numbered once each.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::Result;
use crate::json::compact::compact;
use crate::json::decimal::{ns_of, whole_number};
use crate::json::object::{member, string_body, unescaped, Duplicates};
use crate::read::categories::{is_memory_category, GPU_CATS, RUNTIME_CATS};
use crate::read::events::{Event, Visitor, SLOT_DUR, SLOT_ID, SLOT_TS};
use crate::read::hash::Fast;
use crate::read::ranks::distributed_rank;

/// The arguments of a CPU operator the operator tools read, as JSON text in one form (the
/// whitespace between tokens dropped, [`crate::json::compact`]: a trace that prints shapes
/// over several lines groups with one that does not, in `ops` and `diff` alike), each text
/// shared by the operators that have it (the instances of an operator repeat their shapes:
/// one copy, not ~50 bytes and an allocation per operator and argument). Whole sets are
/// shared too: an operator holds the index of its set ([`Op::args`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct OpArgs {
    pub(crate) input_dims: Option<Arc<str>>,
    pub(crate) input_type: Option<Arc<str>>,
    pub(crate) concrete_inputs: Option<Arc<str>>,
    pub(crate) input_strides: Option<Arc<str>>,
}

impl OpArgs {
    /// The set's identity: its texts' addresses (equal texts are one `Arc`).
    fn key(&self) -> [usize; 4] {
        let at = |t: &Option<Arc<str>>| {
            t.as_ref()
                .map_or(0, |t| Arc::as_ptr(t).cast::<u8>() as usize)
        };
        [
            at(&self.input_dims),
            at(&self.input_type),
            at(&self.concrete_inputs),
            at(&self.input_strides),
        ]
    }
}

/// "None" of the u32 indices below (a trace has fewer than 2^32 - 1 of each).
pub(crate) const NONE: u32 = u32::MAX;

/// One CPU operator: as read, then (`tree::build`) placed in the call tree. 48 bytes; the
/// parent is [`NONE`] where absent (read it through the method). Its `Sequence number`, which
/// only the backward links need, is kept apart ([`Collected::sequences`]).
#[derive(Debug, Clone)]
pub(crate) struct Op {
    /// Index of the event in `traceEvents`.
    pub(crate) uid: u64,
    /// Exact start and end, ns.
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// Its own CPU time (ns): its duration less that of the operators nested in it (on its
    /// thread, each clipped to it).
    pub(crate) self_ns: i64,
    /// Index into the names.
    pub(crate) name: u32,
    pub(crate) thread: u32,
    /// Index of its argument set (`Attribution::args`).
    pub(crate) args: u32,
    parent: u32,
}

impl Op {
    /// The nearest enclosing operator (index into the operators).
    pub(crate) fn parent(&self) -> Option<u32> {
        (self.parent != NONE).then_some(self.parent)
    }

    pub(crate) fn set_parent(&mut self, parent: u32) {
        self.parent = parent;
    }
}

/// One runtime call (`cuda_runtime`, `cuda_driver`): what nesting and the launch links
/// need, no more (48 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runtime {
    pub(crate) uid: u64,
    pub(crate) start: i64,
    pub(crate) end: i64,
    correlation: i64,
    external_id: i64,
    pub(crate) thread: u32,
    flags: u8,
}

const HAS_CORRELATION: u8 = 1;
const HAS_EXTERNAL_ID: u8 = 2;
const GRAPH_LAUNCH: u8 = 4;
/// `args` is an object the reader read to its end: `summary` reads a correlation (and a
/// stream) only then ([`ArgTexts::whole`]).
const ARGS_WHOLE: u8 = 8;
/// A GPU activity whose category names memory (`gpu_memcpy`, `gpu_memset`, `Memcpy`...).
const MEMORY_CATEGORY: u8 = 16;

/// The correlation `summary`'s exact rules read of an event: its `correlation`, only where
/// `args` was read whole and the value is not -1 (which `summary` reads as none).
fn summary_correlation(correlation: i64, flags: u8) -> Option<i64> {
    let both = HAS_CORRELATION | ARGS_WHOLE;
    (flags & both == both && correlation != -1).then_some(correlation)
}

/// The two link values of a launch or an activity, packed.
fn pack(correlation: Option<i64>, external_id: Option<i64>) -> (i64, i64, u8) {
    let flags = u8::from(correlation.is_some()) * HAS_CORRELATION
        + u8::from(external_id.is_some()) * HAS_EXTERNAL_ID;
    (correlation.unwrap_or(0), external_id.unwrap_or(0), flags)
}

/// The value that links a launch to its GPU activity.
fn link_of(by_correlation: bool, (correlation, external_id, flags): (i64, i64, u8)) -> Option<i64> {
    if by_correlation {
        (flags & HAS_CORRELATION != 0).then_some(correlation)
    } else {
        (flags & HAS_EXTERNAL_ID != 0).then_some(external_id)
    }
}

impl Runtime {
    pub(crate) fn link(&self, by_correlation: bool) -> Option<i64> {
        link_of(
            by_correlation,
            (self.correlation, self.external_id, self.flags),
        )
    }

    /// A graph launch: it takes every GPU activity of its correlation.
    pub(crate) fn is_graph_launch(&self) -> bool {
        self.flags & GRAPH_LAUNCH != 0
    }

    /// Whether it carries `correlation`, where it carries either link value.
    pub(crate) fn links_by_correlation(&self) -> Option<bool> {
        (self.flags & (HAS_CORRELATION | HAS_EXTERNAL_ID) != 0)
            .then_some(self.flags & HAS_CORRELATION != 0)
    }

    /// The correlation `summary` reads of it (its launch time is that correlation's).
    pub(crate) fn summary_correlation(&self) -> Option<i64> {
        summary_correlation(self.correlation, self.flags)
    }
}

/// A runtime event the call tree leaves out (not a complete `X` event with a `dur`) that
/// `summary` reads a launch time of: (event index, correlation, start in ns). Few traces
/// have any.
pub(crate) type OtherLaunch = (u64, i64, i64);

/// One GPU activity (kernel, memcpy, memset): its exact times and name (24 bytes). What
/// links it to its launch is apart ([`GpuLink`]), dropped once linked; so is what only
/// `ops`' rows read of it ([`GpuDetail`]), kept only when asked for ([`Keep::Rows`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuEvent {
    /// Exact times in ns.
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// Index into the names (shared with the operators').
    pub(crate) name: u32,
    /// `args.device`, an index into `Attribution::device_ids` ([`NONE`]: none).
    pub(crate) device: u32,
}

/// What `ops`' rows read of a GPU activity beyond [`GpuEvent`] (24 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuDetail {
    /// Index of the event in `traceEvents`.
    pub(crate) uid: u64,
    /// `ts` and `dur` in µs as floats (how float-based tools such as TraceLens see them).
    pub(crate) ts_us: f64,
    pub(crate) dur_us: f64,
}

/// What a pass keeps beyond the call tree and each activity's exact times: `Rows` what
/// `ops`' rows read (each activity's uid and float times, each operator's `Sequence
/// number` for the backward links); `Groups` nothing more (`diff`'s operator groups read
/// neither): 24 bytes less per GPU activity and 16 per operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Keep {
    #[default]
    Rows,
    Groups,
}

/// How launches find their GPU activities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Links {
    /// Through the `ac2g` flows only (graph launches by correlation): TraceLens's reading,
    /// where an activity whose flow is missing or malformed belongs to no launch.
    Flows,
    /// Through the flows, and an activity no flow reaches by its correlation: the first
    /// runtime call (in file order) with that correlation launched it, as `summary` reads
    /// the launch of an activity.
    #[default]
    FlowsThenCorrelation,
}

/// What links a GPU activity to its launch (its thread and link values), and what
/// `summary`'s figures read of it beyond [`GpuEvent`] (its stream, whether its category
/// names memory), so that `diff` makes both from one record set (32 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuLink {
    correlation: i64,
    external_id: i64,
    /// `args.stream` as `summary` reads it (-1: none, or `args` not read whole).
    stream: i64,
    pub(crate) thread: u32,
    flags: u8,
}

impl GpuLink {
    pub(crate) fn link(&self, by_correlation: bool) -> Option<i64> {
        link_of(
            by_correlation,
            (self.correlation, self.external_id, self.flags),
        )
    }

    pub(crate) fn correlation(&self) -> Option<i64> {
        (self.flags & HAS_CORRELATION != 0).then_some(self.correlation)
    }

    /// The correlation `summary` reads of it (-1 for none).
    pub(crate) fn summary_correlation(&self) -> i64 {
        summary_correlation(self.correlation, self.flags).unwrap_or(-1)
    }

    /// `args.stream` as `summary` reads it (-1 for none).
    pub(crate) fn stream(&self) -> i64 {
        self.stream
    }

    /// Its category names memory (`summary` counts it as memory, whatever its name).
    pub(crate) fn memory_category(&self) -> bool {
        self.flags & MEMORY_CATEGORY != 0
    }
}

/// One entry of the trace's top-level `deviceProperties` (what the roofline needs of it).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Device {
    pub(crate) id: Option<i64>,
    pub(crate) name: String,
    pub(crate) total_memory: Option<u64>,
    pub(crate) sms: Option<u32>,
}

/// The objects of a JSON array as written (strings skipped over, so a brace inside one is
/// text); nothing of anything else.
fn array_objects(raw: &[u8]) -> Vec<&[u8]> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in raw.iter().enumerate() {
        if in_string {
            (in_string, escaped) = (escaped || b != b'"', !escaped && b == b'\\');
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth == 2 && b == b'{' {
                    start = i;
                }
            }
            b'}' | b']' => {
                if depth == 2 && b == b'}' {
                    out.push(&raw[start..=i]);
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    out
}

/// The entries of a `deviceProperties` value; nothing where it is not a list of objects.
pub(crate) fn devices_of(raw: &[u8]) -> Vec<Device> {
    let number = |obj: &[u8], key: &[u8]| member(obj, key, Duplicates::Last).and_then(whole_number);
    array_objects(raw)
        .into_iter()
        .map(|obj| Device {
            id: number(obj, b"id"),
            name: member(obj, b"name", Duplicates::Last)
                .and_then(string_body)
                .and_then(unescaped)
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default(),
            total_memory: number(obj, b"totalGlobalMem").and_then(|n| u64::try_from(n).ok()),
            sms: number(obj, b"numSms").and_then(|n| u32::try_from(n).ok()),
        })
        .collect()
}

/// Host categories that make up the call tree, with the runtime calls
/// ([`RUNTIME_CATS`]); an operator owns the time of GPU activities ([`GPU_CATS`]): the
/// categories `summary` counts (MTIA's and the 2021 format's too).
const OP_CATS: [&str; 1] = ["cpu_op"];

/// Names of the graph launches: each takes every GPU activity of its correlation.
const GRAPH_LAUNCHES: [&str; 2] = ["cudaGraphLaunch", "hipGraphLaunch"];

/// Everything one pass keeps: per event a fixed-size record in one of a few flat lists,
/// names and argument texts once each.
#[derive(Default)]
pub(crate) struct Collected {
    pub(crate) keep: Keep,
    pub(crate) links: Links,
    pub(crate) names: Vec<Box<str>>,
    name_ids: HashMap<Box<[u8]>, u32, Fast>,
    thread_ids: HashMap<Box<[u8]>, u32, Fast>,
    /// The CPU operators, in file order.
    pub(crate) ops: Vec<Op>,
    pub(crate) runtime: Vec<Runtime>,
    pub(crate) gpu: Vec<GpuEvent>,
    /// Beside `gpu`, one each.
    pub(crate) gpu_links: Vec<GpuLink>,
    /// Beside `gpu`, one each under [`Keep::Rows`]; empty under [`Keep::Groups`].
    pub(crate) gpu_details: Vec<GpuDetail>,
    /// (operator, `Sequence number`) of the operators that have one, in order, under
    /// [`Keep::Rows`]; empty under [`Keep::Groups`].
    pub(crate) sequences: Vec<(u32, i64)>,
    /// Flow `id`s of `ac2g` starts.
    pub(crate) flow_starts: Vec<i64>,
    /// (flow `id`, thread) of `ac2g` ends, in file order (the last end of an `id` counts).
    pub(crate) flow_ends: Vec<(i64, u32)>,
    /// (index into `gpu`, `args.bytes`) of the activities whose category names memory and
    /// that have a whole number of bytes, ascending (`diff`'s bytes copied per step).
    pub(crate) memory_bytes: Vec<(u32, i64)>,
    /// The runtime events left out of `runtime` that `summary` reads a launch time of.
    pub(crate) other_launches: Vec<OtherLaunch>,
    /// Whether the first launching runtime call carries `correlation` (else `External id`
    /// links launches to GPU work); `None` until one is met.
    pub(crate) link_by_correlation: Option<bool>,
    /// The trace's `deviceProperties`.
    pub(crate) devices: Vec<Device>,
    /// `distributedInfo.rank`, when an integer.
    pub(crate) distributed_rank: Option<i64>,
    /// The distinct `args.device` values of the GPU activities.
    pub(crate) device_ids: Vec<i64>,
    /// The operators' argument texts met so far (see [`OpArgs`]).
    texts: Texts,
    /// The distinct argument sets, and each one's index by its key.
    pub(crate) args: Vec<OpArgs>,
    arg_ids: HashMap<[usize; 4], u32, Fast>,
}

/// Integer members of `args` the tree needs, and the operator arguments.
#[derive(Default)]
struct ArgsRead {
    correlation: Option<i64>,
    external_id: Option<i64>,
    sequence: Option<i64>,
    device: Option<i64>,
    /// A memory activity's `bytes`.
    bytes: Option<i64>,
    /// `args.stream` as `summary` reads it: -1 where missing or `args` was not read whole.
    stream: i64,
    /// [`ARGS_WHOLE`] where `args` was read whole.
    whole: u8,
    op: OpArgs,
}

fn text_of(value: &[u8]) -> Box<str> {
    String::from_utf8_lossy(value).into()
}

/// The operators' argument texts: each as written, and each in its one form, once.
#[derive(Default)]
struct Texts {
    /// Text as written -> its form.
    written: HashMap<Box<[u8]>, Arc<str>, Fast>,
    /// The forms met so far (two writings of one value share one).
    forms: HashSet<Arc<str>, Fast>,
}

impl Texts {
    /// The form of `value` ([`crate::json::compact`]), shared with an equal one already met.
    fn shared(&mut self, value: &[u8]) -> Arc<str> {
        if let Some(known) = self.written.get(value) {
            return Arc::clone(known);
        }
        let compacted = compact(value);
        let form = String::from_utf8_lossy(&compacted);
        let shared = match self.forms.get(form.as_ref()) {
            Some(known) => Arc::clone(known),
            None => {
                let new: Arc<str> = form.into();
                self.forms.insert(Arc::clone(&new));
                new
            }
        };
        self.written.insert(value.into(), Arc::clone(&shared));
        shared
    }
}

/// What the tree needs of an event's `args`, with `texts` an operator's argument texts
/// too. A runtime call's or a GPU activity's from the texts the event's visitors share
/// ([`Event::arg_texts`]: summary reads them too); an operator's in a pass of their own.
fn read_args(ev: &Event<'_>, texts: Option<&mut Texts>) -> ArgsRead {
    let Some(texts) = texts else {
        let a = ev.arg_texts();
        return ArgsRead {
            correlation: a.correlation.and_then(whole_number),
            external_id: a.external_id.and_then(whole_number),
            sequence: a.sequence.and_then(whole_number),
            device: a.device.and_then(whole_number),
            bytes: a.bytes.and_then(whole_number),
            stream: a.summary_stream(),
            whole: if a.whole { ARGS_WHOLE } else { 0 },
            op: OpArgs::default(),
        };
    };
    let mut out = ArgsRead::default();
    let Some(args) = ev.args() else {
        return out;
    };
    let mut text = |value: &[u8]| Some(texts.shared(value));
    let _ = crate::json::object::for_each_member(args, |key, value| match key {
        b"correlation" => out.correlation = whole_number(value),
        b"External id" => out.external_id = whole_number(value),
        b"Sequence number" => out.sequence = whole_number(value),
        b"device" => out.device = whole_number(value),
        b"Input Dims" => out.op.input_dims = text(value),
        b"Input type" => out.op.input_type = text(value),
        b"Concrete Inputs" => out.op.concrete_inputs = text(value),
        b"Input Strides" => out.op.input_strides = text(value),
        _ => {}
    });
    out
}

/// Index of `value` in `values`, added at the end if new (a trace has a few).
fn small_index(values: &mut Vec<i64>, value: i64) -> u32 {
    match values.iter().position(|&v| v == value) {
        Some(i) => i as u32,
        None => {
            values.push(value);
            values.len() as u32 - 1
        }
    }
}

impl Collected {
    pub(crate) fn new(keep: Keep) -> Collected {
        Collected {
            keep,
            ..Collected::default()
        }
    }

    fn name_id(&mut self, name: &[u8]) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.name_ids.insert(name.into(), id);
        self.names.push(text_of(name));
        id
    }

    fn thread_id(&mut self, key: &[u8]) -> u32 {
        if let Some(&id) = self.thread_ids.get(key) {
            return id;
        }
        let id = self.thread_ids.len() as u32;
        self.thread_ids.insert(key.into(), id);
        id
    }

    /// Drops what only the read needs (the lookups of names, threads and texts).
    pub(crate) fn drop_lookups(&mut self) {
        self.name_ids = HashMap::default();
        self.thread_ids = HashMap::default();
        self.texts = Texts::default();
        self.arg_ids = HashMap::default();
    }

    fn args_id(&mut self, args: OpArgs) -> u32 {
        let key = args.key();
        if let Some(&id) = self.arg_ids.get(&key) {
            return id;
        }
        let id = self.args.len() as u32;
        self.arg_ids.insert(key, id);
        self.args.push(args);
        id
    }

    fn flow(&mut self, ev: &Event<'_>) {
        let Some(id) = ev.value_text(SLOT_ID).and_then(whole_number) else {
            return;
        };
        match ev.ph {
            b"s" => self.flow_starts.push(id),
            b"f" => {
                let thread = self.thread_id(ev.thread_key);
                self.flow_ends.push((id, thread));
            }
            _ => {}
        }
    }

    fn op(&mut self, ev: &Event<'_>, start: i64, end: i64) {
        let args = read_args(ev, Some(&mut self.texts));
        let (name, thread) = (self.name_id(ev.name), self.thread_id(ev.thread_key));
        let set = self.args_id(args.op);
        if let (Keep::Rows, Some(sequence)) = (self.keep, args.sequence) {
            self.sequences.push((self.ops.len() as u32, sequence));
        }
        self.ops.push(Op {
            uid: ev.index,
            start,
            end,
            self_ns: end - start,
            name,
            thread,
            args: set,
            parent: NONE,
        });
    }

    fn runtime(&mut self, ev: &Event<'_>, start: i64, end: i64) {
        let args = read_args(ev, None);
        if self.link_by_correlation.is_none() {
            let launch = String::from_utf8_lossy(ev.name).to_lowercase();
            if launch.contains("launch") {
                self.link_by_correlation = Some(args.correlation.is_some());
            }
        }
        let (correlation, external_id, mut flags) = pack(args.correlation, args.external_id);
        flags |= args.whole;
        if GRAPH_LAUNCHES.iter().any(|g| g.as_bytes() == ev.name) {
            flags |= GRAPH_LAUNCH;
        }
        let thread = self.thread_id(ev.thread_key);
        self.runtime.push(Runtime {
            uid: ev.index,
            start,
            end,
            correlation,
            external_id,
            thread,
            flags,
        });
    }

    /// A runtime event the call tree leaves out: kept only if `summary` reads a launch
    /// time of it (a correlation and a `ts`).
    fn other_runtime(&mut self, ev: &Event<'_>) {
        let correlation = ev.arg_texts().summary_correlation();
        if correlation == -1 {
            return;
        }
        if let Some(start) = ns_of(ev.value_text(SLOT_TS)) {
            self.other_launches.push((ev.index, correlation, start));
        }
    }

    fn gpu_event(&mut self, ev: &Event<'_>, cat: &str, start: i64, end: i64) {
        let args = read_args(ev, None);
        let (name, thread) = (self.name_id(ev.name), self.thread_id(ev.thread_key));
        let memory = is_memory_category(cat);
        if let (true, Some(bytes)) = (memory, args.bytes) {
            self.memory_bytes.push((self.gpu.len() as u32, bytes));
        }
        let device = args
            .device
            .map_or(NONE, |d| small_index(&mut self.device_ids, d));
        self.gpu.push(GpuEvent {
            start,
            end,
            name,
            device,
        });
        if self.keep == Keep::Rows {
            self.gpu_details.push(GpuDetail {
                uid: ev.index,
                ts_us: ev.ts.unwrap_or(0.0),
                dur_us: ev.dur.unwrap_or(0.0),
            });
        }
        let (correlation, external_id, mut flags) = pack(args.correlation, args.external_id);
        flags |= args.whole;
        if memory {
            flags |= MEMORY_CATEGORY;
        }
        self.gpu_links.push(GpuLink {
            correlation,
            external_id,
            stream: args.stream,
            thread,
            flags,
        });
    }
}

impl Visitor for Collected {
    fn header(&mut self, key: &[u8], raw: &[u8], _after_events: bool) -> Result<()> {
        if key == b"deviceProperties" {
            self.devices = devices_of(raw);
        } else if key == b"distributedInfo" {
            self.distributed_rank = distributed_rank(raw);
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        let Some(cat) = ev.cat else {
            return Ok(());
        };
        if cat == "ac2g" {
            self.flow(ev);
            return Ok(());
        }
        let times = (ev.ph == b"X")
            .then(|| {
                let start = ns_of(ev.value_text(SLOT_TS))?;
                let dur = ns_of(ev.value_text(SLOT_DUR))?;
                Some((start, start.saturating_add(dur)))
            })
            .flatten();
        let Some((start, end)) = times else {
            if RUNTIME_CATS.contains(&cat) {
                self.other_runtime(ev);
            }
            return Ok(());
        };
        if OP_CATS.contains(&cat) {
            self.op(ev, start, end);
        } else if RUNTIME_CATS.contains(&cat) {
            self.runtime(ev, start, end);
        } else if GPU_CATS.contains(&cat) {
            self.gpu_event(ev, cat, start, end);
        }
        Ok(())
    }
}

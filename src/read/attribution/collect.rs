//! What attribution keeps of each event, in one streaming pass: host events (CPU operators
//! and runtime calls) with the few arguments the operator tools read, GPU activities with
//! their times, and the ends of the launch flows. Nothing of the rest of an event's text.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::Result;
use crate::json::decimal::{ns_of, whole_number};
use crate::json::object::{member, string_body, unescaped, Duplicates};
use crate::read::events::{Event, Visitor, SLOT_DUR, SLOT_ID, SLOT_TS};
use crate::read::ranks::distributed_rank;

/// What a host event is to the call tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// `cpu_op`: a CPU operator.
    Op,
    /// `cuda_runtime` / `cuda_driver`: a call that may launch GPU work.
    Runtime,
}

/// The arguments of a CPU operator the operator tools read, as written (JSON text), each
/// text shared by the operators that have it (the instances of an operator repeat their
/// shapes: one copy, not ~50 bytes and an allocation per operator and argument).
#[derive(Debug, Clone, Default)]
pub(crate) struct OpArgs {
    pub(crate) input_dims: Option<Arc<str>>,
    pub(crate) input_type: Option<Arc<str>>,
    pub(crate) concrete_inputs: Option<Arc<str>>,
    pub(crate) input_strides: Option<Arc<str>>,
}

/// One host event as read.
#[derive(Debug, Clone)]
pub(crate) struct HostEvent {
    pub(crate) uid: u64,
    pub(crate) kind: HostKind,
    pub(crate) name: u32,
    /// The (pid, tid) it ran on, numbered in the order met.
    pub(crate) thread: u32,
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) correlation: Option<i64>,
    pub(crate) external_id: Option<i64>,
    pub(crate) sequence: Option<i64>,
    /// Only for [`HostKind::Op`].
    pub(crate) args: Option<Box<OpArgs>>,
}

/// One GPU activity (kernel, memcpy, memset).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuEvent {
    pub(crate) uid: u64,
    /// Index into the names (shared with the host events').
    pub(crate) name: u32,
    pub(crate) thread: u32,
    /// Exact times in ns.
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// `ts` and `dur` in µs as floats (how float-based tools such as TraceLens see them).
    pub(crate) ts_us: f64,
    pub(crate) dur_us: f64,
    pub(crate) correlation: Option<i64>,
    pub(crate) external_id: Option<i64>,
    /// `args.device`: the `id` of its `deviceProperties` entry.
    pub(crate) device: Option<i64>,
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

/// Host categories that make up the call tree.
const OP_CATS: [&str; 1] = ["cpu_op"];
const RUNTIME_CATS: [&str; 2] = ["cuda_runtime", "cuda_driver"];
/// GPU categories whose time an operator owns.
const GPU_CATS: [&str; 3] = ["kernel", "gpu_memcpy", "gpu_memset"];

/// Everything one pass keeps.
#[derive(Default)]
pub(crate) struct Collected {
    pub(crate) names: Vec<Box<str>>,
    name_ids: HashMap<Box<[u8]>, u32>,
    thread_ids: HashMap<Box<[u8]>, u32>,
    pub(crate) hosts: Vec<HostEvent>,
    pub(crate) gpu: Vec<GpuEvent>,
    /// Flow `id`s of `ac2g` starts.
    pub(crate) flow_starts: std::collections::HashSet<i64>,
    /// Flow `id` -> thread of its (last) `ac2g` end.
    pub(crate) flow_ends: HashMap<i64, u32>,
    /// Whether the first launching runtime call carries `correlation` (else `External id`
    /// links launches to GPU work); `None` until one is met.
    pub(crate) link_by_correlation: Option<bool>,
    /// The trace's `deviceProperties`.
    pub(crate) devices: Vec<Device>,
    /// `distributedInfo.rank`, when an integer.
    pub(crate) distributed_rank: Option<i64>,
    /// The operators' argument texts met so far (see [`OpArgs`]).
    pub(crate) texts: HashSet<Arc<str>>,
}

/// Integer members of `args` the tree needs, and the operator arguments.
#[derive(Default)]
struct ArgsRead {
    correlation: Option<i64>,
    external_id: Option<i64>,
    sequence: Option<i64>,
    device: Option<i64>,
    op: OpArgs,
}

fn text_of(value: &[u8]) -> Box<str> {
    String::from_utf8_lossy(value).into()
}

/// The text of `value`, shared with an equal one already met.
fn shared_text(texts: &mut HashSet<Arc<str>>, value: &[u8]) -> Arc<str> {
    let text = String::from_utf8_lossy(value);
    if let Some(known) = texts.get(text.as_ref()) {
        return Arc::clone(known);
    }
    let new: Arc<str> = text.into();
    texts.insert(Arc::clone(&new));
    new
}

fn read_args(raw: &[u8], texts: Option<&mut HashSet<Arc<str>>>) -> ArgsRead {
    let mut out = ArgsRead::default();
    let with_op_args = texts.is_some();
    let mut shared = texts;
    let mut text = |value: &[u8]| shared.as_deref_mut().map(|t| shared_text(t, value));
    let Some(args) = member(raw, b"args", Duplicates::Last) else {
        return out;
    };
    let _ = crate::json::object::for_each_member(args, |key, value| match key {
        b"correlation" => out.correlation = whole_number(value),
        b"External id" => out.external_id = whole_number(value),
        b"Sequence number" => out.sequence = whole_number(value),
        b"device" => out.device = whole_number(value),
        b"Input Dims" if with_op_args => out.op.input_dims = text(value),
        b"Input type" if with_op_args => out.op.input_type = text(value),
        b"Concrete Inputs" if with_op_args => out.op.concrete_inputs = text(value),
        b"Input Strides" if with_op_args => out.op.input_strides = text(value),
        _ => {}
    });
    out
}

impl Collected {
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

    fn flow(&mut self, ev: &Event<'_>) {
        let Some(id) = ev.value_text(SLOT_ID).and_then(whole_number) else {
            return;
        };
        match ev.ph {
            b"s" => {
                self.flow_starts.insert(id);
            }
            b"f" => {
                let thread = self.thread_id(ev.thread_key);
                self.flow_ends.insert(id, thread);
            }
            _ => {}
        }
    }

    fn host(&mut self, ev: &Event<'_>, kind: HostKind, start: i64, end: i64) {
        let texts = (kind == HostKind::Op).then_some(&mut self.texts);
        let args = read_args(ev.raw, texts);
        if kind == HostKind::Runtime && self.link_by_correlation.is_none() {
            let launch = String::from_utf8_lossy(ev.name).to_lowercase();
            if launch.contains("launch") {
                self.link_by_correlation = Some(args.correlation.is_some());
            }
        }
        let (name, thread) = (self.name_id(ev.name), self.thread_id(ev.thread_key));
        self.hosts.push(HostEvent {
            uid: ev.index,
            kind,
            name,
            thread,
            start,
            end,
            correlation: args.correlation,
            external_id: args.external_id,
            sequence: args.sequence,
            args: (kind == HostKind::Op).then(|| Box::new(args.op)),
        });
    }

    fn gpu_event(&mut self, ev: &Event<'_>, start: i64, end: i64) {
        let args = read_args(ev.raw, None);
        let (name, thread) = (self.name_id(ev.name), self.thread_id(ev.thread_key));
        self.gpu.push(GpuEvent {
            uid: ev.index,
            name,
            thread,
            start,
            end,
            ts_us: ev.ts.unwrap_or(0.0),
            dur_us: ev.dur.unwrap_or(0.0),
            correlation: args.correlation,
            external_id: args.external_id,
            device: args.device,
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
        if ev.ph != b"X" {
            return Ok(());
        }
        let (Some(start), Some(dur)) = (
            ns_of(ev.value_text(SLOT_TS)),
            ns_of(ev.value_text(SLOT_DUR)),
        ) else {
            return Ok(());
        };
        let end = start.saturating_add(dur);
        if OP_CATS.contains(&cat) {
            self.host(ev, HostKind::Op, start, end);
        } else if RUNTIME_CATS.contains(&cat) {
            self.host(ev, HostKind::Runtime, start, end);
        } else if GPU_CATS.contains(&cat) {
            self.gpu_event(ev, start, end);
        }
        Ok(())
    }
}

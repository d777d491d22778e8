//! What one trace file becomes: its events, flow ends and metadata events as rows of the
//! dataset's tables (docs/parquet.md), and its header; told by the crate's reader (a
//! [`Visitor`] over `read/events.rs`).

use std::borrow::Cow;

use crate::error::Result;
use crate::json::decimal::{ns_of, parse_int, whole_number};
use crate::json::object::{
    for_each_member, for_each_member_and_nested, member, member_value, string_body, unescaped,
    Duplicates,
};
use crate::read::events::{
    Event, Visitor, SLOT_CAT, SLOT_DUR, SLOT_ID, SLOT_NAME, SLOT_PH, SLOT_PID, SLOT_TID, SLOT_TS,
};
use crate::read::filter::Binder;
use crate::read::ranks::distributed_rank;

use super::runs::Runs;
use super::table::{column, int, joined, string, Def, Table, SEQ, TS};

/// The columns every row table (`events`, `flows`, `tracks`) starts with, in order
/// (docs/parquet.md); each table's own follow. `seq` and `ts_ns` are the sort key (`SEQ`,
/// `TS` in table.rs, checked below).
const SHARED: [Def; 12] = [
    int("seq"),
    string("ph"),
    string("name"),
    string("cat"),
    int("ts_ns"),
    int("dur_ns"),
    int("pid"),
    int("tid"),
    string("pid_text"),
    string("tid_text"),
    string("args"),
    string("extra"),
];
const _: () = assert!(column(&SHARED, "seq") == SEQ && column(&SHARED, "ts_ns") == TS);

/// The shared columns, by name.
const PH: usize = column(&SHARED, "ph");
const NAME: usize = column(&SHARED, "name");
const CAT: usize = column(&SHARED, "cat");
const DUR: usize = column(&SHARED, "dur_ns");
const PID: usize = column(&SHARED, "pid");
const TID: usize = column(&SHARED, "tid");
const PID_TEXT: usize = column(&SHARED, "pid_text");
const TID_TEXT: usize = column(&SHARED, "tid_text");
const ARGS: usize = column(&SHARED, "args");
const EXTRA: usize = column(&SHARED, "extra");

/// How a typed argument is kept.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Typed {
    /// A whole number (`json::decimal::whole_number`): an INT64 column.
    Int,
    /// A string's value.
    Str,
    /// The JSON text as written.
    Text,
}

/// An argument given a column of its own in `events`: its key in `args`, how it is kept, and
/// its column (named here once: `events`' typed columns are made from this list).
struct TypedArg {
    key: &'static [u8],
    typed: Typed,
    column: Def,
}

const fn typed(key: &'static [u8], typed: Typed, name: &'static str) -> TypedArg {
    let column = match typed {
        Typed::Int => int(name),
        Typed::Str | Typed::Text => string(name),
    };
    TypedArg { key, typed, column }
}

/// The args with a column of their own in `events`.
const TYPED_ARGS: [TypedArg; 13] = [
    typed(b"External id", Typed::Int, "external_id"),
    typed(b"correlation", Typed::Int, "correlation"),
    typed(b"stream", Typed::Int, "stream"),
    typed(b"device", Typed::Int, "device"),
    typed(b"grid", Typed::Text, "grid"),
    typed(b"block", Typed::Text, "block"),
    typed(b"Input Dims", Typed::Text, "input_dims"),
    typed(b"Collective name", Typed::Str, "collective_name"),
    typed(b"In msg nelems", Typed::Int, "in_msg_nelems"),
    typed(b"Out msg nelems", Typed::Int, "out_msg_nelems"),
    typed(b"Group size", Typed::Int, "group_size"),
    typed(b"dtype", Typed::Str, "dtype"),
    typed(b"Process Group Name", Typed::Str, "process_group_name"),
];

const fn typed_columns() -> [Def; TYPED_ARGS.len()] {
    let mut out = [int(""); TYPED_ARGS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = TYPED_ARGS[i].column;
        i += 1;
    }
    out
}

/// `events`' columns: the shared ones, then one per typed argument.
pub(crate) const EVENTS: &[Def] =
    &joined::<{ SHARED.len() + TYPED_ARGS.len() }>(&SHARED, &typed_columns());

/// Each typed argument's column in `events`, looked up by its name when the crate is
/// compiled.
const TYPED_COLUMNS: [usize; TYPED_ARGS.len()] = {
    let mut out = [0; TYPED_ARGS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = column(EVENTS, TYPED_ARGS[i].column.name);
        i += 1;
    }
    out
};

/// `flows`' columns: the shared ones, then its own.
pub(crate) const FLOWS: &[Def] =
    &joined::<{ SHARED.len() + 3 }>(&SHARED, &[string("id"), string("bp"), int("event_seq")]);
const FLOW_ID: usize = column(FLOWS, "id");
const FLOW_BP: usize = column(FLOWS, "bp");
const FLOW_EVENT: usize = column(FLOWS, "event_seq");

/// `tracks`' columns: the shared ones, then the value.
pub(crate) const TRACKS: &[Def] = &joined::<{ SHARED.len() + 1 }>(&SHARED, &[string("value")]);
const TRACK_VALUE: usize = column(TRACKS, "value");

/// Members of an event with a column of their own in every table.
const SHARED_KEYS: [&[u8]; 8] = [
    b"ph", b"name", b"cat", b"pid", b"tid", b"ts", b"dur", b"args",
];

/// What a trace file's header holds for the `meta` table.
#[derive(Default)]
pub(crate) struct Header {
    /// Every top-level member but `traceEvents`, as one JSON object's text.
    pub(crate) text: Vec<u8>,
    pub(crate) base_time_ns: Option<i64>,
    pub(crate) schema_version: Option<Vec<u8>>,
    pub(crate) device_properties: Option<Vec<u8>>,
    pub(crate) distributed_info: Option<Vec<u8>>,
    pub(crate) distributed_rank: Option<i64>,
}

/// A trace file as tables.
pub(crate) struct Rows {
    pub(crate) events: Table,
    pub(crate) flows: Table,
    pub(crate) tracks: Table,
    pub(crate) header: Header,
    /// Rows of `events`, `flows` and `tracks` so far, spilled ones included.
    counts: [u64; 3],
    /// Each table's rows spilled to disk, and the bytes in memory that make the largest
    /// table spill.
    pub(crate) runs: [Runs; 3],
    spill_bytes: usize,
    binder: Binder,
    extra: Vec<u8>,
}

/// The tables' folders, in the order of [`Rows::counts`] and [`Rows::runs`].
pub(crate) const TABLES: [&str; 3] = ["events", "flows", "tracks"];

impl Rows {
    /// Rows whose tables spill into `spill_dir` once they hold `spill_bytes` in memory.
    pub(crate) fn new(spill_dir: &std::path::Path, spill_bytes: usize) -> Rows {
        Rows {
            events: Table::new(EVENTS),
            flows: Table::new(FLOWS),
            tracks: Table::new(TRACKS),
            header: Header::default(),
            counts: [0; 3],
            runs: TABLES.map(|t| Runs::new(spill_dir.join(t))),
            spill_bytes,
            binder: Binder { last: None },
            extra: Vec::new(),
        }
    }

    /// Counts a row of table `which` and spills the largest table when memory is full.
    fn added(&mut self, which: usize) -> Result<()> {
        self.counts[which] += 1;
        let tables = [&self.events, &self.flows, &self.tracks];
        if tables.iter().map(|t| t.bytes()).sum::<usize>() < self.spill_bytes {
            return Ok(());
        }
        let largest = (0..3)
            .max_by_key(|&i| tables[i].bytes())
            .expect("three tables");
        let table = match largest {
            0 => &mut self.events,
            1 => &mut self.flows,
            _ => &mut self.tracks,
        };
        self.runs[largest].spill(table)
    }
}

/// A string's value, or a value's text as written.
fn text_of(value: &[u8]) -> Option<Cow<'_, [u8]>> {
    match string_body(value) {
        Some(body) => unescaped(body),
        None => Some(value.into()),
    }
}

/// An integer written as a number without fraction or exponent (`pid`, `tid`: the text of
/// any other is kept in their `_text` column).
fn int_of_number(value: &[u8]) -> Option<i64> {
    i64::try_from(parse_int(value)?).ok()
}

/// The typed arguments found in an event's `args` (of a key written twice, the last, as a
/// viewer reads it), by [`TYPED_ARGS`]' order.
type Found<'e> = [Option<&'e [u8]>; TYPED_ARGS.len()];

/// Fills the columns every table shares from `ev` (`own`: members with a column of the
/// table's own, kept out of `extra`); returns the `args` text as written and, when `typed`,
/// the typed arguments in it (one scan of the event for both).
fn shared<'e>(
    table: &mut Table,
    ev: &Event<'e>,
    own: &[&[u8]],
    extra: &mut Vec<u8>,
    typed: bool,
) -> (Option<&'e [u8]>, Found<'e>) {
    let mut args = None;
    // Each typed argument with the `args` object it came from (0 the first): of an `args`
    // written twice, only the last one's count, as for any key written twice.
    let mut found: [Option<(u32, &'e [u8])>; TYPED_ARGS.len()] = [None; TYPED_ARGS.len()];
    let args_seen = std::cell::Cell::new(0u32);
    extra.clear();
    let outer = |key: &'e [u8], value: &'e [u8]| {
        if key == b"args" {
            args = Some(value);
            args_seen.set(args_seen.get() + 1);
        } else if !SHARED_KEYS.contains(&key) && !own.contains(&key) {
            extra.extend_from_slice(if extra.is_empty() { b"{\"" } else { b", \"" });
            extra.extend_from_slice(key);
            extra.extend_from_slice(b"\": ");
            extra.extend_from_slice(value);
        }
    };
    let inner = |key: &'e [u8], value: &'e [u8]| {
        if let Some(i) = TYPED_ARGS.iter().position(|arg| arg.key == key) {
            found[i] = Some((args_seen.get(), value));
        }
    };
    if typed {
        for_each_member_and_nested(ev.raw, b"args", outer, inner);
    } else {
        for_each_member(ev.raw, outer);
    }
    if !extra.is_empty() {
        extra.push(b'}');
    }
    let text = |slot: usize| ev.value_text(slot).and_then(text_of);
    let (pid, tid) = (ev.value_text(SLOT_PID), ev.value_text(SLOT_TID));
    let (pid_int, tid_int) = (pid.and_then(int_of_number), tid.and_then(int_of_number));
    table
        .int(SEQ, Some(ev.index as i64))
        .str(PH, text(SLOT_PH).as_deref())
        .str(NAME, text(SLOT_NAME).as_deref())
        .str(CAT, text(SLOT_CAT).as_deref())
        .int(TS, ns_of(ev.value_text(SLOT_TS)))
        .int(DUR, ns_of(ev.value_text(SLOT_DUR)))
        .int(PID, pid_int)
        .int(TID, tid_int)
        .str(
            PID_TEXT,
            pid.filter(|_| pid_int.is_none())
                .and_then(text_of)
                .as_deref(),
        )
        .str(
            TID_TEXT,
            tid.filter(|_| tid_int.is_none())
                .and_then(text_of)
                .as_deref(),
        )
        .str(ARGS, args)
        .str(EXTRA, (!extra.is_empty()).then_some(&extra[..]));
    let last = args_seen.get().saturating_sub(1);
    let found = found.map(|f| f.filter(|(seen, _)| *seen == last).map(|(_, v)| v));
    (args, found)
}

/// Fills `events`' typed-argument columns, each found by its name.
fn typed_args(table: &mut Table, found: Found<'_>) {
    for ((arg, col), value) in TYPED_ARGS.iter().zip(TYPED_COLUMNS).zip(found) {
        match arg.typed {
            Typed::Int => {
                table.int(col, value.and_then(whole_number));
            }
            Typed::Str => {
                let value = value.and_then(|v| unescaped(string_body(v)?));
                table.str(col, value.as_deref());
            }
            Typed::Text => {
                table.str(col, value);
            }
        }
    }
}

impl Visitor for Rows {
    fn header(&mut self, key: &[u8], raw: &[u8], _after_events: bool) -> Result<()> {
        let h = &mut self.header;
        h.text
            .extend_from_slice(if h.text.is_empty() { b"{" } else { b", " });
        h.text.extend_from_slice(raw);
        let value = member_value(raw).unwrap_or_default();
        match key {
            b"baseTimeNanoseconds" => h.base_time_ns = whole_number(value),
            b"schemaVersion" => h.schema_version = Some(value.to_vec()),
            b"deviceProperties" => h.device_properties = Some(value.to_vec()),
            b"distributedInfo" => {
                h.distributed_info = Some(value.to_vec());
                h.distributed_rank = distributed_rank(raw);
            }
            _ => {}
        }
        Ok(())
    }

    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        if ev.is_metadata() {
            let (args, _) = shared(&mut self.tracks, ev, &[], &mut self.extra, false);
            let value = args.and_then(|a| {
                let v = member(a, b"name", Duplicates::Last)
                    .or_else(|| member(a, b"sort_index", Duplicates::Last))
                    .or_else(|| member(a, b"labels", Duplicates::Last))?;
                text_of(v)
            });
            self.tracks.str(TRACK_VALUE, value.as_deref()).end_row();
            self.added(2)?;
        } else if ev.is_flow() {
            shared(&mut self.flows, ev, &[b"id", b"bp"], &mut self.extra, false);
            let bp = member(ev.raw, b"bp", Duplicates::Last).and_then(text_of);
            let bound = self.binder.bound(ev).flatten();
            self.flows
                .str(FLOW_ID, ev.value_text(SLOT_ID).and_then(text_of).as_deref())
                .str(FLOW_BP, bp.as_deref())
                .int(FLOW_EVENT, bound)
                .end_row();
            self.added(1)?;
        } else {
            let (_, found) = shared(&mut self.events, ev, &[], &mut self.extra, true);
            typed_args(&mut self.events, found);
            self.events.end_row();
            self.added(0)?;
            self.binder.saw(ev, Some(ev.index as i64));
        }
        Ok(())
    }
}

impl Rows {
    /// The rows a file gave: events, flows, tracks.
    pub(crate) fn counts(&self) -> [u64; 3] {
        self.counts
    }
}

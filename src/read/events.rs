//! The events of a trace file, read in order: the top-level members other than
//! `traceEvents` (the *header*) and each element of `traceEvents` (an *event*), told to a
//! [`Visitor`] with the event's raw text and the fields `split` and `filter` decide on.
//!
//! Both forms of the Trace Event Format are read ([`Form`]): the JSON Object Format above,
//! and the JSON Array Format, a top level that is the array of events itself (no header;
//! its closing `]` may be missing, as the format allows). Its elements are told as those of
//! `traceEvents` are, with their index in the array. [`walk`] is the one place the top
//! level is decided.
//!
//! Reading is strict (the rules of [`crate::json::lexer`]) and streamed: `.json` or gzip with any
//! number of members, in bounded memory. Each event is scanned by the fast path of
//! [`crate::json::scan`] when it can be, else read by the lexer, which reports what is wrong with
//! it, naming the offset in the decompressed JSON and the event's index. A plain `.json`
//! of several chunks is scanned by worker threads (see "Reading in parallel" below), with
//! the same results and errors as one thread's read.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;

use crate::error::{panic_message, Error, Result};
use crate::error::{FormatKind, Invalid};
use crate::json::decimal::whole_number;
use crate::json::lexer::{Input, Kind, PResult, Stop, BUF_SIZE, STRING_CAP};
use crate::json::object::{for_each_member, member, Duplicates};
use crate::json::scan::{self, Scanner};
use crate::output::interrupt::POLL;
use crate::read::members::Source;

/// Deepest nesting accepted in the input.
const MAX_DEPTH: usize = 512;

/// Most bytes of one top-level member or one event: each is held in memory whole, so a
/// bigger one (or an endless one) is refused, at its offset, before memory runs out.
pub(crate) const MAX_VALUE: usize = 64 << 20;

/// A visitor's error: a fault it found in what it was told (a trace-format error with no
/// place, such as more text than it can keep) is placed at `at`, the offset of the member or
/// event; anything else stops the read as it is.
fn visitor_error<R: BufRead>(inp: &Input<'_, Source<R>>, at: u64, e: Error) -> Stop {
    match e {
        Error::TraceFormat(t) if t.offset.is_none() => inp.fault_at(at, t.kind, t.message),
        e => Stop::Fatal(e),
    }
}

/// One event as read, with its raw text.
pub(crate) struct Event<'a> {
    pub(crate) raw: &'a [u8],
    pub(crate) ph: &'a [u8],
    pub(crate) cat: Option<&'a str>,
    pub(crate) name: &'a [u8],
    /// `pid` and (`pid`, `tid`) as type-tagged keys (`1` and `"1"` differ).
    pub(crate) pid_key: &'a [u8],
    pub(crate) thread_key: &'a [u8],
    /// `ts` and `dur` in µs, when they are finite numbers.
    pub(crate) ts: Option<f64>,
    pub(crate) dur: Option<f64>,
    /// (`cat`, `id`) of a flow end, type-tagged.
    pub(crate) flow_key: Option<&'a [u8]>,
    /// Where the event starts in the decompressed JSON, and its index in `traceEvents`.
    pub(crate) offset: u64,
    pub(crate) index: u64,
    /// Where the value of each field of [`field_slot`] is in `raw`, as written (a string
    /// with its quotes): (start, end), empty when the field is missing or an object or an
    /// array. `merge` rewrites `pid`, `ts` and `id` there.
    pub(crate) values: ValueSpans,
    /// Where the value of `args` is in `raw` (see [`Event::args`]): [`ARGS_NONE`] or
    /// [`ARGS_UNKNOWN`] when not a span.
    pub(crate) args_span: (u32, u32),
    /// [`Event::arg_texts`], once asked for.
    pub(crate) arg_texts: OnceCell<ArgTexts<'a>>,
}

/// The members of an event's `args` that several visitors read (the last of each, as
/// written), from one pass over `args` shared by the visitors of a read.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ArgTexts<'a> {
    pub(crate) stream: Option<&'a [u8]>,
    pub(crate) correlation: Option<&'a [u8]>,
    pub(crate) external_id: Option<&'a [u8]>,
    pub(crate) sequence: Option<&'a [u8]>,
    pub(crate) device: Option<&'a [u8]>,
    /// A memory activity's size (`diff`'s bytes copied per step).
    pub(crate) bytes: Option<&'a [u8]>,
    /// `args` is an object the scanner read to its end (else the members above are those
    /// met before it gave up: none where `args` is missing or not an object).
    pub(crate) whole: bool,
}

impl<'a> ArgTexts<'a> {
    fn of(args: Option<&'a [u8]>) -> Self {
        let mut out = ArgTexts::default();
        let Some(args) = args else {
            return out;
        };
        let read = for_each_member(args, |key, value| match key {
            b"stream" => out.stream = Some(value),
            b"correlation" => out.correlation = Some(value),
            b"External id" => out.external_id = Some(value),
            b"Sequence number" => out.sequence = Some(value),
            b"device" => out.device = Some(value),
            b"bytes" => out.bytes = Some(value),
            _ => {}
        });
        out.whole = read.is_some();
        out
    }

    /// `stream` and `correlation` as `summary` reads them (and `diff`'s summary from the
    /// attribution's records): whole numbers, -1 where missing or not one, both -1 where
    /// `args` was not read whole.
    pub(crate) fn stream_and_correlation(&self) -> (i64, i64) {
        (self.summary_stream(), self.summary_correlation())
    }

    /// `stream` as [`Self::stream_and_correlation`] reads it, alone.
    pub(crate) fn summary_stream(&self) -> i64 {
        self.summary_int(self.stream)
    }

    /// `correlation` as [`Self::stream_and_correlation`] reads it, alone.
    pub(crate) fn summary_correlation(&self) -> i64 {
        self.summary_int(self.correlation)
    }

    fn summary_int(&self, value: Option<&[u8]>) -> i64 {
        if self.whole {
            value.and_then(whole_number).unwrap_or(-1)
        } else {
            -1
        }
    }
}

/// [`Event::args_span`] of an event the scanner read that has no `args`.
pub(crate) const ARGS_NONE: (u32, u32) = (0, 0);
/// [`Event::args_span`] where the scanner did not look (the lexer read the event): `args`
/// is looked up in the text when asked for.
pub(crate) const ARGS_UNKNOWN: (u32, u32) = (u32::MAX, u32::MAX);

/// Value extents of an event's fields, indexed as [`field_slot`] numbers them.
pub(crate) type ValueSpans = [(u32, u32); 8];

/// Slots of [`field_slot`] that readers of [`Event::values`] name.
pub(crate) const SLOT_PH: usize = 0;
pub(crate) const SLOT_CAT: usize = 1;
pub(crate) const SLOT_NAME: usize = 2;
pub(crate) const SLOT_PID: usize = 3;
pub(crate) const SLOT_TID: usize = 4;
pub(crate) const SLOT_TS: usize = 5;
pub(crate) const SLOT_DUR: usize = 6;
pub(crate) const SLOT_ID: usize = 7;

impl<'a> Event<'a> {
    pub(crate) fn pid_text(&self) -> &[u8] {
        self.pid_key.get(1..).unwrap_or(b"")
    }

    pub(crate) fn is_metadata(&self) -> bool {
        self.ph == b"M"
    }

    /// Metadata about a thread (as opposed to its process).
    pub(crate) fn is_thread_metadata(&self) -> bool {
        self.name.starts_with(b"thread_")
    }

    pub(crate) fn is_flow(&self) -> bool {
        self.flow_key.is_some()
    }

    /// The value of field `slot` as written (a string with its quotes), if it is a string,
    /// number, boolean or null.
    pub(crate) fn value_text(&self, slot: usize) -> Option<&[u8]> {
        let (start, end) = self.values[slot];
        (end > start).then(|| &self.raw[start as usize..end as usize])
    }

    /// The value of the event's last `args` as written, as `member(raw, b"args", Last)`
    /// gives it: found while the event was scanned, so that each visitor of a read (a `Tee`
    /// feeds two) does not search the event's text for it again.
    #[inline]
    pub(crate) fn args(&self) -> Option<&'a [u8]> {
        match self.args_span {
            ARGS_UNKNOWN => member(self.raw, b"args", Duplicates::Last),
            ARGS_NONE => None,
            (start, end) => Some(&self.raw[start as usize..end as usize]),
        }
    }

    /// The members of [`Event::args`] in [`ArgTexts`]: read on the first call, kept for
    /// the next (the other visitor of a `Tee`).
    #[inline]
    pub(crate) fn arg_texts(&self) -> &ArgTexts<'a> {
        self.arg_texts.get_or_init(|| ArgTexts::of(self.args()))
    }
}

/// What reading a trace reports to its user.
pub(crate) trait Visitor {
    /// A top-level member other than `traceEvents` (`raw` is `"key": value` as written).
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()>;
    /// One element of `traceEvents`.
    fn event(&mut self, ev: &Event<'_>) -> Result<()>;
    /// Whether elements of `traceEvents` that are not trace events (not an object, or no
    /// string `"ph"`) go to [`Visitor::not_an_event`]; by default they end the read ("not a
    /// trace").
    fn lenient(&self) -> bool {
        false
    }
    /// An element of `traceEvents` that is not a trace event, at `offset` with `index`
    /// (only called when [`Visitor::lenient`]).
    fn not_an_event(&mut self, _offset: u64, _index: u64, _what: NotAnEvent) -> Result<()> {
        Ok(())
    }
}

/// A visitor that keeps nothing: a read for its checks alone (and the floor the tests time
/// readers against).
pub(crate) struct Unvisited;

impl Visitor for Unvisited {
    fn header(&mut self, _: &[u8], _: &[u8], _: bool) -> Result<()> {
        Ok(())
    }
    fn event(&mut self, _: &Event<'_>) -> Result<()> {
        Ok(())
    }
}

/// Two visitors fed one read (`diff` reads a file once for its summary and its operators):
/// each call goes to the first, then the second; an error of either stops the read.
/// Lenient only if both are (a visitor that is not must see the read end where it would).
pub(crate) struct Tee<'a>(
    pub(crate) &'a mut dyn Visitor,
    pub(crate) &'a mut dyn Visitor,
);

impl Visitor for Tee<'_> {
    fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
        self.0.header(key, raw, after_events)?;
        self.1.header(key, raw, after_events)
    }
    fn event(&mut self, ev: &Event<'_>) -> Result<()> {
        self.0.event(ev)?;
        self.1.event(ev)
    }
    fn lenient(&self) -> bool {
        self.0.lenient() && self.1.lenient()
    }
    fn not_an_event(&mut self, offset: u64, index: u64, what: NotAnEvent) -> Result<()> {
        self.0.not_an_event(offset, index, what)?;
        self.1.not_an_event(offset, index, what)
    }
}

/// Why an element of `traceEvents` is not a trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotAnEvent {
    /// It is a JSON value of this kind, not an object.
    NotObject(Kind),
    /// An object without a string `"ph"` (this kind of `"ph"`, `Missing` when absent).
    NoPhase(Kind),
}

/// The text of the fields an event is read for, as the lexer decodes them (reused).
#[derive(Default)]
struct Texts {
    key: Vec<u8>,
    fields: [Vec<u8>; 8],
}

/// The keys an event is grouped by, built from its fields (reused).
#[derive(Default)]
struct Keys {
    pid_key: Vec<u8>,
    thread_key: Vec<u8>,
    flow_key: Vec<u8>,
}

/// What was read of the fields named in [`field_slot`]: their kind and text (a string's
/// decoded text, a number's or a boolean's as written, nothing for other kinds).
type FieldTexts<'a> = [(Kind, &'a [u8]); 8];

/// Where a field of an event goes in [`FieldTexts`], if it is one that is read.
#[inline]
fn field_slot(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"ph" => 0,
        b"cat" => 1,
        b"name" => 2,
        b"pid" => 3,
        b"tid" => 4,
        b"ts" => 5,
        b"dur" => 6,
        b"id" => 7,
        _ => return None,
    })
}

fn tag(kind: Kind) -> u8 {
    if kind == Kind::Str {
        b's'
    } else {
        b'n'
    }
}

/// A type-tagged `pid` / `tid` as JSON text for messages (a string quoted and escaped, a
/// number as written); `None` where the event has none.
pub(crate) fn tagged_text(tagged: &[u8]) -> Option<String> {
    match tagged.split_first()? {
        (b's', text) => {
            let mut out = Vec::new();
            crate::json::render::push_json_string(&mut out, text);
            Some(String::from_utf8_lossy(&out).into_owned())
        }
        (_, text) => Some(String::from_utf8_lossy(text).into_owned()),
    }
}

fn number(kind: Kind, text: &[u8]) -> Option<f64> {
    if kind != Kind::Num {
        return None;
    }
    std::str::from_utf8(text)
        .ok()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// The input of [`read_trace`].
type FileInput<'a> = Input<'a, Source<BufReader<File>>>;

/// What a trace document's top level is: the Trace Event Format's two forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Form {
    /// The JSON Object Format: `{"traceEvents": [...], ...}` (what torch and Kineto write).
    #[default]
    Object,
    /// The JSON Array Format: `[event, ...]`, events and nothing else (torch's legacy
    /// autograd profiler, many other tools). `closed` is false when the text ends without
    /// the `]`: the format allows it (a writer that crashed leaves it off), and viewers
    /// (chrome://tracing, Perfetto) load such a file. `at`: the offset of the `[`.
    Array { at: u64, closed: bool },
}

/// Reads a trace from `inp`, telling `v` about the header and every event; `form` is set
/// as soon as the top level is known (so a read that fails later still tells it).
///
/// This is the one place the top level of a document is decided: every tool reads through
/// it, so each takes both forms.
fn walk(
    inp: &mut FileInput<'_>,
    v: &mut dyn Visitor,
    chunked: Option<&Chunked<'_>>,
    form: &mut Form,
) -> PResult<()> {
    match inp.skip_ws()? {
        Some(b'{') => {
            *form = Form::Object;
            object(inp, v, chunked)?;
        }
        Some(b'[') => {
            let at = inp.offset();
            *form = Form::Array { at, closed: false };
            let mut t = Texts::default();
            if events(inp, &mut t, v, chunked)?.is_some() {
                // The text ended where an event or the `]` was due: nothing follows.
                return Ok(());
            }
            *form = Form::Array { at, closed: true };
        }
        None => {
            return Err(inp.fault(
                FormatKind::NotATrace,
                "empty file (expected a JSON object with \"traceEvents\", or an array of \
                 events)",
            ))
        }
        Some(_) => {
            return Err(inp.fault(
                FormatKind::NotATrace,
                "not a trace: the top level is neither a JSON object nor an array of events",
            ))
        }
    }
    match inp.skip_ws()? {
        None => Ok(()),
        Some(_) => Err(inp.fail("extra data after the top-level value")),
    }
}

/// At the `{` of the top-level object: its members, `traceEvents` read as events, the
/// others told as the header; leaves the position after the closing `}`.
fn object(
    inp: &mut FileInput<'_>,
    v: &mut dyn Visitor,
    chunked: Option<&Chunked<'_>>,
) -> PResult<()> {
    inp.pos += 1;
    let mut t = Texts::default();
    let mut seen_events = false;
    let mut b = inp.ws_expect("a key or '}'")?;
    if b != b'}' {
        loop {
            let at = inp.offset();
            inp.start_capture();
            inp.key(b, &mut t.key)?;
            if t.key == b"traceEvents" {
                inp.end_capture()?;
                if seen_events {
                    return Err(inp.fault(FormatKind::NotATrace, "duplicate key \"traceEvents\""));
                }
                seen_events = true;
                if inp.peek()? != Some(b'[') {
                    return Err(inp.fault(
                        FormatKind::NotATrace,
                        "not a trace: \"traceEvents\" is not an array",
                    ));
                }
                if let Some(ended) = events(inp, &mut t, v, chunked)? {
                    // Only the top-level array may be left open.
                    return Err(Stop::Invalid(ended));
                }
            } else {
                inp.value(1, None)?;
                let raw = inp.end_capture()?;
                let told = v.header(&t.key, raw, seen_events);
                told.map_err(|e| visitor_error(inp, at, e))?;
            }
            match inp.next_item(b'}', "a key", "after a top-level value")? {
                Some(next) => b = next,
                None => break,
            }
        }
    }
    inp.pos += 1;
    if !seen_events {
        return Err(inp.fault(
            FormatKind::NotATrace,
            "not a trace: no \"traceEvents\" key in the top-level object",
        ));
    }
    Ok(())
}

/// At the `[` of an array of events (`traceEvents`, or the top level of the array form):
/// reads its events, in parallel chunks when `chunked` is given (see "Reading in parallel"
/// below), and leaves the position after the closing `]`. When the input ends instead,
/// where an event or the `]` was due (not inside an event), the truncation fault a read
/// of `traceEvents` reports there: the array form's caller accepts it.
fn events(
    inp: &mut FileInput<'_>,
    t: &mut Texts,
    v: &mut dyn Visitor,
    chunked: Option<&Chunked<'_>>,
) -> PResult<Option<Invalid>> {
    inp.pos += 1;
    let Some(b) = inp.skip_ws()? else {
        return Ok(Some(ended(inp, "an event or ']'")));
    };
    if b == b']' {
        inp.pos += 1;
        return Ok(None);
    }
    let mut keys = Keys::default();
    match chunked {
        Some(chunked) => chunked.read_events(inp, t, &mut keys, v),
        None => Ok(read_events(inp, t, &mut keys, v, 0, &mut |_| false)?.ended()),
    }
}

/// The input ended here, where `what` was due (what [`Input::ws_expect`] says).
fn ended<R: BufRead>(inp: &Input<'_, Source<R>>, what: &str) -> Invalid {
    let message = format!("unexpected end of file, expected {what}");
    inp.locate(inp.offset(), FormatKind::Truncated, &message)
}

/// Where a run of the lexer over an array of events stopped.
enum Stopped {
    /// After the closing `]`.
    Closed,
    /// At the first byte of the event with this index.
    At(u64),
    /// At the end of the input, where an event or the `]` was due (see [`events`]).
    Ended(Invalid),
}

impl Stopped {
    /// The fault of an array the input ended in (see [`events`]), if it did.
    fn ended(self) -> Option<Invalid> {
        match self {
            Stopped::Ended(fault) => Some(fault),
            Stopped::Closed | Stopped::At(_) => None,
        }
    }
}

/// What follows an event in its array.
enum Next {
    /// The first byte of the next event (past the `,`).
    Item(u8),
    /// The `]` (not consumed).
    Closed,
    /// The end of the input, after the event or after its `,`.
    Ended(Invalid),
}

/// After an event: the next one, the `]`, or the end of the input; the errors (and their
/// messages) of [`Input::next_item`] otherwise.
#[inline]
fn after_event<R: BufRead>(inp: &mut Input<'_, Source<R>>) -> PResult<Next> {
    match inp.skip_ws()? {
        None => Ok(Next::Ended(ended(inp, "',' or ']'"))),
        Some(b',') => {
            inp.pos += 1;
            if inp.skip_ws()?.is_none() {
                return Ok(Next::Ended(ended(inp, "an event")));
            }
            inp.after_comma(b']', "an event").map(Next::Item)
        }
        Some(_) => Ok(match inp.next_item(b']', "an event", "after an event")? {
            Some(b) => Next::Item(b),
            None => Next::Closed,
        }),
    }
}

/// Reads events with the lexer (through the fast scanner where it can) from the position,
/// the first byte of the event with index `index` (or the end of the input), up to the
/// closing `]` (the position is left after it) or the end of the input, or up to the first
/// byte of an event whose offset `stop_at` accepts.
fn read_events<R: BufRead>(
    inp: &mut Input<'_, Source<R>>,
    t: &mut Texts,
    keys: &mut Keys,
    v: &mut dyn Visitor,
    mut index: u64,
    stop_at: &mut dyn FnMut(u64) -> bool,
) -> PResult<Stopped> {
    // The input ending here ends it after the previous event, as a sequential read says.
    inp.event = Some(index.saturating_sub(1));
    let Some(mut b) = inp.skip_ws()? else {
        let fault = ended(inp, "an event");
        inp.event = None;
        return Ok(Stopped::Ended(fault));
    };
    loop {
        inp.event = Some(index);
        if !fast_event(inp, keys, v)? {
            event(inp, t, keys, b, v)?;
        }
        index += 1;
        match after_event(inp)? {
            Next::Item(next) => {
                b = next;
                if stop_at(inp.offset()) {
                    inp.event = None;
                    return Ok(Stopped::At(index));
                }
            }
            Next::Closed => {
                inp.pos += 1;
                inp.event = None;
                return Ok(Stopped::Closed);
            }
            Next::Ended(fault) => {
                inp.event = None;
                return Ok(Stopped::Ended(fault));
            }
        }
    }
}

/// Reads the event at the position with the fast scanner ([`crate::json::scan`]) when it lies
/// whole within the next [`scan::WINDOW`] bytes and needs no decoding; false, with nothing
/// read, when the lexer must read it (and report what is wrong with it, if anything).
#[inline]
fn fast_event<R: BufRead>(
    inp: &mut Input<'_, Source<R>>,
    keys: &mut Keys,
    v: &mut dyn Visitor,
) -> PResult<bool> {
    inp.ensure(scan::WINDOW)?;
    let at = (inp.offset(), inp.event.unwrap_or(0));
    let buf = &inp.buf[inp.pos..inp.len];
    let Some((len, spans, args)) = scan_event(buf) else {
        return Ok(false);
    };
    let raw = &buf[..len];
    let values = (value_spans(&spans), args);
    let Ok(ev) = make_event(raw, texts(raw, &spans), values, keys, at) else {
        return Ok(false);
    };
    v.event(&ev).map_err(|e| visitor_error(inp, at.0, e))?;
    inp.pos += len;
    Ok(true)
}

/// Where the fields of an event are: (kind, start, end) of each slot's text (a string's
/// between its quotes; not capped), relative to the event's first byte.
type FieldSpans = [(Kind, u32, u32); 8];

/// The fields of the event `raw` whose spans are given, each capped at [`STRING_CAP`]
/// bytes as the lexer caps what it decodes.
#[inline]
fn texts<'a>(raw: &'a [u8], spans: &FieldSpans) -> FieldTexts<'a> {
    spans.map(|(kind, start, end)| {
        let (start, end) = (start as usize, end as usize);
        (kind, &raw[start..end.min(start + STRING_CAP)])
    })
}

/// Where the values of the fields whose spans are given are, as written (see
/// [`Event::values`]): a string's text plus its quotes.
#[inline]
fn value_spans(spans: &FieldSpans) -> ValueSpans {
    spans.map(|(kind, start, end)| match kind {
        Kind::Str => (start - 1, end + 1),
        Kind::Num | Kind::Bool | Kind::Null => (start, end),
        _ => (0, 0),
    })
}

/// Scans the event object at the start of `buf`: its length and fields, or `None` when the
/// lexer must read it (see [`crate::json::scan`]).
#[inline]
fn scan_event(buf: &[u8]) -> Option<(usize, FieldSpans, (u32, u32))> {
    #[cfg(feature = "count-hooks")]
    crate::extra_work::per_event(crate::extra_work::Site::Scan);
    let mut spans: FieldSpans = [(Kind::Missing, 0, 0); 8];
    let mut args = ARGS_NONE;
    if buf.first() != Some(&b'{') || buf.len() > u32::MAX as usize {
        return None;
    }
    let mut s = Scanner::new(buf);
    s.pos = 1;
    if s.ws()? == b'}' {
        return Some((s.pos + 1, spans, args));
    }
    loop {
        let key = s.key()?;
        if !key.plain {
            return None;
        }
        let slot = field_slot(&buf[key.start..key.end]);
        let first = s.ws()?;
        let start = s.pos;
        if first == b'"' {
            let text = s.string()?;
            if let Some(slot) = slot {
                if !text.plain {
                    return None;
                }
                spans[slot] = (Kind::Str, text.start as u32, text.end as u32);
            }
        } else {
            let kind = s.value(2)?;
            if let Some(slot) = slot {
                let end = match kind {
                    Kind::Num | Kind::Bool | Kind::Null => s.pos,
                    _ => start,
                };
                spans[slot] = (kind, start as u32, end as u32);
            }
        }
        // The keys are plain (as written is as decoded): the last `args` is the one
        // `member` finds.
        if &buf[key.start..key.end] == b"args" {
            args = (start as u32, s.pos as u32);
        }
        match s.ws()? {
            b',' => s.pos += 1,
            b'}' => return Some((s.pos + 1, spans, args)),
            _ => return None,
        }
    }
}

/// The event with text `raw`, the given fields, at (offset, index); the error says why it is
/// not a trace event (the kind of its `"ph"`).
fn make_event<'a>(
    raw: &'a [u8],
    fields: FieldTexts<'a>,
    (values, args_span): (ValueSpans, (u32, u32)),
    keys: &'a mut Keys,
    (offset, index): (u64, u64),
) -> std::result::Result<Event<'a>, NotAnEvent> {
    let [(ph_kind, ph), (cat_kind, cat), (name_kind, name), (pid_kind, pid), (tid_kind, tid), (ts_kind, ts), (dur_kind, dur), (id_kind, id)] =
        fields;
    if ph_kind != Kind::Str {
        return Err(NotAnEvent::NoPhase(ph_kind));
    }
    keys.pid_key.clear();
    if matches!(pid_kind, Kind::Str | Kind::Num) {
        keys.pid_key.push(tag(pid_kind));
        keys.pid_key.extend_from_slice(pid);
    }
    keys.thread_key.clear();
    keys.thread_key.extend_from_slice(&keys.pid_key);
    keys.thread_key.push(0);
    if matches!(tid_kind, Kind::Str | Kind::Num) {
        keys.thread_key.push(tag(tid_kind));
        keys.thread_key.extend_from_slice(tid);
    }
    let is_flow = matches!(ph, b"s" | b"t" | b"f") && id_kind != Kind::Missing;
    if is_flow {
        keys.flow_key.clear();
        keys.flow_key
            .extend_from_slice(&(cat.len() as u32).to_le_bytes());
        keys.flow_key.extend_from_slice(cat);
        keys.flow_key.push(tag(id_kind));
        keys.flow_key.extend_from_slice(id);
    }
    let keys: &'a Keys = keys;
    Ok(Event {
        raw,
        ph,
        cat: if cat_kind == Kind::Str {
            std::str::from_utf8(cat).ok()
        } else {
            None
        },
        name: if name_kind == Kind::Str { name } else { b"" },
        pid_key: &keys.pid_key,
        thread_key: &keys.thread_key,
        ts: number(ts_kind, ts),
        dur: number(dur_kind, dur),
        flow_key: if is_flow { Some(&keys.flow_key) } else { None },
        offset,
        index,
        values,
        args_span,
        arg_texts: OnceCell::new(),
    })
}

/// Reads the event at the position with the lexer (`first` is its first byte).
fn event<R: BufRead>(
    inp: &mut Input<'_, Source<R>>,
    t: &mut Texts,
    keys: &mut Keys,
    first: u8,
    v: &mut dyn Visitor,
) -> PResult<()> {
    let start = inp.offset();
    let index = inp.event.unwrap_or(0);
    if first != b'{' {
        let k = inp.value(2, None)?;
        if v.lenient() {
            return v
                .not_an_event(start, index, NotAnEvent::NotObject(k))
                .map_err(Stop::Fatal);
        }
        return Err(inp.fault_at(
            start,
            FormatKind::NotATrace,
            format!("not a trace: the event is {}, not an object", k.describe()),
        ));
    }
    inp.start_capture();
    inp.pos += 1;
    let mut kinds = [Kind::Missing; 8];
    let mut values: ValueSpans = [(0, 0); 8];
    let mut b = inp.ws_expect("a key or '}'")?;
    if b != b'}' {
        loop {
            inp.key(b, &mut t.key)?;
            let slot = field_slot(&t.key);
            let value_start = inp.offset() - start;
            let k = inp.value(3, slot.map(|i| &mut t.fields[i]))?;
            if let Some(i) = slot {
                kinds[i] = k;
                values[i] = match (k, u32::try_from(inp.offset() - start)) {
                    (Kind::Str | Kind::Num | Kind::Bool | Kind::Null, Ok(end)) => {
                        (value_start as u32, end)
                    }
                    _ => (0, 0),
                };
            }
            match inp.next_item(b'}', "a key", "in an event")? {
                Some(next) => b = next,
                None => break,
            }
        }
    }
    inp.pos += 1;
    let mut fields: FieldTexts = [(Kind::Missing, b""); 8];
    for (i, slot) in fields.iter_mut().enumerate() {
        if kinds[i] != Kind::Missing {
            *slot = (kinds[i], &t.fields[i]);
        }
    }
    let raw = inp.end_capture()?;
    match make_event(raw, fields, (values, ARGS_UNKNOWN), keys, (start, index)) {
        Ok(ev) => v.event(&ev).map_err(|e| visitor_error(inp, start, e)),
        Err(what) if v.lenient() => v.not_an_event(start, index, what).map_err(Stop::Fatal),
        Err(_) => Err(inp.fault_at(
            start,
            FormatKind::NotATrace,
            "not a trace: the event has no string \"ph\"",
        )),
    }
}

/// Reads the trace at `path` once, telling `v` about it. Errors name the file and the
/// offset in the decompressed JSON.
pub(crate) fn read_trace(
    path: &Path,
    v: &mut dyn Visitor,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<u64> {
    read_trace_with(path, v, progress, ReadOptions::default())
}

/// [`read_trace`] with the given way of reading.
pub(crate) fn read_trace_with(
    path: &Path,
    v: &mut dyn Visitor,
    progress: &mut dyn FnMut(u64) -> Result<()>,
    options: ReadOptions,
) -> Result<u64> {
    let end = scan_trace(path, v, progress, options)?;
    match end.invalid {
        None => Ok(end.json_bytes),
        Some(invalid) => Err(Error::trace_format(path, invalid)),
    }
}

/// How a read of a trace ended (see [`scan_trace`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadEnd {
    /// Bytes of JSON read (decompressed): all of them, or up to where the text is invalid.
    pub(crate) json_bytes: u64,
    /// Gzip members started (0 for plain JSON).
    pub(crate) gzip_members: u32,
    /// Why the text is not a trace, where reading stopped; `None` when it all read.
    pub(crate) invalid: Option<Invalid>,
    /// The form of the top level, as far as it was read (`Object` when none was).
    pub(crate) form: Form,
}

/// Reads the trace at `path` once, telling `v` about it, up to its end or to where it is not
/// valid: an invalid trace is reported in the result, not as an error. Errors are I/O
/// failures (naming the file) and what `v` or `progress` return.
pub(crate) fn scan_trace(
    path: &Path,
    v: &mut dyn Visitor,
    progress: &mut dyn FnMut(u64) -> Result<()>,
    options: ReadOptions,
) -> Result<ReadEnd> {
    let cannot_read = |e| Error::io(format!("cannot read {}", path.display()), e);
    let file =
        File::open(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), e))?;
    let shared = file.try_clone().map_err(cannot_read)?;
    let len = shared.metadata().map_err(cannot_read)?.len();
    let mut source =
        Source::detect(BufReader::with_capacity(BUF_SIZE, file)).map_err(cannot_read)?;
    if options.threads >= 2 {
        // A core to spare: gzip is inflated on it while this thread scans.
        source = source.inflate_ahead();
    }
    let chunked = Chunked::new(&shared, len, &source, options);
    let mut inp = Input::new(source, progress, MAX_DEPTH);
    inp.capture_limit = MAX_VALUE;
    let mut form = Form::Object;
    let invalid = match walk(&mut inp, v, chunked.as_ref(), &mut form) {
        Ok(()) => None,
        Err(Stop::Invalid(invalid)) => Some(invalid),
        Err(Stop::Read(e)) => return Err(cannot_read(e)),
        Err(Stop::Fatal(e)) => return Err(e),
    };
    Ok(ReadEnd {
        json_bytes: inp.offset(),
        gzip_members: inp.inner.members(),
        invalid,
        form,
    })
}

/// Checks the trace in `file` (opened from `path`, which names it in errors) as
/// [`read_trace`] does (one thread, in order), telling `tap`
/// every decompressed byte as it is read, before it is checked: `compress` writes the
/// bytes out as they are checked, and fails on the first fault. Returns the bytes of JSON
/// and the gzip members of the source (0 for plain JSON).
pub(crate) fn check_through(
    path: &Path,
    file: File,
    tap: &mut dyn FnMut(&[u8]) -> Result<()>,
    progress: &mut dyn FnMut(u64) -> Result<()>,
) -> Result<(u64, u32)> {
    let source = Source::detect(BufReader::with_capacity(BUF_SIZE, file))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    let mut inp = Input::new(source, progress, MAX_DEPTH);
    inp.capture_limit = MAX_VALUE;
    inp.tap = Some(tap);
    match walk(&mut inp, &mut Unvisited, None, &mut Form::Object) {
        Ok(()) => Ok((inp.offset(), inp.inner.members())),
        Err(Stop::Invalid(invalid)) => Err(Error::trace_format(path, invalid)),
        Err(Stop::Read(e)) => Err(Error::io(format!("cannot read {}", path.display()), e)),
        Err(Stop::Fatal(e)) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------
// Reading in parallel
// ---------------------------------------------------------------------------------------
//
// Scanning is most of the work of reading a trace, and a plain `.json` file can be read
// from any offset. A raw newline is never inside a JSON string (strict JSON escapes it),
// so the first byte after `,`, a newline and whitespace, if it is `{`, very likely starts
// an event: such *sync points* cut `traceEvents` into chunks of about
// [`ReadOptions::chunk`] bytes. Worker threads scan one chunk each with the fast scanner
// into an index of its events; the reading thread tells the visitor about them in order,
// so visitors see exactly what a sequential read shows them.
//
// A chunk is used only when the events before it end exactly at its start: the first
// chunk starts at the first event, and a chunk whose events all scanned ends where the
// next one starts. So what a worker assumed about its start is checked before its events
// are used. Where a worker could not scan an event (the scanner gave up on it, or a sync
// point was not the start of an event after all), the reading thread reads on from that
// event with the lexer, as a sequential read would (so errors are the same too), until it
// lands on the start of a later chunk, and uses the chunks from there.
//
// Memory: at most `threads + 2` chunks (each at most 4 chunk sizes plus [`SYNC_SEARCH`],
// with an index of about 100 bytes per event) are in flight.

/// Bytes per chunk of a parallel read.
const CHUNK: usize = 2 << 20;

/// Most scanning threads.
const MAX_THREADS: usize = 8;

/// Bytes searched for a sync point after a chunk's nominal end.
const SYNC_SEARCH: u64 = 256 << 10;

/// How a trace file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadOptions {
    /// Threads scanning chunks of a plain `.json` file (below 2: read by one thread); at 2
    /// or more, gzip is inflated on a thread of its own while the reading thread scans.
    pub(crate) threads: usize,
    /// Bytes per chunk.
    pub(crate) chunk: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        ReadOptions {
            threads: threads.min(MAX_THREADS),
            chunk: CHUNK,
        }
    }
}

/// One event of a scanned chunk: where it is in the chunk, and its fields.
struct Indexed {
    start: u32,
    len: u32,
    spans: FieldSpans,
    /// See [`Event::args_span`].
    args: (u32, u32),
}

/// How the scan of a chunk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkEnd {
    /// After the `,` (and whitespace) that follows its last event: the next event starts
    /// at the chunk's end.
    Next,
    /// At the `]` closing `traceEvents` (its offset in the chunk).
    Closed(usize),
    /// At an event the scanner could not read (its offset in the chunk).
    Unsure(usize),
}

/// A chunk as a worker scanned it.
struct Chunk {
    start: u64,
    text: Vec<u8>,
    events: Vec<Indexed>,
    end: ChunkEnd,
}

/// Chunk `k`, from those `arrived` or as the scanning threads send it (`done`); every
/// wait at most [`POLL`], then the progress callback (where Ctrl-C is answered), as every
/// wait of the crate (`crate::output::interrupt`).
fn wait_for_chunk(
    k: usize,
    arrived: &mut BTreeMap<usize, PResult<Chunk>>,
    done: &mpsc::Receiver<(usize, PResult<Chunk>)>,
    inp: &mut FileInput<'_>,
    start: u64,
) -> PResult<PResult<Chunk>> {
    loop {
        if let Some(c) = arrived.remove(&k) {
            return Ok(c);
        }
        match done.recv_timeout(POLL) {
            Ok((i, c)) if i >= k => {
                arrived.insert(i, c);
            }
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => {
                (inp.progress)(start).map_err(Stop::Fatal)?;
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Stop::Fatal(Error::Panic(
                    "the threads scanning the trace stopped".into(),
                )))
            }
        }
    }
}

/// Tells `v` the events scanned in `chunk` (`index`: the first one's index, advanced past
/// those told); where the chunk ends, or where the lexer must take over (an event the
/// fields could not be read from).
fn tell_chunk(
    chunk: &Chunk,
    keys: &mut Keys,
    v: &mut dyn Visitor,
    inp: &mut FileInput<'_>,
    index: &mut u64,
) -> PResult<ChunkEnd> {
    for ev in &chunk.events {
        let (start, len) = (ev.start as usize, ev.len as usize);
        let raw = &chunk.text[start..start + len];
        let at = (chunk.start + ev.start as u64, *index);
        let values = (value_spans(&ev.spans), ev.args);
        match make_event(raw, texts(raw, &ev.spans), values, keys, at) {
            Ok(e) => {
                if let Err(e) = v.event(&e) {
                    inp.event = Some(*index);
                    return Err(visitor_error(inp, at.0, e));
                }
            }
            Err(_) => return Ok(ChunkEnd::Unsure(start)),
        }
        *index += 1;
    }
    Ok(chunk.end)
}

/// Scans the events of a chunk, which starts at the first byte of an event.
fn scan_chunk(text: &[u8], events: &mut Vec<Indexed>) -> ChunkEnd {
    events.clear();
    let mut s = Scanner::new(text);
    loop {
        let start = s.pos;
        let scanned = scan_event(&text[start..]).filter(|(_, spans, _)| spans[0].0 == Kind::Str);
        let Some((len, spans, args)) = scanned else {
            return ChunkEnd::Unsure(start);
        };
        events.push(Indexed {
            start: start as u32,
            len: len as u32,
            spans,
            args,
        });
        s.pos = start + len;
        match s.ws() {
            Some(b',') => {
                s.pos += 1;
                match s.ws() {
                    None => return ChunkEnd::Next,
                    Some(b'{') => continue,
                    Some(_) => {}
                }
            }
            Some(b']') => return ChunkEnd::Closed(s.pos),
            _ => {}
        }
        // What follows the event is wrong, or not in the chunk: the lexer reads the event
        // again and reports it.
        events.pop();
        return ChunkEnd::Unsure(start);
    }
}

/// The first sync point in `text` (see above): the offset of a `{` that follows `,`, a
/// newline and whitespace.
fn sync_point(text: &[u8]) -> Option<usize> {
    let mut last = 0u8;
    let mut newline = false;
    for (i, &b) in text.iter().enumerate() {
        match b {
            b'\n' => newline = true,
            b' ' | b'\t' | b'\r' => {}
            _ => {
                if b == b'{' && newline && last == b',' {
                    return Some(i);
                }
                last = b;
                newline = false;
            }
        }
    }
    None
}

/// A plain trace file read in parallel chunks.
pub(crate) struct Chunked<'f> {
    file: &'f File,
    len: u64,
    options: ReadOptions,
}

impl<'f> Chunked<'f> {
    /// Reading in parallel, when it can help: a plain regular file of at least two chunks,
    /// and at least two threads.
    fn new<R: BufRead>(
        file: &'f File,
        len: u64,
        source: &Source<R>,
        options: ReadOptions,
    ) -> Option<Self> {
        let plain = matches!(source, Source::Plain(_));
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        let chunk = options.chunk.max(1) as u64;
        (cfg!(unix) && plain && regular && options.threads >= 2 && len >= 2 * chunk)
            .then_some(Chunked { file, len, options })
    }

    /// Reads `len` bytes at `offset` into `text` (a reused buffer: its old bytes are
    /// overwritten, not zeroed first).
    fn read_into(&self, text: &mut Vec<u8>, offset: u64, len: usize) -> std::io::Result<()> {
        if text.len() >= len {
            text.truncate(len);
        } else {
            text.resize(len, 0);
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file.read_exact_at(text, offset)
        }
        #[cfg(not(unix))]
        {
            let _ = offset;
            Err(std::io::ErrorKind::Unsupported.into())
        }
    }

    /// The first sync point in the `search` bytes from `from`, read a few KiB at a time (one
    /// is usually a line away).
    fn find_sync_point(&self, from: u64, search: u64) -> std::io::Result<Option<u64>> {
        let end = (from + search).min(self.len);
        let mut window = 4096u64;
        let mut text = Vec::new();
        loop {
            let upto = (from + window).min(end);
            self.read_into(&mut text, from, (upto - from) as usize)?;
            if let Some(i) = sync_point(&text) {
                return Ok(Some(from + i as u64));
            }
            if upto == end {
                return Ok(None);
            }
            window *= 4;
        }
    }

    /// The chunk starts from `first` (the first event) on: each is a sync point, the last
    /// entry the end of the last chunk (the end of the file, or a start after which no sync
    /// point was found: what follows it is read by the lexer).
    fn plan(&self, first: u64) -> std::io::Result<Vec<u64>> {
        let chunk = self.options.chunk.max(1) as u64;
        let mut starts = vec![first];
        let mut start = first;
        loop {
            if start + chunk + SYNC_SEARCH.min(chunk) >= self.len {
                starts.push(self.len);
                return Ok(starts);
            }
            let search = SYNC_SEARCH.min(chunk);
            let mut next = None;
            let mut nominal = start + chunk;
            while next.is_none() && nominal < start + 4 * chunk && nominal < self.len {
                next = self.find_sync_point(nominal, search)?;
                nominal += chunk / 2 + 1;
            }
            match next {
                Some(n) => {
                    starts.push(n);
                    start = n;
                }
                None => return Ok(starts),
            }
        }
    }

    /// At the first event of an array of events: reads all its events (see above) and
    /// leaves the position after the closing `]`; at the end of the input instead, where an
    /// event or the `]` was due, the fault (see [`events`]).
    fn read_events(
        &self,
        inp: &mut FileInput<'_>,
        t: &mut Texts,
        keys: &mut Keys,
        v: &mut dyn Visitor,
    ) -> PResult<Option<Invalid>> {
        let starts = self.plan(inp.offset()).map_err(Stop::Read)?;
        let chunks = starts.len() - 1;
        let (task_tx, task_rx) = mpsc::channel::<usize>();
        let task_rx = Mutex::new(task_rx);
        let (done_tx, done_rx) = mpsc::channel::<(usize, PResult<Chunk>)>();
        let stop = AtomicBool::new(false);
        // Buffers of chunks already told, for the workers to reuse.
        let spare: Mutex<Vec<(Vec<u8>, Vec<Indexed>)>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..self.options.threads {
                let done_tx = done_tx.clone();
                let (task_rx, stop, starts, spare) = (&task_rx, &stop, &starts, &spare);
                scope.spawn(move || self.scan_chunks(task_rx, &done_tx, stop, starts, spare));
            }
            drop(done_tx);
            let in_flight = self.options.threads + 2;
            let mut sent = 0;
            // Sends the chunks from `first` (those before it are not needed) up to `n`.
            let send_upto = |first: usize, n: usize, sent: &mut usize| {
                *sent = (*sent).max(first);
                while *sent < n.min(chunks) {
                    // The workers outlive this loop, so the channel is open.
                    let _ = task_tx.send(*sent);
                    *sent += 1;
                }
            };
            let result = (|| {
                let mut arrived: BTreeMap<usize, PResult<Chunk>> = BTreeMap::new();
                let mut k = 0;
                let mut index = 0u64;
                loop {
                    if k == chunks {
                        // No sync point after the last chunk: the lexer reads the rest.
                        if !inp.seek_plain(starts[k])? {
                            unreachable!("chunked input is plain");
                        }
                        return Ok(read_events(inp, t, keys, v, index, &mut |_| false)?.ended());
                    }
                    send_upto(k, k + in_flight, &mut sent);
                    let chunk = wait_for_chunk(k, &mut arrived, &done_rx, inp, starts[k])?;
                    let chunk = chunk?;
                    let end = tell_chunk(&chunk, keys, v, inp, &mut index)?;
                    let chunk_start = chunk.start;
                    if let Ok(mut spare) = spare.lock() {
                        spare.push((chunk.text, chunk.events));
                    }
                    let lexer_from = match end {
                        ChunkEnd::Next => {
                            k += 1;
                            (inp.progress)(starts[k]).map_err(Stop::Fatal)?;
                            continue;
                        }
                        ChunkEnd::Closed(at) => {
                            inp.seek_plain(chunk_start + at as u64 + 1)?;
                            return Ok(None);
                        }
                        ChunkEnd::Unsure(at) => chunk_start + at as u64,
                    };
                    // The lexer reads on from there until it lands on a later chunk's start.
                    inp.seek_plain(lexer_from)?;
                    let mut next = k + 1;
                    let mut landed = |offset: u64| {
                        while next < chunks && starts[next] < offset {
                            next += 1;
                        }
                        next < chunks && starts[next] == offset
                    };
                    match read_events(inp, t, keys, v, index, &mut landed)? {
                        Stopped::At(i) => {
                            index = i;
                            k = next;
                            arrived.retain(|&i, _| i >= k);
                        }
                        end => return Ok(end.ended()),
                    }
                }
            })();
            stop.store(true, Ordering::Relaxed);
            drop(task_tx);
            result
        })
    }

    /// A scanning thread: takes chunk numbers from `tasks` until they end (or `stop`), and
    /// sends each chunk read and scanned to `done`.
    fn scan_chunks(
        &self,
        tasks: &Mutex<mpsc::Receiver<usize>>,
        done: &mpsc::Sender<(usize, PResult<Chunk>)>,
        stop: &AtomicBool,
        starts: &[u64],
        spare: &Mutex<Vec<(Vec<u8>, Vec<Indexed>)>>,
    ) {
        loop {
            let task = match tasks.lock() {
                Ok(rx) => rx.recv(),
                Err(_) => return,
            };
            let Ok(k) = task else { return };
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let (start, end) = (starts[k], starts[k + 1]);
            let (mut text, mut events) = spare
                .lock()
                .ok()
                .and_then(|mut spare| spare.pop())
                .unwrap_or_default();
            // A panic becomes the chunk's error, so the reading thread never waits
            // for a chunk that will not come.
            let scanned = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.read_into(&mut text, start, (end - start) as usize)
                    .map_err(Stop::Read)?;
                let end = scan_chunk(&text, &mut events);
                Ok(Chunk {
                    start,
                    text,
                    events,
                    end,
                })
            }));
            let chunk =
                scanned.unwrap_or_else(|p| Err(Stop::Fatal(Error::Panic(panic_message(&*p)))));
            if done.send((k, chunk)).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch, Damage};
    use std::fmt::Write as _;

    /// Writes down everything a visitor is told.
    #[derive(Default)]
    struct Log(String);

    impl Visitor for Log {
        fn header(&mut self, key: &[u8], raw: &[u8], after_events: bool) -> Result<()> {
            let (key, raw) = (String::from_utf8_lossy(key), String::from_utf8_lossy(raw));
            writeln!(self.0, "header {key} {raw} {after_events}").unwrap();
            Ok(())
        }

        fn event(&mut self, ev: &Event<'_>) -> Result<()> {
            let values: Vec<_> = (0..8)
                .map(|i| ev.value_text(i).map(String::from_utf8_lossy))
                .collect();
            writeln!(
                self.0,
                "event {} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                ev.offset,
                ev.index,
                String::from_utf8_lossy(ev.raw),
                ev.ph,
                ev.cat,
                ev.name,
                ev.pid_key,
                ev.thread_key,
                ev.ts,
                ev.dur,
                ev.flow_key,
                ev.args().map(String::from_utf8_lossy),
                values
            )
            .unwrap();
            Ok(())
        }
    }

    /// What reading `text` shows a visitor, and how it ends, read `options`' way.
    fn read(text: &[u8], options: ReadOptions) -> (String, std::result::Result<u64, String>) {
        let dir = scratch("events");
        let path = dir.join("t.json");
        std::fs::write(&path, text).unwrap();
        let mut log = Log::default();
        let result = read_trace_with(&path, &mut log, &mut |_| Ok(()), options)
            .map_err(|e| e.to_string().replace(&path.display().to_string(), "<path>"));
        (log.0, result)
    }

    fn sequential() -> ReadOptions {
        ReadOptions {
            threads: 1,
            chunk: CHUNK,
        }
    }

    /// Reading in parallel chunks of many sizes shows the visitor what a sequential read
    /// shows it, and ends the same way; returns the sequential result.
    fn same_in_parallel(text: &[u8]) -> std::result::Result<u64, String> {
        let expected = read(text, sequential());
        for chunk in [40, 97, 256, 1000, 4096] {
            for threads in [2, 3] {
                let got = read(text, ReadOptions { threads, chunk });
                assert_eq!(got.1, expected.1, "chunk {chunk}, {threads} threads");
                assert_eq!(got.0, expected.0, "chunk {chunk}, {threads} threads");
            }
        }
        expected.1
    }

    /// A trace like torch's exporter writes: one event per line, flows, metadata, header
    /// members before and after `traceEvents`.
    fn torch_like(events: usize) -> String {
        let mut t = String::from("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0}],\n  \"traceEvents\": [");
        for i in 0..events {
            let sep = if i == 0 { "\n" } else { ",\n" };
            let ts = 1000 + i * 7;
            match i % 5 {
                0 => write!(t, "{sep}{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":{i},\"args\":{{\"name\":\"t{i}\"}}}}"),
                1 => write!(t, "{sep}{{\"ph\":\"s\",\"id\":{i},\"pid\":1,\"tid\":2,\"ts\":{ts}.5,\"cat\":\"ac2g\",\"name\":\"ac2g\"}}"),
                2 => write!(t, "{sep}{{\"ph\":\"f\",\"id\":{},\"pid\":0,\"tid\":7,\"ts\":{ts},\"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"}}", i - 1),
                _ => write!(t, "{sep}{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k<{i}> ünï\",\"pid\":\"p{}\",\"tid\":7,\"ts\":{ts}.125,\"dur\":3.5e0,\"args\":{{\"grid\":[[1,2],[3,{i}]],\"ok\":true,\"none\":null,\"neg\":-0.25}}}}", i % 3),
            }
            .unwrap();
        }
        t.push_str("\n],\n  \"traceName\": \"t.json\"\n}\n");
        t
    }

    #[test]
    fn parallel_reads_see_what_a_sequential_read_sees() {
        let text = torch_like(300);
        assert_eq!(same_in_parallel(text.as_bytes()), Ok(text.len() as u64));
    }

    #[test]
    fn a_tee_tells_both_visitors_what_one_read_alone_sees() {
        let text = torch_like(300);
        let (alone, _) = read(text.as_bytes(), sequential());
        let dir = scratch("events-tee");
        let path = dir.join("t.json");
        std::fs::write(&path, &text).unwrap();
        let (mut a, mut b) = (Log::default(), Log::default());
        let options = ReadOptions {
            threads: 2,
            chunk: 97,
        };
        read_trace_with(&path, &mut Tee(&mut a, &mut b), &mut |_| Ok(()), options).unwrap();
        assert_eq!(
            (a.0.as_str(), b.0.as_str()),
            (alone.as_str(), alone.as_str())
        );
    }

    /// How scanning `bytes` ends (events told, the end) with `threads`.
    fn scan(bytes: &[u8], threads: usize) -> (String, ReadEnd) {
        let dir = scratch("events-gz");
        let path = dir.join("t.json.gz");
        std::fs::write(&path, bytes).unwrap();
        let mut log = Log::default();
        let options = ReadOptions {
            threads,
            chunk: CHUNK,
        };
        let end = scan_trace(&path, &mut log, &mut |_| Ok(()), options).unwrap();
        (log.0, end)
    }

    fn gzip(text: &[u8]) -> Vec<u8> {
        crate::testing::gzip_member(text, 1)
    }

    #[test]
    fn gzip_inflated_ahead_reads_as_inflated_in_line() {
        // Several blocks of inflated text, in one member and in three.
        let text = torch_like(12_000);
        assert!(text.len() > 4 * crate::read::members::BLOCK);
        let one = gzip(text.as_bytes());
        let (a, b) = text.as_bytes().split_at(text.len() / 3);
        let (b, c) = b.split_at(b.len() / 2);
        let three = [gzip(a), gzip(b), gzip(c)].concat();
        let mut truncated = one.clone();
        truncated.truncate(one.len() * 2 / 3);
        let mut trailing = three.clone();
        trailing.extend_from_slice(b"not gzip");
        let mut padded = one.clone();
        padded.extend_from_slice(&[0; 64]);
        let small = gzip(torch_like(10).as_bytes());
        for (what, bytes) in [
            ("one member", &one),
            ("three members", &three),
            ("truncated", &truncated),
            ("trailing data", &trailing),
            ("zero padding", &padded),
            ("small", &small),
        ] {
            let in_line = scan(bytes, 1);
            let ahead = scan(bytes, 2);
            assert_eq!(ahead.1, in_line.1, "{what}");
            assert!(ahead.0 == in_line.0, "{what}: the events differ");
        }
        assert_eq!(scan(&three, 2).1.gzip_members, 3);
        assert_eq!(scan(&three, 2).1.invalid, None);
        assert!(scan(&truncated, 2).1.invalid.is_some());
    }

    #[test]
    fn pretty_printed_and_single_line_traces_read_the_same_in_parallel() {
        // Kineto's layout: an event over several lines, `},\n  {` between events.
        let pretty = torch_like(120)
            .replace(",\n{", ",\n  {\n    ")
            .replace(",\"args\"", ",\n    \"args\"");
        assert!(same_in_parallel(pretty.as_bytes()).is_ok());
        // No newline at all: no sync point, so the lexer reads everything.
        let single = torch_like(120).replace('\n', "");
        assert!(same_in_parallel(single.as_bytes()).is_ok());
    }

    #[test]
    fn sync_points_inside_events_are_found_out() {
        // Objects in an array inside `args`, one per line: they look like event starts.
        let mut text = String::from("{\"traceEvents\": [\n");
        for i in 0..200 {
            if i > 0 {
                text.push_str(",\n");
            }
            write!(
                text,
                "{{\"ph\":\"X\",\"ts\":{i},\"args\":[\n{{\"a\":1}},\n{{\"b\":[\n{{}},\n{{}}]}}]}}"
            )
            .unwrap();
        }
        text.push_str("]}");
        assert!(same_in_parallel(text.as_bytes()).is_ok());
    }

    #[test]
    fn events_the_scanner_leaves_to_the_lexer_read_the_same_in_parallel() {
        // Escaped names and keys, and an event deeper than the scanner follows.
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        let text = torch_like(200)
            .replace("\"name\":\"k<13>", "\"name\":\"k\\\"q\\\"<13>")
            .replace(
                "\"cat\":\"kernel\",\"name\":\"k<58>",
                "\"c\\u0061t\":\"kernel\",\"name\":\"k<58>",
            )
            .replace("\"neg\":-0.25}}", &format!("\"neg\":{deep}}}}}"));
        assert!(same_in_parallel(text.as_bytes()).is_ok());
    }

    #[test]
    fn errors_are_the_same_in_parallel() {
        let text = torch_like(300);
        let middle = text.len() / 2;
        let at = middle + text[middle..].find("\"ok\":true").unwrap();
        let cases = [
            // A bad value in the middle of a chunk, a raw tab in a string, a trailing comma,
            // an event that is not an object, one without "ph", the file cut short.
            format!("{}tru_{}", &text[..at + 5], &text[at + 9..]),
            text.replacen("ünï", "\t", 40),
            text.replace("\n],", ",\n],"),
            text.replacen(",\n{\"ph\":\"s\"", ",\n7,{\"ph\":\"s\"", 30),
            text.replacen("{\"ph\":\"X\"", "{\"ph\":1", 25),
            text[..text.len() - 300].to_string(),
            text.replace("\n],\n", "\n]]\n"),
        ];
        for case in &cases {
            let result = same_in_parallel(case.as_bytes());
            assert!(result.is_err(), "accepted {}", &case[..80]);
        }
    }

    /// Random damage anywhere in a trace: the parallel read still sees and says exactly
    /// what the sequential one does.
    #[test]
    fn damaged_traces_read_the_same_in_parallel() {
        let text = torch_like(80).into_bytes();
        let specials: &[u8] = b"{}[]\",:\\ \n0123456789.-eEtn\x00\x80\xc3";
        let mut damage = Damage::new(0x9e37_79b9_7f4a_7c15);
        for _ in 0..150 {
            let mut damaged = text.clone();
            damage.edit(&mut damaged, specials);
            let _ = same_in_parallel(&damaged);
        }
    }

    /// The value extents point at each field's text as written, whether the fast scanner
    /// or the lexer read the event.
    #[test]
    fn values_are_where_the_fields_are_written() {
        let text = concat!(
            "{\"traceEvents\": [\n",
            "{\"ph\":\"s\", \"pid\" : \"Spans\", \"ts\":1.500e3,\"id\":42,\"tid\":true},\n",
            "{\"ph\":\"s\", \"pid\" : \"Sp\\\"ans\", \"ts\":1.500e3,\"id\":42,\"tid\":true},\n",
            "{\"p\\u0068\":\"f\",\"pid\":-7,\"ts\": 12.000 ,\"id\":\"0x1\",\"cat\":null}\n",
            "]}"
        );
        let (log, result) = read(text.as_bytes(), sequential());
        assert!(result.is_ok(), "{result:?}");
        let lines: Vec<&str> = log.lines().collect();
        // Slots: ph cat name pid tid ts dur id. The first event is scanned, the others
        // are read by the lexer (an escape in a field's value, an escaped key).
        assert!(
            lines[1].ends_with(
                r#"[Some("\"s\""), None, None, Some("\"Sp\\\"ans\""), Some("true"), Some("1.500e3"), None, Some("42")]"#
            ),
            "{}",
            lines[1]
        );
        assert!(
            lines[0].ends_with(
                r#"[Some("\"s\""), None, None, Some("\"Spans\""), Some("true"), Some("1.500e3"), None, Some("42")]"#
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[2].ends_with(
                r#"[Some("\"f\""), Some("null"), None, Some("-7"), None, Some("12.000"), None, Some("\"0x1\"")]"#
            ),
            "{}",
            lines[2]
        );
    }

    /// Per event: whether the scanner read it, `args` as the event gives it, and as
    /// `member` finds it in the event's text.
    #[derive(Default)]
    struct ArgsSeen(Vec<(bool, Option<String>, Option<String>)>);

    impl Visitor for ArgsSeen {
        fn header(&mut self, _: &[u8], _: &[u8], _: bool) -> Result<()> {
            Ok(())
        }
        fn event(&mut self, ev: &Event<'_>) -> Result<()> {
            let text = |t: Option<&[u8]>| t.map(|t| String::from_utf8_lossy(t).into_owned());
            self.0.push((
                ev.args_span != ARGS_UNKNOWN,
                text(ev.args()),
                text(member(ev.raw, b"args", Duplicates::Last)),
            ));
            Ok(())
        }
    }

    #[test]
    fn args_is_what_member_finds_in_the_text() {
        let text = concat!(
            "{\"traceEvents\": [\n",
            "{\"ph\":\"X\",\"args\":{\"a\":[1,{\"b\":\"}\"}]},\"ts\":1},\n",
            "{\"ph\":\"X\", \"args\" : {\"a\":1} ,\"args\":\"last\"},\n",
            "{\"ph\":\"X\",\"args\":7,\"tid\":1},\n",
            "{\"ph\":\"X\",\"tid\":1},\n",
            "{\"ph\":\"X\",\"args\":{}},\n",
            // Read by the lexer (an escaped key): looked up in the text.
            "{\"p\\u0068\":\"X\",\"args\":{\"c\":2},\"args\":{\"c\":3}}\n",
            "]}"
        );
        let dir = scratch("events-args");
        let path = dir.join("t.json");
        std::fs::write(&path, text).unwrap();
        for options in [
            sequential(),
            ReadOptions {
                threads: 2,
                chunk: 64,
            },
        ] {
            let mut seen = ArgsSeen::default();
            read_trace_with(&path, &mut seen, &mut |_| Ok(()), options).unwrap();
            let args: Vec<Option<&str>> = seen.0.iter().map(|s| s.1.as_deref()).collect();
            let want = [
                Some("{\"a\":[1,{\"b\":\"}\"}]}"),
                Some("\"last\""),
                Some("7"),
                None,
                Some("{}"),
                Some("{\"c\":3}"),
            ];
            assert_eq!(args, want);
            let scanned: Vec<bool> = seen.0.iter().map(|s| s.0).collect();
            assert_eq!(scanned, [true, true, true, true, true, false]);
            for (_, args, found) in &seen.0 {
                assert_eq!(args, found);
            }
        }
    }

    /// The events of `torch_like(n)` as the JSON Array Format: `[`, the events, then `tail`.
    fn array_of(n: usize, tail: &str) -> String {
        let object = torch_like(n);
        let start = object.find("\"traceEvents\": [").unwrap() + "\"traceEvents\": ".len();
        let end = object.rfind("\n],").unwrap();
        format!("{}{tail}", &object[start..end])
    }

    /// A visitor's log with each event's offset taken out (the forms place events apart).
    fn without_offsets(log: &str) -> Vec<String> {
        log.lines()
            .map(|l| {
                let mut parts = l.splitn(3, ' ');
                let (what, _offset, rest) = (parts.next(), parts.next(), parts.next());
                format!("{} {}", what.unwrap(), rest.unwrap_or(""))
            })
            .collect()
    }

    /// How reading `text` ends, sequentially: the form and the fault.
    fn end_of(text: &[u8]) -> ReadEnd {
        let dir = scratch("events-form");
        let path = dir.join("t.json");
        std::fs::write(&path, text).unwrap();
        scan_trace(&path, &mut Unvisited, &mut |_| Ok(()), sequential()).unwrap()
    }

    #[test]
    fn the_array_form_reads_its_events_closed_or_not() {
        let object = torch_like(300);
        let (events, _) = read(object.as_bytes(), sequential());
        let events: Vec<String> = without_offsets(&events)
            .into_iter()
            .filter(|l| l.starts_with("event "))
            .collect();
        assert_eq!(events.len(), 300);
        // Closed, closed with whitespace after it, left open after an event, after its
        // comma, after whitespace: every event, in order, in parallel chunks too.
        for (tail, closed) in [
            ("\n]", true),
            ("\n]\n \t\r\n", true),
            ("", false),
            (",\n", false),
            ("  \n\n", false),
            (",", false),
        ] {
            let text = array_of(300, tail);
            let bytes = same_in_parallel(text.as_bytes());
            assert_eq!(bytes, Ok(text.len() as u64), "{tail:?}");
            let (log, _) = read(text.as_bytes(), sequential());
            assert_eq!(without_offsets(&log), events, "{tail:?}");
            let end = end_of(text.as_bytes());
            assert_eq!(end.form, Form::Array { at: 0, closed }, "{tail:?}");
            assert_eq!(end.invalid, None);
        }
        // Empty arrays, with or without the `]`, after whitespace.
        for (text, at, closed) in [
            ("[]", 0, true),
            ("  [ ]\n", 2, true),
            ("[", 0, false),
            ("\n[ \n", 1, false),
        ] {
            let (log, result) = read(text.as_bytes(), sequential());
            assert_eq!(
                (log.as_str(), result),
                ("", Ok(text.len() as u64)),
                "{text:?}"
            );
            assert_eq!(end_of(text.as_bytes()).form, Form::Array { at, closed });
        }
        assert_eq!(end_of(object.as_bytes()).form, Form::Object);
    }

    #[test]
    fn the_array_form_is_strict_elsewhere() {
        let closed = array_of(40, "\n]");
        let cut = closed.find("\"k<13>").unwrap();
        let gz = gzip(closed.as_bytes());
        for (text, kind, needle) in [
            // Cut inside an event, a trailing comma before the `]`, text after it, a
            // second `]`, an element that is not an event, the object form left open.
            (
                closed[..cut].to_string(),
                FormatKind::Truncated,
                "end of file",
            ),
            (array_of(40, ",\n]"), FormatKind::Syntax, "trailing comma"),
            (array_of(40, "\n] {}"), FormatKind::Syntax, "extra data"),
            (array_of(40, "\n]]"), FormatKind::Syntax, "extra data"),
            (
                array_of(40, ",\n7\n]"),
                FormatKind::NotATrace,
                "not an object",
            ),
            (
                "[{\"ph\":\"X\"} {}]".into(),
                FormatKind::Syntax,
                "after an event",
            ),
            ("[,]".into(), FormatKind::Syntax, "expected"),
            (
                "\"x\"".into(),
                FormatKind::NotATrace,
                "neither a JSON object nor an array",
            ),
            ("".into(), FormatKind::NotATrace, "empty file"),
            (
                torch_like(40).replace("\n],\n  \"traceName\": \"t.json\"\n}\n", ""),
                FormatKind::Truncated,
                "unexpected end of file, expected ',' or ']'",
            ),
            (
                "{\"traceEvents\": [".into(),
                FormatKind::Truncated,
                "expected an event or ']'",
            ),
        ] {
            let invalid = end_of(text.as_bytes()).invalid;
            let invalid = invalid.unwrap_or_else(|| panic!("accepted {text:?}"));
            assert_eq!(invalid.kind, kind, "{text:?}: {invalid:?}");
            assert!(invalid.message.contains(needle), "{text:?}: {invalid:?}");
            assert!(same_in_parallel(text.as_bytes()).is_err());
        }
        // A gzip stream cut short is damage, not an array left open.
        let (_, end) = scan(&gz[..gz.len() * 2 / 3], 1);
        assert_eq!(end.invalid.map(|i| i.kind), Some(FormatKind::Gzip));
        let (log, end) = scan(&gz, 2);
        assert_eq!((log.lines().count(), end.invalid), (40, None));
    }

    #[test]
    fn sync_points_follow_a_comma_and_a_newline() {
        assert_eq!(sync_point(b"1,\n  {"), Some(5));
        assert_eq!(sync_point(b"},\r\n\t{"), Some(5));
        assert_eq!(sync_point(b"1, {\n{"), None);
        assert_eq!(sync_point(b"1,\nx,\n{"), Some(6));
        assert_eq!(sync_point(b"[\n{"), None);
    }
}

//! CUDA-graph annotations: what torch 2.15's exporter bakes into graphed work events when
//! it is given `annotations` (graph node id -> annotation) and a `graph_lanes` mode.
//!
//! A *graphed* event is a work activity (kernel, memcpy, memset) whose metadata names a
//! nonzero `"graph node id"`. Its annotation (rendered by Python into an args fragment, a
//! lane and a lane name) is appended to its args; with `graph_lanes="all"` it moves to the
//! annotated lane or the default stream, the `"stream"` member of its metadata is rewritten
//! in place (or appended), and the stream it ran on is kept as `"original_stream"`.
//!
//! [`GraphState`] is what the export learns while formatting and only uses at the end: the
//! lanes that kept work, the `gpu_user_annotation` events held back until then, and the
//! lanes events were moved to (named after the events). A worker's state travels to the
//! parent as bytes ([`GraphState::encode`]) and is merged in slice order.
//!
//! Node ids and streams are found in the metadata text with the rules of torch's regular
//! expressions (`"graph node id":\s*(\d+)`, `"stream":\s*\d+` on a Python `str`), whose
//! `\s` and `\d` are Unicode classes: Python hands over the exact classes of its own
//! Unicode database ([`CharClasses`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::json::render::{decode_char, push_int};

/// Categories torch looks graph node ids up for.
#[inline]
pub(crate) fn is_work(category: &[u8]) -> bool {
    matches!(category, b"kernel" | b"gpu_memcpy" | b"gpu_memset")
}

/// The category whose events wait for the end of the trace.
pub(crate) const USER_ANNOTATION: &[u8] = b"gpu_user_annotation";

/// Python's `\d` and `\s` for `str` patterns, beyond ASCII.
#[derive(Debug, Default, Clone)]
pub(crate) struct CharClasses {
    /// (first, last, code point of that run's zero): decimal digits, sorted.
    pub(crate) digits: Vec<(u32, u32, u32)>,
    /// Whitespace code points, sorted.
    pub(crate) spaces: Vec<u32>,
}

impl CharClasses {
    fn digit(&self, cp: u32) -> Option<u32> {
        if (0x30..=0x39).contains(&cp) {
            return Some(cp - u32::from(b'0'));
        }
        let i = self.digits.partition_point(|&(first, _, _)| first <= cp);
        let &(first, last, zero) = self.digits.get(i.checked_sub(1)?)?;
        (first..=last).contains(&cp).then(|| cp - zero)
    }

    fn space(&self, cp: u32) -> bool {
        matches!(cp, 0x09..=0x0d | 0x1c..=0x20) || self.spaces.binary_search(&cp).is_ok()
    }
}

/// One node's annotation, rendered as torch's `_annotation_args` renders it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Annotation {
    /// The fields as members (`"k": "v", ...`), already JSON text.
    pub(crate) args: Option<Vec<u8>>,
    /// The lane the annotation names.
    pub(crate) stream: Option<i64>,
    /// The lane's display name (`"Process Group Description"`).
    pub(crate) lane_name: Option<Vec<u8>>,
}

/// A graph node id found in metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeId {
    Id(u64),
    /// Nonzero but past `u64`: graphed, and no annotation key can match it.
    Huge,
}

/// The annotations of one export and its lane mode.
#[derive(Debug, Default)]
pub(crate) struct GraphAnnotations {
    pub(crate) entries: HashMap<u64, Annotation>,
    /// `graph_lanes="all"`: graphed events move to their lane or `default_stream`.
    pub(crate) lanes_all: bool,
    pub(crate) default_stream: i64,
    pub(crate) classes: CharClasses,
}

/// The span of a match in metadata text and the number it holds.
struct Match {
    start: usize,
    end: usize,
    value: Option<NodeId>,
}

impl GraphAnnotations {
    /// The first `"<key>":\s*\d+` in `md` (as `re.search` finds it).
    fn find(&self, md: &[u8], key: &[u8]) -> Option<Match> {
        let mut from = 0;
        while let Some(at) = find_bytes(&md[from..], key) {
            let start = from + at;
            let mut i = start + key.len();
            while let Some((cp, len)) = char_at(md, i) {
                if !self.classes.space(cp) {
                    break;
                }
                i += len;
            }
            let digits_start = i;
            let mut value: Option<u64> = Some(0);
            while let Some((cp, len)) = char_at(md, i) {
                let Some(d) = self.classes.digit(cp) else {
                    break;
                };
                value = value
                    .and_then(|v| v.checked_mul(10))
                    .and_then(|v| v.checked_add(u64::from(d)));
                i += len;
            }
            if i > digits_start {
                let value = match value {
                    Some(0) => None,
                    Some(v) => Some(NodeId::Id(v)),
                    None => Some(NodeId::Huge),
                };
                return Some(Match {
                    start,
                    end: i,
                    value,
                });
            }
            from = start + 1;
        }
        None
    }

    /// Applies the annotation of a work event with metadata `md` on `(device, tid)` at
    /// `ts`. Returns the lane it is written on; appends its extra args members to `extra`
    /// (joined with ","), and when its `"stream"` member is rewritten, the new metadata to
    /// `rewritten` (returning true).
    pub(crate) fn apply(
        &self,
        md: &[u8],
        (device, tid, ts): (i64, i64, i64),
        state: &mut GraphState,
        extra: &mut Vec<u8>,
        rewritten: &mut Vec<u8>,
    ) -> (i64, bool) {
        const NODE_KEY: &[u8] = b"\"graph node id\":";
        const STREAM_KEY: &[u8] = b"\"stream\":";
        let Some(node) = self.find(md, NODE_KEY).and_then(|m| m.value) else {
            return (tid, false);
        };
        let annotation = match node {
            NodeId::Id(id) => self.entries.get(&id),
            NodeId::Huge => None,
        };
        let (stream, lane_name) =
            annotation.map_or((None, None), |a| (a.stream, a.lane_name.as_deref()));
        if let Some(args) = annotation.and_then(|a| a.args.as_deref()) {
            push_part(extra, args);
        }
        let out_tid = if self.lanes_all {
            stream.unwrap_or(self.default_stream)
        } else {
            tid
        };
        let mut md_rewritten = false;
        if out_tid != tid {
            state.reassign((device, out_tid), ts, lane_name);
            let mut member = b"\"stream\": ".to_vec();
            push_int(&mut member, out_tid);
            match self.find(md, STREAM_KEY) {
                Some(m) => {
                    rewritten.extend_from_slice(&md[..m.start]);
                    rewritten.extend_from_slice(&member);
                    rewritten.extend_from_slice(&md[m.end..]);
                    md_rewritten = true;
                }
                None => push_part(extra, &member),
            }
            push_part(extra, b"\"original_stream\": ");
            push_int(extra, tid);
        } else if let Some(stream) = stream {
            push_part(extra, b"\"annotated_stream\": ");
            push_int(extra, stream);
        }
        (out_tid, md_rewritten)
    }
}

fn push_part(out: &mut Vec<u8>, part: &[u8]) {
    if !out.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(part);
}

fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut from = 0;
    while let Some(at) = haystack[from..].iter().position(|&b| b == first) {
        let i = from + at;
        if haystack[i..].starts_with(needle) {
            return Some(i);
        }
        from = i + 1;
    }
    None
}

/// The character at byte `i` and its length (ASCII fast path).
#[inline]
fn char_at(s: &[u8], i: usize) -> Option<(u32, usize)> {
    let &b = s.get(i)?;
    if b < 0x80 {
        Some((u32::from(b), 1))
    } else {
        Some(decode_char(&s[i..]))
    }
}

/// A lane events were moved to: (device, lane) -> (ts of the last one, its name).
type Lanes = BTreeMap<(i64, i64), (i64, Option<Vec<u8>>)>;

/// What formatting learns for the end of the trace (see the module docs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct GraphState {
    /// (device, lane) of every work event, where it was written.
    work: HashSet<(i64, i64)>,
    last_work: Option<(i64, i64)>,
    /// Held-back `gpu_user_annotation` events: their text and (device, lane, end offset).
    deferred_text: Vec<u8>,
    deferred: Vec<(i64, i64, usize)>,
    /// Lanes events were moved to.
    lanes: Lanes,
}

impl GraphState {
    #[inline]
    pub(crate) fn note_work(&mut self, device: i64, tid: i64) {
        if self.last_work != Some((device, tid)) {
            self.work.insert((device, tid));
            self.last_work = Some((device, tid));
        }
    }

    /// Holds back one event's text (torch writes these after all others, and only where
    /// work stayed).
    pub(crate) fn defer(&mut self, device: i64, tid: i64, text: &[u8]) {
        self.deferred_text.extend_from_slice(text);
        self.deferred.push((device, tid, self.deferred_text.len()));
    }

    /// A moved event: the lane takes its time, and its name unless it names none.
    fn reassign(&mut self, lane: (i64, i64), ts: i64, name: Option<&[u8]>) {
        let entry = self.lanes.entry(lane).or_insert((ts, None));
        entry.0 = ts;
        if let Some(name) = name {
            entry.1 = Some(name.to_vec());
        }
    }

    /// Adds the state of the slice that follows this one.
    pub(crate) fn merge(&mut self, later: GraphState) {
        self.work.extend(later.work);
        self.last_work = None;
        let offset = self.deferred_text.len();
        self.deferred_text.extend_from_slice(&later.deferred_text);
        self.deferred.extend(
            later
                .deferred
                .into_iter()
                .map(|(d, t, end)| (d, t, end + offset)),
        );
        for (lane, (ts, name)) in later.lanes {
            let name = name.map(|n| n.as_slice().to_vec());
            self.reassign(lane, ts, name.as_deref());
        }
    }

    /// The held-back events whose lane kept work, in order.
    pub(crate) fn kept_deferred(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.deferred.iter().filter_map(move |&(d, t, end)| {
            let text = &self.deferred_text[start..end];
            start = end;
            self.work.contains(&(d, t)).then_some(text)
        })
    }

    /// The lanes events were moved to, sorted: ((device, lane), ts, name).
    pub(crate) fn lanes(&self) -> impl Iterator<Item = ((i64, i64), i64, Option<&[u8]>)> {
        self.lanes
            .iter()
            .map(|(&lane, (ts, name))| (lane, *ts, name.as_deref()))
    }

    /// The state as bytes, for a worker to send to the parent.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.deferred_text.len());
        let mut work: Vec<_> = self.work.iter().copied().collect();
        work.sort_unstable();
        put_u64(&mut out, work.len() as u64);
        for (d, t) in work {
            put_i64(&mut out, d);
            put_i64(&mut out, t);
        }
        put_bytes(&mut out, &self.deferred_text);
        put_u64(&mut out, self.deferred.len() as u64);
        for &(d, t, end) in &self.deferred {
            put_i64(&mut out, d);
            put_i64(&mut out, t);
            put_u64(&mut out, end as u64);
        }
        put_u64(&mut out, self.lanes.len() as u64);
        for (&(d, t), (ts, name)) in &self.lanes {
            put_i64(&mut out, d);
            put_i64(&mut out, t);
            put_i64(&mut out, *ts);
            match name {
                Some(n) => {
                    out.push(1);
                    put_bytes(&mut out, n);
                }
                None => out.push(0),
            }
        }
        out
    }

    /// Reads what [`GraphState::encode`] wrote; anything else is an error.
    pub(crate) fn decode(bytes: &[u8]) -> Result<GraphState> {
        let mut r = Reader { bytes, at: 0 };
        let mut state = GraphState::default();
        for _ in 0..r.count(16)? {
            state.work.insert((r.i64()?, r.i64()?));
        }
        state.deferred_text = r.bytes()?.to_vec();
        let mut last_end = 0;
        for _ in 0..r.count(24)? {
            let (d, t, end) = (r.i64()?, r.i64()?, r.u64()? as usize);
            if end < last_end || end > state.deferred_text.len() {
                return Err(bad_state());
            }
            last_end = end;
            state.deferred.push((d, t, end));
        }
        if last_end != state.deferred_text.len() {
            return Err(bad_state());
        }
        for _ in 0..r.count(25)? {
            let lane = (r.i64()?, r.i64()?);
            let ts = r.i64()?;
            let name = match r.take(1)?[0] {
                0 => None,
                1 => Some(r.bytes()?.to_vec()),
                _ => return Err(bad_state()),
            };
            state.lanes.insert(lane, (ts, name));
        }
        if r.at != bytes.len() {
            return Err(bad_state());
        }
        Ok(state)
    }
}

fn bad_state() -> Error {
    Error::InvalidArgument("malformed CUDA-graph state from an export worker".into())
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(bad_state)?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    /// A count of items at least `item_size` bytes each (so a bad count fails fast).
    fn count(&mut self, item_size: usize) -> Result<usize> {
        let n = usize::try_from(self.u64()?).map_err(|_| bad_state())?;
        if n.saturating_mul(item_size) > self.bytes.len() - self.at {
            return Err(bad_state());
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = usize::try_from(self.u64()?).map_err(|_| bad_state())?;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graphs(lanes_all: bool) -> GraphAnnotations {
        let mut entries = HashMap::new();
        entries.insert(
            5,
            Annotation {
                args: Some(b"\"name\": \"a\"".to_vec()),
                stream: Some(3),
                lane_name: Some(b"pg".to_vec()),
            },
        );
        entries.insert(
            6,
            Annotation {
                args: Some(b"\"name\": \"b\"".to_vec()),
                ..Annotation::default()
            },
        );
        GraphAnnotations {
            entries,
            lanes_all,
            default_stream: 7,
            classes: CharClasses {
                digits: vec![(0x660, 0x669, 0x660)],
                spaces: vec![0xa0],
            },
        }
    }

    fn apply(g: &GraphAnnotations, md: &str, state: &mut GraphState) -> (i64, String, String) {
        let (mut extra, mut md2) = (Vec::new(), Vec::new());
        let (tid, rewritten) = g.apply(md.as_bytes(), (0, 20, 100), state, &mut extra, &mut md2);
        let md = if rewritten {
            String::from_utf8(md2).unwrap()
        } else {
            md.to_string()
        };
        (tid, md, String::from_utf8(extra).unwrap())
    }

    #[test]
    fn lanes_none_reports_the_annotated_stream() {
        let g = graphs(false);
        let mut s = GraphState::default();
        let (tid, md, extra) = apply(&g, r#""stream": 20, "graph node id": 5"#, &mut s);
        assert_eq!(tid, 20);
        assert_eq!(md, r#""stream": 20, "graph node id": 5"#);
        assert_eq!(extra, r#""name": "a","annotated_stream": 3"#);
        assert!(s.lanes.is_empty());
    }

    #[test]
    fn lanes_all_moves_and_rewrites_the_stream() {
        let g = graphs(true);
        let mut s = GraphState::default();
        let (tid, md, extra) = apply(&g, "\"stream\":\u{a0}20, \"graph node id\": 6", &mut s);
        assert_eq!(tid, 7);
        assert_eq!(md, r#""stream": 7, "graph node id": 6"#);
        assert_eq!(extra, r#""name": "b","original_stream": 20"#);
        let (tid, _, extra) = apply(&g, r#""graph node id": 5"#, &mut s);
        assert_eq!(tid, 3);
        assert_eq!(extra, r#""name": "a","stream": 3,"original_stream": 20"#);
        // An unannotated graphed event goes to the default stream too.
        let (tid, _, extra) = apply(&g, r#""graph node id": 99"#, &mut s);
        assert_eq!(
            (tid, extra.as_str()),
            (7, r#""stream": 7,"original_stream": 20"#)
        );
        assert_eq!(
            s.lanes().collect::<Vec<_>>(),
            vec![((0, 3), 100, Some(&b"pg"[..])), ((0, 7), 100, None)]
        );
    }

    #[test]
    fn node_ids_follow_python_regex_rules() {
        let g = graphs(true);
        let mut s = GraphState::default();
        // No digits after the first key: the search goes on to the next one.
        let (tid, _, _) = apply(&g, r#""graph node id": x, "graph node id":5"#, &mut s);
        assert_eq!(tid, 3);
        // Zero and absent ids are not graphed.
        assert_eq!(apply(&g, r#""graph node id": 000"#, &mut s).0, 20);
        assert_eq!(apply(&g, r#""graph node id ": 5"#, &mut s).0, 20);
        // Unicode digits and spaces count, as \d and \s do on str.
        assert_eq!(apply(&g, "\"graph node id\":\u{a0}\u{665}", &mut s).0, 3);
        // Past u64: graphed, matched by nothing.
        let (tid, _, extra) = apply(&g, r#""graph node id": 99999999999999999999999"#, &mut s);
        assert_eq!(
            (tid, extra.as_str()),
            (7, r#""stream": 7,"original_stream": 20"#)
        );
    }

    #[test]
    fn state_round_trips_and_merges_in_order() {
        let mut a = GraphState::default();
        a.note_work(0, 7);
        a.defer(0, 7, b"A");
        a.defer(0, 9, b"B");
        a.reassign((0, 7), 10, Some(b"x"));
        let mut b = GraphState::default();
        b.note_work(0, 9);
        b.defer(0, 8, b"C");
        b.defer(0, 9, b"D");
        b.reassign((0, 7), 20, None);
        b.reassign((0, 3), 30, Some(b""));
        let decoded = GraphState::decode(&b.encode()).unwrap();
        assert_eq!(decoded.work, b.work);
        assert_eq!(decoded.lanes, b.lanes);
        a.merge(decoded);
        let kept: Vec<&[u8]> = a.kept_deferred().collect();
        assert_eq!(kept, vec![&b"A"[..], b"B", b"D"]);
        assert_eq!(
            a.lanes().collect::<Vec<_>>(),
            vec![((0, 3), 30, Some(&b""[..])), ((0, 7), 20, Some(&b"x"[..]))]
        );
        let mut bytes = b.encode();
        bytes.pop();
        assert!(GraphState::decode(&bytes).is_err());
        assert!(GraphState::decode(&[0xff; 8]).is_err());
    }
}

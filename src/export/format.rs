//! Event text, byte for byte as torch's Python exporter (torch 2.15) writes it, except that
//! every string and fragment is strict JSON (see `fragment`).
//!
//! The file is: [`push_header`] (envelope keys and `"traceEvents": [`), [`push_process_events`]
//! (M events per device and thread), [`push_batch`] for every batch in order, then
//! [`push_tail`] (span, iteration start, window end, `traceName`).

use crate::export::fragment::{self, Outcome};
use crate::export::graphs::{self, GraphState};
use crate::export::trace::{is_kernel, needs_correlation_id, Batch, Summary, Timing};
use crate::json::render::{push_int, push_json_string, push_micros};

/// The envelope keys written before `traceEvents`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Header {
    /// `deviceProperties` as JSON (a list; `[]` without CUDA).
    pub(crate) device_properties: Vec<u8>,
    /// Trace metadata, in order: key (escaped here) and JSON value text (checked here).
    pub(crate) metadata: Vec<(Vec<u8>, Vec<u8>)>,
    /// Integer keys written after the metadata (the CUDA runtime and driver versions).
    pub(crate) versions: Vec<(String, i64)>,
    /// `"cudaGraphInlineAnnotated": true`: some graphed work event has an annotation.
    pub(crate) inline_annotated: bool,
}

/// `"ts"` of an event: nanoseconds relative to the base, clamped at 0, in microseconds.
#[inline]
fn push_rel(out: &mut Vec<u8>, summary: &Summary, ns: i128) {
    push_micros(out, (ns - summary.base_ns).max(0));
}

pub(crate) fn push_header(out: &mut Vec<u8>, summary: &Summary, header: &Header) {
    out.extend_from_slice(b"{\n\"schemaVersion\": 1,\n\"deviceProperties\": ");
    fragment::push_value(out, &header.device_properties);
    out.extend_from_slice(b",\n");
    for (key, value) in &header.metadata {
        push_json_string(out, key);
        out.extend_from_slice(b": ");
        fragment::push_value(out, value);
        out.extend_from_slice(b",\n");
    }
    for (key, version) in &header.versions {
        push_json_string(out, key.as_bytes());
        out.extend_from_slice(b": ");
        push_int(out, *version);
        out.extend_from_slice(b",\n");
    }
    out.extend_from_slice(b"\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": ");
    push_int(out, summary.base_ns);
    out.extend_from_slice(b",\n");
    if header.inline_annotated {
        out.extend_from_slice(b"\"cudaGraphInlineAnnotated\": true,\n");
    }
    out.extend_from_slice(b"\"traceEvents\": [\n");
}

/// One `"ph":"M"` event; `pid` is written as given (a number, or a quoted name).
fn push_metadata_event(
    out: &mut Vec<u8>,
    name: &str,
    ts: &[u8],
    pid: &[u8],
    tid: i64,
    arg_key: &str,
    arg_value: &[u8],
) {
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\",\"ts\":");
    out.extend_from_slice(ts);
    out.extend_from_slice(b",\"pid\":");
    out.extend_from_slice(pid);
    out.extend_from_slice(b",\"tid\":");
    push_int(out, tid);
    out.extend_from_slice(b",\"args\":{\"");
    out.extend_from_slice(arg_key.as_bytes());
    out.extend_from_slice(b"\":");
    out.extend_from_slice(arg_value);
    out.extend_from_slice(b"}},\n");
}

/// A thread's (lane's) two metadata events: `thread_name` (`name_json`, a JSON string) and
/// `thread_sort_index` (its tid).
fn push_thread_events(out: &mut Vec<u8>, ts: &[u8], pid: &[u8], tid: i64, name_json: &[u8]) {
    push_metadata_event(out, "thread_name", ts, pid, tid, "name", name_json);
    push_metadata_event(
        out,
        "thread_sort_index",
        ts,
        pid,
        tid,
        "sort_index",
        &int_text(tid),
    );
}

fn rel_text(summary: &Summary, ns: i128) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    push_rel(&mut v, summary, ns);
    v
}

fn int_text(value: impl itoa::Integer) -> Vec<u8> {
    itoa::Buffer::new().format(value).as_bytes().to_vec()
}

/// Process name/label/sort-index events per device, then thread name/sort-index events per
/// (device, thread), each stamped with the first timestamp seen there. Returns the count.
pub(crate) fn push_process_events(out: &mut Vec<u8>, summary: &Summary) -> u64 {
    let mut events = 0;
    for &(device, first_ts) in &summary.devices {
        let ts = rel_text(summary, first_ts.into());
        let pid = int_text(device);
        let (label, sort_index): (String, i128) = if device == summary.host_pid || device < 0 {
            let label = if device == summary.host_pid {
                "CPU"
            } else {
                "Overhead"
            };
            let sort = if device >= 0 {
                device.into()
            } else {
                0x100_0000
            };
            (label.to_string(), sort)
        } else {
            (format!("GPU {device}"), 5_000_000 + i128::from(device))
        };
        push_metadata_event(out, "process_name", &ts, &pid, 0, "name", b"\"python\"");
        push_metadata_event(
            out,
            "process_labels",
            &ts,
            &pid,
            0,
            "labels",
            format!("\"{label}\"").as_bytes(),
        );
        push_metadata_event(
            out,
            "process_sort_index",
            &ts,
            &pid,
            0,
            "sort_index",
            &int_text(sort_index),
        );
        events += 3;
    }
    for &((device, tid), first_ts) in &summary.threads {
        let ts = rel_text(summary, first_ts.into());
        let pid = int_text(device);
        let name = if device == summary.host_pid || device < 0 {
            format!("\"thread {tid}\"")
        } else {
            format!("\"stream {tid} \"")
        };
        push_thread_events(out, &ts, &pid, tid, name.as_bytes());
        events += 2;
    }
    events
}

/// Formats every activity of `batch` (and its flow event, if any). The batch must have
/// passed [`Batch::validate`] against `summary`. With CUDA-graph annotations, `graph`
/// collects what the end of the trace needs. Returns the number of events written.
// Long because the export's per-activity loop keeps the batch's sparse columns (correlation
// ids, flows, comms metadata) advancing in step with the rows in one place; a helper per step
// would have to hand all three cursors around.
#[allow(clippy::too_many_lines)]
pub(crate) fn push_batch(
    out: &mut Vec<u8>,
    summary: &Summary,
    batch: &Batch,
    graph: &mut GraphState,
) -> u64 {
    let timings = &summary.timings[batch.start..batch.start + batch.len()];
    let mut correlation_ids = batch.correlation_ids.iter();
    let mut flows = batch.flows.iter();
    let mut comms = batch.comms_metadata.iter();
    let mut events = 0;
    let (mut extra, mut rewritten) = (Vec::new(), Vec::new());
    for (i, t) in timings.iter().enumerate() {
        let cat = batch.categories.get(i);
        let linked = batch.linked_correlation_ids[i];
        let external_id = if linked != 0 {
            linked
        } else if needs_correlation_id(cat, linked) {
            correlation_ids.next().copied().unwrap_or(0)
        } else {
            0
        };
        let comms_metadata = if is_kernel(cat) {
            comms.next().unwrap_or_default()
        } else {
            &[]
        };
        let mut metadata = batch.metadata.get(i);
        let mut placed = *t;
        let mut deferred = false;
        extra.clear();
        if let Some(annotations) = &summary.graphs {
            if graphs::is_work(cat) {
                if !metadata.is_empty() {
                    rewritten.clear();
                    let (tid, md_rewritten) = annotations.apply(
                        metadata,
                        (t.device, t.tid, t.ts),
                        graph,
                        &mut extra,
                        &mut rewritten,
                    );
                    placed.tid = tid;
                    if md_rewritten {
                        metadata = &rewritten;
                    }
                }
                graph.note_work(placed.device, placed.tid);
            } else {
                deferred = cat == graphs::USER_ANNOTATION;
            }
        }
        let mark = out.len();
        push_activity(
            out,
            summary,
            &placed,
            cat,
            batch.names.get(i),
            external_id,
            metadata,
            comms_metadata,
            &extra,
        );
        if deferred {
            // Written at the end, where its lane kept work; its flow is never written.
            graph.defer(placed.device, placed.tid, &out[mark..]);
            out.truncate(mark);
            if batch.flow_ids[i] > 0 {
                flows.next();
            }
            continue;
        }
        events += 1;
        if batch.flow_ids[i] > 0 {
            if let Some(flow) = flows.next() {
                push_flow(
                    out,
                    summary,
                    &placed,
                    batch.flow_ids[i],
                    flow.flow_type,
                    flow.start,
                );
                events += 1;
            }
        }
    }
    events
}

/// What a trace with CUDA-graph annotations writes after its activities: the held-back
/// `gpu_user_annotation` events whose lane kept work, then the names and sort indices of
/// the lanes events were moved to that the first pass did not see. Returns the count.
pub(crate) fn push_graph_closing(out: &mut Vec<u8>, summary: &Summary, graph: &GraphState) -> u64 {
    let mut events = 0;
    for text in graph.kept_deferred() {
        out.extend_from_slice(text);
        events += 1;
    }
    for ((device, tid), ts, name) in graph.lanes() {
        if summary
            .threads
            .binary_search_by(|(key, _)| key.cmp(&(device, tid)))
            .is_ok()
        {
            continue;
        }
        let ts = rel_text(summary, ts.into());
        let pid = int_text(device);
        let mut value = Vec::new();
        match name {
            Some(name) if !name.is_empty() => push_json_string(&mut value, name),
            _ => push_json_string(&mut value, format!("stream {tid} ").as_bytes()),
        }
        push_thread_events(out, &ts, &pid, tid, &value);
        events += 2;
    }
    events
}

/// `,"pid":…,"tid":…,"ts":…` of an activity (or of its flow event).
#[inline]
fn push_place(out: &mut Vec<u8>, summary: &Summary, t: &Timing) {
    out.extend_from_slice(b",\"pid\":");
    push_int(out, t.device);
    out.extend_from_slice(b",\"tid\":");
    push_int(out, t.tid);
    out.extend_from_slice(b",\"ts\":");
    push_rel(out, summary, t.ts.into());
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn push_activity(
    out: &mut Vec<u8>,
    summary: &Summary,
    t: &Timing,
    cat: &[u8],
    name: &[u8],
    external_id: i64,
    metadata: &[u8],
    comms_metadata: &[u8],
    extra: &[u8],
) {
    #[cfg(feature = "count-hooks")]
    crate::extra_work::per_event(crate::extra_work::Site::Format);
    let instant = cat == b"cpu_instant_event";
    out.extend_from_slice(if instant {
        b"{\"ph\":\"i\",\"s\":\"t\",\"cat\":"
    } else {
        b"{\"ph\":\"X\",\"cat\":"
    });
    push_json_string(out, cat);
    out.extend_from_slice(b",\"name\":");
    push_json_string(out, name);
    push_place(out, summary, t);
    if !instant {
        out.extend_from_slice(b",\"dur\":");
        push_micros(out, t.dur.max(0).into());
    }
    push_args(out, external_id, metadata, comms_metadata, extra);
    out.extend_from_slice(b"},\n");
}

/// `,"args":{...}` joining the External id, the fragments and `extra` (members that are
/// already valid JSON: the CUDA-graph annotation) with ",", as torch does.
///
/// Torch appends any non-empty fragment. A whitespace-only fragment is valid JSON only
/// when it is the sole part (`"args":{ }`); beside other parts it would leave a dangling
/// comma, so there it is dropped.
fn push_args(
    out: &mut Vec<u8>,
    external_id: i64,
    metadata: &[u8],
    comms_metadata: &[u8],
    extra: &[u8],
) {
    let fragments = [metadata, comms_metadata];
    let parts = usize::from(external_id != 0)
        + fragments.iter().filter(|f| !f.is_empty()).count()
        + usize::from(!extra.is_empty());
    if parts == 0 {
        return;
    }
    let mark = out.len();
    out.extend_from_slice(b",\"args\":{");
    let body = out.len();
    let mut blank: Option<&[u8]> = None;
    if external_id != 0 {
        out.extend_from_slice(b"\"External id\": ");
        push_int(out, external_id);
    }
    for frag in fragments.into_iter().filter(|f| !f.is_empty()) {
        let before = out.len();
        if before > body {
            out.push(b',');
        }
        if fragment::push_members(out, frag) == Outcome::Empty {
            out.truncate(before);
            blank = Some(frag);
        }
    }
    if !extra.is_empty() {
        if out.len() > body {
            out.push(b',');
        }
        out.extend_from_slice(extra);
    }
    if out.len() == body {
        match blank {
            Some(ws) if parts == 1 => out.extend_from_slice(ws),
            _ => {
                out.truncate(mark);
                return;
            }
        }
    }
    out.push(b'}');
}

fn push_flow(
    out: &mut Vec<u8>,
    summary: &Summary,
    t: &Timing,
    id: i64,
    flow_type: i64,
    start: bool,
) {
    let cat: &[u8] = if flow_type == 1 { b"fwdbwd" } else { b"ac2g" };
    out.extend_from_slice(if start {
        b"{\"ph\":\"s\",\"id\":"
    } else {
        b"{\"ph\":\"f\",\"id\":"
    });
    push_int(out, id);
    push_place(out, summary, t);
    out.extend_from_slice(b",\"cat\":\"");
    out.extend_from_slice(cat);
    out.extend_from_slice(b"\",\"name\":\"");
    out.extend_from_slice(cat);
    out.extend_from_slice(if start {
        b"\"},\n"
    } else {
        b"\",\"bp\":\"e\"},\n"
    });
}

/// The closing events and `traceName`. Returns the number of events written.
pub(crate) fn push_tail(out: &mut Vec<u8>, summary: &Summary, trace_name: &[u8]) -> u64 {
    let mut events = 1;
    if summary.total_activities > 0 {
        let its = rel_text(summary, summary.min_ts);
        out.extend_from_slice(
            b"{\"ph\":\"X\",\"cat\":\"Trace\",\"name\":\"PyTorch Profiler (0)\",\
              \"pid\":\"Spans\",\"tid\":\"PyTorch Profiler\",\"ts\":",
        );
        out.extend_from_slice(&its);
        out.extend_from_slice(b",\"dur\":");
        push_micros(out, (summary.max_end - summary.min_ts).max(0));
        out.extend_from_slice(b",\"args\":{\"Op count\": 0}},\n");
        push_metadata_event(
            out,
            "process_sort_index",
            &its,
            b"\"Spans\"",
            0,
            "sort_index",
            &int_text(0x2000_0000),
        );
        out.extend_from_slice(
            b"{\"ph\":\"i\",\"s\":\"g\",\"name\":\"Iteration Start: PyTorch Profiler\",\
              \"pid\":\"Traces\",\"tid\":\"Trace PyTorch Profiler\",\"ts\":",
        );
        out.extend_from_slice(&its);
        out.extend_from_slice(b"},\n");
        events += 3;
    }
    out.extend_from_slice(
        b"{\"ph\":\"i\",\"s\":\"g\",\"name\":\"Record Window End\",\"pid\":\"\",\"tid\":\"\",\"ts\":",
    );
    push_rel(out, summary, summary.max_end + 1000);
    out.extend_from_slice(b"}\n],\n\"traceName\": ");
    push_json_string(out, trace_name);
    out.extend_from_slice(b"\n}\n");
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::trace::{FirstPass, Flow, StrColumn};

    fn text(v: &[u8]) -> &str {
        std::str::from_utf8(v).unwrap()
    }

    fn one_activity(cat: &str, dur: i64, linked: i64, md: &str) -> (Summary, Batch) {
        let mut fp = FirstPass::new();
        fp.push(42, 42, 5_000_123_456, dur);
        let summary = fp.finish(5_000_000_000, 42);
        let batch = Batch {
            start: 0,
            categories: [cat].into_iter().collect(),
            names: ["op \"x\""].into_iter().collect(),
            metadata: [md].into_iter().collect(),
            linked_correlation_ids: vec![linked],
            flow_ids: vec![0],
            ..Batch::default()
        };
        (summary, batch)
    }

    #[test]
    fn complete_event_with_external_id_and_metadata() {
        let (summary, mut batch) = one_activity("cpu_op", 1500, 0, r#""Ev Idx": 3"#);
        batch.correlation_ids = vec![17];
        batch.validate(&summary).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            push_batch(&mut out, &summary, &batch, &mut GraphState::default()),
            1
        );
        assert_eq!(
            text(&out),
            "{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op \\\"x\\\"\",\"pid\":42,\"tid\":42,\
             \"ts\":123.456,\"dur\":1.500,\"args\":{\"External id\": 17,\"Ev Idx\": 3}},\n"
        );
    }

    #[test]
    fn instant_event_has_no_duration_and_negative_duration_clamps() {
        let (summary, mut batch) = one_activity("cpu_instant_event", -5, 0, "");
        batch.correlation_ids = vec![0];
        let mut out = Vec::new();
        push_batch(&mut out, &summary, &batch, &mut GraphState::default());
        assert_eq!(
            text(&out),
            "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cpu_instant_event\",\"name\":\"op \\\"x\\\"\",\
             \"pid\":42,\"tid\":42,\"ts\":123.456},\n"
        );
        let (summary, mut batch) = one_activity("cpu_op", -5, 0, "");
        batch.correlation_ids = vec![0];
        out.clear();
        push_batch(&mut out, &summary, &batch, &mut GraphState::default());
        assert!(text(&out).contains("\"dur\":0.000}"));
    }

    #[test]
    fn kernel_uses_linked_id_and_comms_metadata() {
        let (summary, mut batch) = one_activity("kernel", 10, 99, r#""stream": 7"#);
        batch.flow_ids = vec![5];
        batch.flows = vec![Flow {
            flow_type: 2,
            start: false,
        }];
        batch.comms_metadata = StrColumn::from_iter([r#""Collective name": "allreduce""#]);
        batch.validate(&summary).unwrap();
        let mut out = Vec::new();
        assert_eq!(
            push_batch(&mut out, &summary, &batch, &mut GraphState::default()),
            2
        );
        let s = text(&out);
        assert!(s.contains(
            "\"args\":{\"External id\": 99,\"stream\": 7,\"Collective name\": \"allreduce\"}},\n"
        ));
        assert!(s.ends_with(
            "{\"ph\":\"f\",\"id\":5,\"pid\":42,\"tid\":42,\"ts\":123.456,\
             \"cat\":\"ac2g\",\"name\":\"ac2g\",\"bp\":\"e\"},\n"
        ));
    }

    #[test]
    fn blank_fragment_only_when_alone() {
        let mut out = Vec::new();
        push_args(&mut out, 0, b"  ", b"", b"");
        assert_eq!(text(&out), ",\"args\":{  }");
        out.clear();
        push_args(&mut out, 3, b"  ", b"", b"");
        assert_eq!(text(&out), ",\"args\":{\"External id\": 3}");
        out.clear();
        push_args(&mut out, 0, b" ", b" ", b"");
        assert_eq!(text(&out), "");
        out.clear();
        push_args(&mut out, 0, b"", b"", b"");
        assert_eq!(text(&out), "");
    }

    #[test]
    fn empty_trace_tail() {
        let summary = FirstPass::new().finish(0, 1);
        let mut out = Vec::new();
        assert_eq!(push_tail(&mut out, &summary, b"t.json"), 1);
        assert_eq!(
            text(&out),
            "{\"ph\":\"i\",\"s\":\"g\",\"name\":\"Record Window End\",\"pid\":\"\",\"tid\":\"\",\
             \"ts\":1.000}\n],\n\"traceName\": \"t.json\"\n}\n"
        );
    }

    #[test]
    fn process_events_label_devices() {
        let mut fp = FirstPass::new();
        fp.push(42, 7, 2000, 1);
        fp.push(0, 3, 3000, 1);
        fp.push(-1, 0, 4000, 1);
        let summary = fp.finish(0, 42);
        let mut out = Vec::new();
        assert_eq!(push_process_events(&mut out, &summary), 15);
        let s = text(&out);
        assert!(s.contains("\"args\":{\"labels\":\"Overhead\"}"));
        assert!(s.contains("\"pid\":-1,\"tid\":0,\"args\":{\"sort_index\":16777216}"));
        assert!(s.contains("\"pid\":0,\"tid\":0,\"args\":{\"sort_index\":5000000}"));
        assert!(s.contains("\"pid\":0,\"tid\":3,\"args\":{\"name\":\"stream 3 \"}"));
        assert!(s.contains("\"pid\":42,\"tid\":7,\"args\":{\"name\":\"thread 7\"}"));
    }

    #[test]
    fn whole_file_is_strict_json() {
        let (summary, mut batch) = one_activity("cpu_op", 1, 0, "\"bad\": NaN, \"p\": \"C:\\x\"");
        batch.correlation_ids = vec![1];
        let header = Header {
            device_properties: b"[]".to_vec(),
            metadata: vec![
                (b"k\"ey".to_vec(), b"\"C:\\dir\"".to_vec()),
                (b"n".to_vec(), b"Infinity".to_vec()),
            ],
            versions: vec![("cuda_runtime_version".into(), 12080)],
            inline_annotated: false,
        };
        let mut out = Vec::new();
        push_header(&mut out, &summary, &header);
        push_process_events(&mut out, &summary);
        push_batch(&mut out, &summary, &batch, &mut GraphState::default());
        push_tail(&mut out, &summary, b"C:\\t.json");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["k\"ey"], "C:\\dir");
        assert_eq!(v["n"], "Infinity");
        assert_eq!(v["traceEvents"][5]["args"]["bad"], "NaN");
        assert_eq!(v["traceName"], "C:\\t.json");
    }
}

#[cfg(test)]
mod throughput {
    use super::*;
    use crate::export::trace::FirstPass;

    /// Formatting speed on record_shapes-like events (run with --ignored --nocapture).
    #[test]
    #[ignore]
    fn format_throughput_report() {
        let n = 300_000;
        let mut fp = FirstPass::new();
        for i in 0..n as i64 {
            fp.push(4242, 4242, 1_796_028_311_502_385_758 + i * 1500, 1234);
        }
        let summary = fp.finish(1_790_000_000_000_000_000, 4242);
        let md = r#""Sequence number": 0, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", "1"], "Input type": ["float", "float", "Scalar"], "Input Strides": [[8, 1], [8, 1], []], "Input Dims": [[8, 8], [8, 8], []], "Ev Idx": 11"#;
        let batch = Batch {
            start: 0,
            categories: (0..n).map(|_| "cpu_op").collect(),
            names: (0..n).map(|_| "aten::add").collect(),
            metadata: (0..n).map(|_| md).collect(),
            linked_correlation_ids: vec![0; n],
            flow_ids: vec![0; n],
            correlation_ids: (0..n as i64).collect(),
            ..Batch::default()
        };
        let mut out = Vec::with_capacity(200 << 20);
        let t = std::time::Instant::now();
        push_batch(&mut out, &summary, &batch, &mut GraphState::default());
        let dt = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        let mut valid = 0;
        for _ in 0..n {
            valid += usize::from(crate::export::fragment::is_valid_members(
                std::hint::black_box(md.as_bytes()),
            ));
        }
        let check = t.elapsed().as_secs_f64() / n as f64;
        assert_eq!(valid, n);
        println!(
            "{n} events, {:.1} MB in {:.3} s: {:.0} MB/s, {:.0} ns/event (fragment check {:.0} ns)",
            out.len() as f64 / 1e6,
            dt,
            out.len() as f64 / 1e6 / dt,
            dt / n as f64 * 1e9,
            check * 1e9
        );
    }
}

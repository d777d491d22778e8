//! Whole merges: every event once on one clock, events without a usable pid, step
//! alignment with a filter and parts, bad sources.

use super::ids::ID_PHASES;
use super::*;
use crate::testing::{entries, scratch};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::io::Read;

fn no_progress() -> impl FnMut(u64) -> Result<()> {
    |_| Ok(())
}

/// One rank's trace as torch or Kineto write it: a CPU process `pid` with threads,
/// GPU 0 (pid 0), launch flows CPU -> kernel with ids from 1, fwdbwd flows, a
/// `ProfilerStep#N` per step, instants on string pids; the base before or after the
/// events (or none: absolute `ts`), `distributedInfo` with `rank` (or none).
struct Rank {
    pid: u32,
    base: Option<i128>,
    base_after: bool,
    rank: Option<i64>,
    start_us: u64,
    steps: usize,
    first_step: usize,
    pretty: bool,
}

// Long because it writes one synthetic rank's trace text field by field, as the
// tests' fixture; its lines are the trace's shape, in the order a reader sees it.
#[allow(clippy::too_many_lines)]
fn rank_trace(r: &Rank) -> String {
    let mut events = Vec::new();
    let p = r.pid;
    for (pid, label, sort) in [
        (p.to_string(), "CPU", p as i64),
        ("0".into(), "GPU 0", 5000000),
    ] {
        events.push(format!(
            r#"{{"name":"process_name","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"name":"python3"}}}}"#
        ));
        events.push(format!(
            r#"{{"name":"process_labels","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"labels":"{label}"}}}}"#
        ));
        events.push(format!(
            r#"{{"name":"process_sort_index","ph":"M","ts":0.000,"pid":{pid},"tid":0,"args":{{"sort_index":{sort}}}}}"#
        ));
    }
    events.push(format!(
        r#"{{"name":"thread_name","ph":"M","ts":0.000,"pid":{p},"tid":{p},"args":{{"name":"thread {p}"}}}}"#
    ));
    events.push(
        r#"{"name":"thread_name","ph":"M","ts":0.000,"pid":0,"tid":7,"args":{"name":"stream 7"}}"#
            .into(),
    );
    let mut kernels = Vec::new();
    for s in 0..r.steps {
        let t = r.start_us + s as u64 * 1000;
        let n = r.first_step + s;
        events.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{n}","pid":{p},"tid":{p},"ts":{t}.125,"dur":900.000,"args":{{"External id":{n}}}}}"#
        ));
        for k in 0..3u64 {
            let id = s as u64 * 3 + k + 1;
            let lt = t + 10 + k * 100;
            events.push(format!(
                r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":{p},"tid":{p},"ts":{lt}.500,"dur":5.000,"args":{{"correlation":{id}}}}}"#
            ));
            events.push(format!(
                r#"{{"ph":"s","id":{id},"pid":{p},"tid":{p},"ts":{lt}.500,"cat":"ac2g","name":"ac2g"}}"#
            ));
            kernels.push(format!(
                r#"{{"ph":"X","cat":"kernel","name":"k{k}","pid":0,"tid":7,"ts":{}.000,"dur":30.000,"args":{{"correlation":{id}}}}}"#,
                lt + 20
            ));
            kernels.push(format!(
                r#"{{"ph":"f","id":{id},"pid":0,"tid":7,"ts":{}.000,"cat":"ac2g","name":"ac2g","bp":"e"}}"#,
                lt + 20
            ));
        }
    }
    events.extend(kernels);
    let end = r.start_us + r.steps as u64 * 1000;
    events.push(format!(
        r#"{{"ph":"X","cat":"Trace","name":"PyTorch Profiler (0)","pid":"Spans","tid":"PyTorch Profiler","ts":{}.000,"dur":{}.000}}"#,
        r.start_us,
        end - r.start_us
    ));
    events.push(format!(
        r#"{{"name":"Record Window End","ph":"i","s":"g","pid":"","tid":"","ts":{end}.000}}"#
    ));
    let sep = if r.pretty { ",\n  " } else { ",\n" };
    let body = events
        .iter()
        .map(|e| {
            if r.pretty {
                e.replace(",\"args\"", ",\n    \"args\"")
            } else {
                e.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(sep);
    let mut head = String::from(
        "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"H100\"}],\n",
    );
    let mut tail = String::from("\n],\n  \"traceName\": \"t.json\"");
    if let Some(rank) = r.rank {
        head.push_str(&format!(
            "  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {rank}, \"world_size\": 4}},\n"
        ));
    }
    if let Some(base) = r.base {
        let m = format!("\"baseTimeNanoseconds\": {base}");
        if r.base_after {
            tail.push_str(&format!(",\n  {m}"));
        } else {
            head.push_str(&format!("  {m},\n"));
        }
    }
    format!("{head}  \"traceEvents\": [\n  {body}{tail}\n}}\n")
}

fn gzip(text: &str) -> Vec<u8> {
    crate::testing::gzip_member(text.as_bytes(), 1)
}

fn parse(path: &Path) -> Value {
    let raw = fs::read(path).unwrap();
    let raw = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut d = flate2::read::MultiGzDecoder::new(&raw[..]);
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        out
    } else {
        raw
    };
    serde_json::from_slice(&raw).unwrap()
}

/// A source event as the merge writes it (the documented mapping), for comparison.
fn mapped(e: &Value, k: usize, n: usize, offset_ns: i128) -> Value {
    let mut e = e.clone();
    let o = e.as_object_mut().unwrap();
    let pid = o.get("pid").cloned().unwrap_or(Value::Null);
    o.insert("pid".into(), Value::String(format!("{k}/{pid}")));
    if let Some(ts) = o.get("ts").and_then(Value::as_f64) {
        o.insert(
            "ts".into(),
            Value::from(((ts * 1000.0).round() as i128 + offset_ns) as f64 / 1000.0),
        );
    }
    let ph = o["ph"].as_str().unwrap().to_string();
    if ID_PHASES.contains(&ph.as_bytes()) {
        if let Some(id) = o.get("id").and_then(Value::as_i64) {
            o.insert("id".into(), Value::from(id * n as i64 + k as i64));
        }
    }
    e
}

fn counts(events: impl Iterator<Item = Value>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in events {
        *m.entry(e.to_string()).or_default() += 1;
    }
    m
}

fn options() -> MergeOptions {
    MergeOptions {
        threads: 2,
        ..MergeOptions::default()
    }
}

/// Three ranks with the same pids, tids and flow ids and different bases (one before
/// the events, one after them in a gzip file, one with none); each source event is in
/// the merged trace exactly once after the documented mapping.
// Long because one scenario (three ranks, three kinds of base) whose every event is
// followed through the documented mapping; the checks share its maps.
#[allow(clippy::too_many_lines)]
#[test]
fn every_event_once_on_one_clock() {
    let dir = scratch("merge-basic");
    let base = 1_790_857_026_000_000_000i128;
    let ranks = [
        Rank {
            pid: 4242,
            base: Some(base + 500_000),
            base_after: false,
            rank: Some(1),
            start_us: 1000,
            steps: 3,
            first_step: 1,
            pretty: false,
        },
        Rank {
            pid: 4242,
            base: Some(base),
            base_after: true,
            rank: Some(0),
            start_us: 900,
            steps: 3,
            first_step: 1,
            pretty: true,
        },
        Rank {
            pid: 4242,
            base: Some(base + 2_000),
            base_after: true,
            rank: None,
            start_us: 800,
            steps: 2,
            first_step: 2,
            pretty: false,
        },
    ];
    let texts: Vec<String> = ranks.iter().map(rank_trace).collect();
    let paths = [
        dir.join("a.json"),
        dir.join("b.json.gz"),
        dir.join("c_rank2.json"),
    ];
    fs::write(&paths[0], &texts[0]).unwrap();
    fs::write(&paths[1], gzip(&texts[1])).unwrap();
    fs::write(&paths[2], &texts[2]).unwrap();
    let dst = dir.join("merged.json");
    let stats = merge(&paths, &dst, &options(), &mut no_progress()).unwrap();
    assert_eq!(stats.base_time_ns, Some(base));
    assert!(stats.warnings.is_empty(), "{:?}", stats.warnings);
    let labels: Vec<&str> = stats.ranks.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["rank 0", "rank 1", "rank 2"]);
    let froms: Vec<&str> = stats.ranks.iter().map(|r| r.rank_from).collect();
    assert_eq!(froms, ["distributedInfo", "distributedInfo", "file name"]);
    let v = parse(&dst);
    let merged = v["traceEvents"].as_array().unwrap();
    assert_eq!(v["baseTimeNanoseconds"], Value::from(base as i64));
    // Map merged pids back to (source, source pid) through the record.
    let record = &v["kinetrace_merge"];
    let mut pid_map = BTreeMap::new();
    for (r, stat) in record["ranks"].as_array().unwrap().iter().zip(&stats.ranks) {
        let k = paths.iter().position(|p| *p == stat.source).unwrap();
        for p in r["pids"].as_array().unwrap() {
            pid_map.insert(p["pid"].as_i64().unwrap(), format!("{k}/{}", p["source"]));
        }
        assert_eq!(r["offset_ns"].as_i64().unwrap() as i128, stat.offset_ns);
        assert_eq!(r["header"]["traceName"], "t.json");
    }
    let mut got = Vec::new();
    let mut names = Vec::new();
    for e in merged {
        let mut e = e.clone();
        if e["ph"] == "M" && (e["name"] == "process_name" || e["name"] == "process_sort_index") {
            names.push(e);
            continue;
        }
        let pid = e["pid"].as_i64().unwrap();
        e.as_object_mut()
            .unwrap()
            .insert("pid".into(), Value::String(pid_map[&pid].clone()));
        got.push(e);
    }
    let mut want = Vec::new();
    for (k, text) in texts.iter().enumerate() {
        let src: Value = serde_json::from_str(text).unwrap();
        let offset = stats
            .ranks
            .iter()
            .find(|r| r.source == paths[k])
            .unwrap()
            .offset_ns;
        for e in src["traceEvents"].as_array().unwrap() {
            if e["ph"] == "M" && (e["name"] == "process_name" || e["name"] == "process_sort_index")
            {
                continue;
            }
            want.push(mapped(e, k, 3, offset));
        }
    }
    assert_eq!(counts(got.into_iter()), counts(want.into_iter()));
    // Offsets: each base against the earliest.
    let offsets: Vec<i128> = stats.ranks.iter().map(|r| r.offset_ns).collect();
    assert_eq!(offsets, [0, 500_000, 2_000]);
    // Every ts keeps three decimals, shifted ones included.
    let raw = fs::read_to_string(&dst).unwrap();
    assert!(
        raw.contains("\"ts\":1500.125"),
        "rank 1's first step, 0.5 ms later"
    );
    // Names and order: rank by rank, CPU then GPU then the rest.
    let mut order: Vec<(i64, String)> = Vec::new();
    let mut name_of = BTreeMap::new();
    for e in &names {
        let pid = e["pid"].as_i64().unwrap();
        if e["name"] == "process_name" {
            name_of.insert(pid, e["args"]["name"].as_str().unwrap().to_string());
        }
    }
    for e in &names {
        if e["name"] == "process_sort_index" {
            let pid = e["pid"].as_i64().unwrap();
            order.push((
                e["args"]["sort_index"].as_i64().unwrap(),
                name_of[&pid].clone(),
            ));
        }
    }
    order.sort();
    let order: Vec<String> = order.into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        order,
        [
            "rank 0 · pid 4242",
            "rank 0 · GPU 0",
            "rank 0 · Spans",
            "rank 0 · pid \"\"",
            "rank 1 · pid 4242",
            "rank 1 · GPU 0",
            "rank 1 · Spans",
            "rank 1 · pid \"\"",
            "rank 2 · pid 4242",
            "rank 2 · GPU 0",
            "rank 2 · Spans",
            "rank 2 · pid \"\"",
        ]
    );
    // Flows pair within a rank only: each (cat, id) has one s and one f.
    let mut flows: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in merged.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
        let f = flows
            .entry(format!("{}/{}", e["cat"], e["id"]))
            .or_default();
        if e["ph"] == "s" {
            f.0 += 1
        } else {
            f.1 += 1
        }
    }
    assert!(flows.values().all(|&c| c == (1, 1)), "{flows:?}");
    assert_eq!(flows.len(), 3 * 3 + 3 * 3 + 2 * 3);
    assert_eq!(stats.outputs[0].events, merged.len() as u64);
    assert_eq!(
        entries(&dir),
        ["a.json", "b.json.gz", "c_rank2.json", "merged.json"]
    );

    // Gzip output, in one member; an absolute source makes the merge absolute.
    let mut abs = Rank {
        pid: 4242,
        base: None,
        base_after: false,
        rank: Some(3),
        start_us: 0,
        steps: 2,
        first_step: 1,
        pretty: false,
    };
    abs.start_us = 1_790_857_026_000_000 + 1000;
    let abs_path = dir.join("abs.json");
    fs::write(&abs_path, rank_trace(&abs)).unwrap();
    let mut o = options();
    o.gzip = Some((1, 2));
    let gz = dir.join("merged.json.gz");
    let stats = merge(
        &[paths[0].clone(), abs_path.clone()],
        &gz,
        &o,
        &mut no_progress(),
    )
    .unwrap();
    assert_eq!(stats.base_time_ns, None);
    let v = parse(&gz);
    assert!(v.get("baseTimeNanoseconds").is_none());
    let ts: Vec<f64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "ProfilerStep#1")
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    assert_eq!(ts.len(), 2);
    assert!(
        (ts[0] - ts[1]).abs() < 10_000.0,
        "{ts:?}: on one absolute clock"
    );
}

/// Events with no pid, a null or a boolean pid get one pid per source (no second `pid`
/// key); a `ts` that is not a number stays as written.
#[test]
fn events_without_a_usable_pid() {
    let dir = scratch("merge-nopid");
    let text = concat!(
        "{\"traceEvents\": [\n",
        "{\"ph\":\"i\",\"name\":\"a\",\"ts\":1.000,\"s\":\"g\"},\n",
        "{\"ph\":\"X\",\"name\":\"b\",\"pid\":null,\"tid\":1,\"ts\":2.000,\"dur\":1},\n",
        "{\"ph\":\"X\",\"name\":\"c\",\"pid\":true,\"ts\":\"3\",\"dur\":1}\n",
        "], \"baseTimeNanoseconds\": 1000}"
    );
    let paths = [dir.join("a.json"), dir.join("b.json")];
    fs::write(&paths[0], text).unwrap();
    fs::write(&paths[1], text.replace(": 1000}", ": 3000}")).unwrap();
    let dst = dir.join("m.json");
    merge(&paths, &dst, &options(), &mut no_progress()).unwrap();
    let raw = fs::read_to_string(&dst).unwrap();
    let v: Value = serde_json::from_str(&raw).unwrap();
    let events: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] != "M")
        .collect();
    assert_eq!(events.len(), 6);
    let pids: std::collections::BTreeSet<i64> =
        events.iter().map(|e| e["pid"].as_i64().unwrap()).collect();
    assert_eq!(pids.len(), 2, "one process per source: {pids:?}");
    for line in raw
        .lines()
        .filter(|l| l.starts_with("{\"ph\":\"") && !l.contains("\"M\""))
    {
        assert_eq!(line.matches("\"pid\"").count(), 1, "{line}");
    }
    assert!(raw.contains("\"ts\":\"3\""));
    assert!(raw.contains("\"ts\":3.000"), "b's first event, 2 us later");
}

// Long because one merge with alignment, a filter and parts at once, whose checks
// share the merged parts read back.
#[allow(clippy::too_many_lines)]
#[test]
fn align_step_filter_and_parts() {
    let dir = scratch("merge-align");
    let base = 1_790_857_026_000_000_000i128;
    let a = Rank {
        pid: 10,
        base: Some(base),
        base_after: false,
        rank: Some(0),
        start_us: 1000,
        steps: 4,
        first_step: 1,
        pretty: false,
    };
    // Rank 1 starts its step 2 at 1500 µs where rank 0 has its step 2 at 2000 µs.
    let b = Rank {
        pid: 10,
        base: Some(base),
        base_after: true,
        rank: Some(1),
        start_us: 500,
        steps: 3,
        first_step: 2,
        pretty: false,
    };
    let paths = [dir.join("r0.json"), dir.join("r1.json")];
    fs::write(&paths[0], rank_trace(&a)).unwrap();
    fs::write(&paths[1], rank_trace(&b)).unwrap();
    let mut o = options();
    o.align_step = true;
    let dst = dir.join("m.json");
    let stats = merge(&paths, &dst, &o, &mut no_progress()).unwrap();
    assert_eq!(stats.aligned_step, Some(2));
    let aligns: Vec<i128> = stats.ranks.iter().map(|r| r.align_offset_ns).collect();
    assert_eq!(aligns, [0, 1_500_000]);
    let v = parse(&dst);
    let step2: Vec<f64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "ProfilerStep#2")
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    assert_eq!(step2, [2000.125, 2000.125]);
    assert_eq!(
        v["kinetrace_merge"]["ranks"][1]["align_offset_ns"],
        1_500_000
    );

    // Kernels only, in a window: kernels of both ranks, no flows (their CPU ends go).
    let mut o = options();
    o.spec = FilterSpec {
        include_cats: vec!["kernel".into()],
        window_us: Some((1000.0, 2000.0)),
        ..FilterSpec::default()
    };
    let stats = merge(&paths, &dst, &o, &mut no_progress()).unwrap();
    let v = parse(&dst);
    let events = v["traceEvents"].as_array().unwrap();
    let kernels: Vec<&Value> = events.iter().filter(|e| e["cat"] == "kernel").collect();
    assert!(!kernels.is_empty());
    for k in &kernels {
        let ts = k["ts"].as_f64().unwrap();
        assert!(ts < 2000.0 && ts + 30.0 > 1000.0, "{ts}");
    }
    assert!(events
        .iter()
        .all(|e| e["ph"] == "M" || e["cat"] == "kernel"));
    assert_eq!(stats.flow_events_cut, kernels.len() as u64);
    // Only GPU processes remain, named.
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rank 0 · GPU 0", "rank 1 · GPU 0"]);

    // Parts of the merged timeline.
    let mut o = options();
    o.max_bytes = Some(9_000);
    o.gzip = Some((1, 1));
    let stats = merge(&paths, &dir.join("p.json.gz"), &o, &mut no_progress()).unwrap();
    assert!(stats.outputs.len() > 1);
    let mut seen = 0;
    let mut union = Vec::new();
    for out in &stats.outputs {
        assert!(
            out.path.to_string_lossy().contains(".part-"),
            "{:?}",
            out.path
        );
        let v = parse(&out.path);
        let events = v["traceEvents"].as_array().unwrap();
        seen += events.iter().filter(|e| e["ph"] != "M").count();
        union.extend(events.iter().filter(|e| e["ph"] != "M").cloned());
        assert!(v["kinetrace_part"]["count"].as_u64().unwrap() as usize == stats.outputs.len());
        assert!(v["kinetrace_merge"]["ranks"].as_array().unwrap().len() == 2);
    }
    let total: usize = [&a, &b]
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_str(&rank_trace(r)).unwrap();
            v["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["ph"] != "M")
                .count()
        })
        .sum();
    assert_eq!(seen as u64 + stats.flow_events_cut, total as u64);
}

// Long because a table of bad sources, each a few lines: its error and an empty
// output directory.
#[allow(clippy::too_many_lines)]
#[test]
fn bad_sources_are_clear_errors_and_leave_nothing() {
    let dir = scratch("merge-bad");
    let good = rank_trace(&Rank {
        pid: 1,
        base: Some(1000),
        base_after: true,
        rank: Some(0),
        start_us: 10,
        steps: 200,
        first_step: 1,
        pretty: false,
    });
    let other = rank_trace(&Rank {
        pid: 1,
        base: Some(1000),
        base_after: false,
        rank: Some(1),
        start_us: 10,
        steps: 2,
        first_step: 1,
        pretty: false,
    });
    let out = dir.join("out");
    fs::create_dir(&out).unwrap();
    let dst = out.join("m.json");
    fs::write(&dst, "old").unwrap();
    let g = dir.join("good.json");
    fs::write(&g, &other).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "trunc.json",
            good.as_bytes()[..good.len() / 2].to_vec(),
            "end of file",
        ),
        (
            "trunc.json.gz",
            {
                let z = gzip(&good);
                z[..z.len() / 2].to_vec()
            },
            "corrupt gzip data",
        ),
        ("array.json", b"[1, 2]".to_vec(), "not a trace"),
        ("text.json", b"hello".to_vec(), "offset 0"),
        (
            "badbase.json",
            good.replace(
                "\"baseTimeNanoseconds\": 1000",
                "\"baseTimeNanoseconds\": 1.5",
            )
            .into_bytes(),
            "not an integer",
        ),
    ];
    for (name, data, want) in cases {
        let src = dir.join(name);
        fs::write(&src, &data).unwrap();
        for pair in [[g.clone(), src.clone()], [src.clone(), g.clone()]] {
            let err = merge(&pair, &dst, &options(), &mut no_progress()).unwrap_err();
            assert!(matches!(err, Error::TraceFormat(_)), "{name}: {err:?}");
            let msg = err.to_string();
            assert!(msg.contains(name) && msg.contains(want), "{name}: {msg}");
            assert_eq!(entries(&out), ["m.json"], "{name}");
            assert_eq!(fs::read(&dst).unwrap(), b"old");
        }
    }
    // Two sources claiming one rank.
    let g2 = dir.join("again.json");
    fs::write(&g2, &other).unwrap();
    let err = merge(
        &[g.clone(), g2.clone()],
        &dst,
        &options(),
        &mut no_progress(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("good.json") && msg.contains("again.json") && msg.contains("rank 1"),
        "{msg}"
    );
    // Labels tell them apart.
    let mut o = options();
    o.labels = vec![Some("left".into()), Some("right".into())];
    let stats = merge(&[g.clone(), g2.clone()], &dst, &o, &mut no_progress()).unwrap();
    assert_eq!(stats.ranks[0].label, "left");
    let v = parse(&dst);
    assert!(v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["args"]["name"] == "right · GPU 0"));
    // Interrupted: the old output stays.
    fs::write(&dst, "old").unwrap();
    let mut calls = 0;
    let big = dir.join("big.json");
    fs::write(
        &big,
        rank_trace(&Rank {
            pid: 1,
            base: Some(1000),
            base_after: false,
            rank: Some(5),
            start_us: 10,
            steps: 40_000,
            first_step: 1,
            pretty: false,
        }),
    )
    .unwrap();
    let r = merge(&[g.clone(), big], &dst, &options(), &mut |_| {
        calls += 1;
        if calls > 5 {
            Err(Error::Interrupted)
        } else {
            Ok(())
        }
    });
    assert!(matches!(r, Err(Error::Interrupted)), "{r:?}");
    assert_eq!(entries(&out), ["m.json"]);
    assert_eq!(fs::read(&dst).unwrap(), b"old");
    // Spans that do not meet: a warning.
    let late = dir.join("late.json");
    fs::write(
        &late,
        rank_trace(&Rank {
            pid: 1,
            base: Some(1000),
            base_after: false,
            rank: Some(7),
            start_us: 1_000_000,
            steps: 2,
            first_step: 1,
            pretty: false,
        }),
    )
    .unwrap();
    let stats = merge(&[g, late], &dst, &options(), &mut no_progress()).unwrap();
    assert_eq!(stats.warnings.len(), 1);
    assert!(
        stats.warnings[0].contains("do not all overlap"),
        "{:?}",
        stats.warnings
    );
}

//! The `tracelens` rules against TraceLens's own figures (`../shared/notes/tracelens-ref`,
//! computed by TraceLens 171dd74 on the real traces of `../shared/traces/TraceLens`): every
//! instance row of its family tables, the same rows (UID, table, forward or backward), the
//! same FLOPs, bytes and kernel time.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::*;

/// Relative tolerance on FLOPs and bytes: TraceLens's are integers divided by 1e9 or 2^20
/// in floats, read back here by multiplying (a few ulps apart).
const TOLERANCE: f64 = 1e-9;

fn shared() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    root.join("notes/tracelens-ref/index.json")
        .is_file()
        .then_some(root)
}

fn gunzip_json(path: &Path) -> Json {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= TOLERANCE * a.abs().max(b.abs())
}

type Key = (String, bool, u64);

/// Per table: rows matched, and what differs.
#[derive(Default)]
struct Tally {
    matched: usize,
    problems: Vec<String>,
}

fn compare(reference: &Json, ours: &InstanceRow, tally: &mut Tally) {
    let f = |k: &str| reference[k].as_f64();
    let flops = f("GFLOPS").map(|g| g * 1e9);
    let bytes = f("Data Moved (MB)").map(|m| m * 1048576.0);
    let time = f("Kernel Time (µs)").unwrap_or(f64::NAN);
    let figures = ours.figures.expect("a TraceLens row has figures");
    let ok_flops = flops.is_some_and(|x| close(x, figures.flops));
    let ok_bytes = match (bytes, figures.bytes) {
        (Some(x), Some(y)) => close(x, y),
        (None, None) => true,
        _ => false,
    };
    // Kernel time exactly: both sides sum the same float intervals in the same order.
    if ok_flops && ok_bytes && time == ours.kernel_us {
        tally.matched += 1;
    } else {
        tally.problems.push(format!(
            "{} uid {} bwd {}: flops {flops:?} vs {}, bytes {bytes:?} vs {:?}, time {time} vs {} ({:?} vs {:?})",
            ours.name, ours.uid, ours.bwd, figures.flops, figures.bytes,
            ours.kernel_us, reference["kernel_uids"], ours.kernel_uids
        ));
    }
}

/// Compares one trace's rows, adding to the tallies per table.
fn check_trace(shared: &Path, trace: &str, ref_file: &str, tallies: &mut BTreeMap<String, Tally>) {
    let reference = gunzip_json(&shared.join("notes/tracelens-ref").join(ref_file));
    let mut expected: HashMap<Key, &Json> = HashMap::new();
    for r in reference.as_array().unwrap() {
        if r["level"] == "instance" && r["table"] != "unified" {
            let key = (
                r["table"].as_str().unwrap().to_string(),
                r["bwd"].as_bool().unwrap(),
                r["UID"].as_u64().unwrap(),
            );
            expected.insert(key, r);
        }
    }
    let path = shared.join("traces/TraceLens").join(trace);
    let rows = super::reports(&[path], Rules::TraceLens, None, 1, &mut |_| Ok(()))
        .unwrap()
        .remove(0)
        .report
        .rows;
    let mut seen = std::collections::HashSet::new();
    for ours in &rows {
        let key = (ours.table.label().to_string(), ours.bwd, ours.uid);
        let tally = tallies.entry(key.0.clone()).or_default();
        match expected.get(&key) {
            Some(r) => compare(r, ours, tally),
            None => tally
                .problems
                .push(format!("{trace}: extra row {key:?} {}", ours.name)),
        }
        seen.insert(key);
    }
    for (key, r) in &expected {
        if seen.contains(key) {
            continue;
        }
        let tally = tallies.entry(key.0.clone()).or_default();
        let name = r["name"].as_str().unwrap_or("");
        tally
            .problems
            .push(format!("{trace}: missing row {key:?} {name}"));
    }
}

#[test]
fn tracelens_rules_give_tracelens_figures_on_every_reference_row() {
    let Some(shared) = shared() else {
        eprintln!("skipped: ../shared/notes/tracelens-ref is absent");
        return;
    };
    let index = gunzip_or_plain(&shared.join("notes/tracelens-ref/index.json"));
    let mut tallies = BTreeMap::new();
    for (trace, entry) in index["traces"].as_object().unwrap() {
        let file = format!("{}.gz", entry["json"].as_str().unwrap());
        check_trace(&shared, trace, &file, &mut tallies);
    }
    let mut failures = Vec::new();
    for (table, t) in &tallies {
        eprintln!(
            "{table}: {} rows match, {} differ",
            t.matched,
            t.problems.len()
        );
        failures.extend(t.problems.iter().take(5).map(|p| format!("{table}: {p}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn gunzip_or_plain(path: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

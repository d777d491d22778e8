//! A fixed activity set for the export's count benchmarks: the columns Python's reader
//! would hand the writer for a GPU training profile recorded with shapes, derived from the
//! activity's index alone, so every run formats the same bytes.
//!
//! Each group of eight activities is six `cpu_op`s with `Input Dims` / `Input type`
//! fragments (~300 bytes of JSON an event, as torch writes them), a `cuda_runtime` launch
//! and its kernel joined by an `ac2g` flow (the kernel with a linked correlation id), and every
//! 64th group opens with a `ProfilerStep#N` annotation instead of its first operator.

use crate::export::trace::{needs_correlation_id, Batch, FirstPass, Flow, StrColumn};

/// Activities a batch holds, as Python's reader hands them over (`BATCH_SIZE`).
pub(crate) const BATCH: usize = 2048;

const HOST: i64 = -1; // the CPU device
const GPU: i64 = 0;
const THREAD: i64 = 4_242;
const STREAM: i64 = 7;
/// 2026-12-01 in ns since the epoch: a time base far from zero, as a real profile's.
const T0: i64 = 1_764_547_200_000_000_000;

const OPS: [(&str, &str); 4] = [
    (
        "aten::add",
        r#""Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", "1"], "Input type": ["float", "float", "Scalar"], "Input Strides": [[{b}, 1], [{b}, 1], []], "Input Dims": [[{a}, {b}], [{a}, {b}], []]"#,
    ),
    (
        "aten::mm",
        r#""Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", ""], "Input type": ["float", "float"], "Input Strides": [[{b}, 1], [1, {b}]], "Input Dims": [[{a}, {b}], [{b}, {a}]]"#,
    ),
    (
        "aten::empty",
        r#""Record function id": 0, "Concrete Inputs": ["[{a}, {b}]", "6", "", "", "False", ""], "Input type": ["ScalarList", "Scalar", "", "", "Scalar", ""], "Input Strides": [[], [], [], [], [], []], "Input Dims": [[], [], [], [], [], []]"#,
    ),
    (
        "aten::relu",
        r#""Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": [""], "Input type": ["float"], "Input Strides": [[{b}, 1]], "Input Dims": [[{a}, {b}]]"#,
    ),
];
const SIZES: [u64; 8] = [1, 3, 8, 64, 128, 512, 1024, 4096];
const KERNEL: &str = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)";
const KERNEL_METADATA: &str = r#""queued": 0, "device": 0, "context": 1, "stream": 7, "registers per thread": 16, "shared memory": 0, "blocks per SM": 0.5, "warps per SM": 4, "grid": [1, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 0"#;

/// What one activity is, by its place in its group of eight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Step,
    Op,
    Launch,
    Kernel,
}

fn kind(i: usize) -> Kind {
    match i % 8 {
        0 if (i / 8).is_multiple_of(64) => Kind::Step,
        6 => Kind::Launch,
        7 => Kind::Kernel,
        _ => Kind::Op,
    }
}

/// splitmix64's finalizer: a well-spread number from an index.
fn mix(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Device, resource (thread or stream), start and duration in ns of activity `i`.
fn timing(i: usize) -> (i64, i64, i64, i64) {
    let group_start = T0 + (i / 8) as i64 * 40_000;
    let slot = (i % 8) as i64;
    let jitter = (mix(i as u64) % 997) as i64;
    match kind(i) {
        Kind::Kernel => (GPU, STREAM, group_start + 31_000, 4_000 + jitter),
        Kind::Step => (HOST, THREAD, group_start, 39_000),
        Kind::Launch => (HOST, THREAD, group_start + 26_000 + jitter, 3_000),
        Kind::Op => (HOST, THREAD, group_start + slot * 5_000, 4_000 + jitter),
    }
}

/// Every activity's timing, as the first pass reads them.
pub(crate) fn first_pass(activities: usize, first: &mut FirstPass) {
    first.reserve(activities);
    for i in 0..activities {
        let (device, resource, ts, dur) = timing(i);
        first.push(device, resource, ts, dur);
    }
}

/// Distinct correlation texts the launches and kernels cycle through (Kineto's correlation
/// ids grow; the text's length, not its value, matters to the work).
const CORRELATIONS: usize = 1024;

/// The texts activities are made of, made once so that building a batch costs little
/// beside formatting it (the count of an export benchmark is mostly the export's).
pub(crate) struct Texts {
    /// Per (operator, size a, size b): its name and metadata.
    ops: Vec<(&'static str, String)>,
    launches: Vec<String>,
    kernels: Vec<String>,
}

impl Texts {
    pub(crate) fn new() -> Self {
        let mut ops = Vec::with_capacity(OPS.len() * 64);
        for (name, template) in OPS {
            for (k, a) in SIZES.iter().enumerate() {
                for b in SIZES {
                    let text = template
                        .replace("{seq}", &(k * 8 + 1000).to_string())
                        .replace("{a}", &a.to_string())
                        .replace("{b}", &b.to_string());
                    ops.push((name, text));
                }
            }
        }
        let launches = (0..CORRELATIONS)
            .map(|c| format!("\"cbid\": 211, \"correlation\": {}", c + 1_000_000))
            .collect();
        let kernels = (0..CORRELATIONS)
            .map(|c| format!("{KERNEL_METADATA}, \"correlation\": {}", c + 1_000_000))
            .collect();
        Texts {
            ops,
            launches,
            kernels,
        }
    }

    /// The batch of activities `start .. start + len`.
    pub(crate) fn batch(&self, start: usize, len: usize) -> Batch {
        let mut b = Batch {
            start,
            categories: StrColumn::with_capacity(len, len * 8),
            names: StrColumn::with_capacity(len, len * 32),
            metadata: StrColumn::with_capacity(len, len * 256),
            comms_metadata: StrColumn::with_capacity(len / 8 + 1, 0),
            ..Batch::default()
        };
        for i in start..start + len {
            let step;
            let group = (i / 8) as i64;
            let correlation = (i / 8) % CORRELATIONS;
            let (cat, name, metadata, linked, flow): (&[u8], &[u8], &[u8], i64, Option<Flow>) =
                match kind(i) {
                    Kind::Step => {
                        step = format!("ProfilerStep#{}", group / 64);
                        (
                            b"user_annotation",
                            step.as_bytes(),
                            br#""Record function id": 0"#,
                            0,
                            None,
                        )
                    }
                    Kind::Op => {
                        let (name, text) =
                            &self.ops[(mix(i as u64) % self.ops.len() as u64) as usize];
                        (b"cpu_op", name.as_bytes(), text.as_bytes(), 0, None)
                    }
                    Kind::Launch => (
                        b"cuda_runtime",
                        b"cudaLaunchKernel",
                        self.launches[correlation].as_bytes(),
                        0,
                        Some(Flow {
                            flow_type: 0,
                            start: true,
                        }),
                    ),
                    Kind::Kernel => (
                        b"kernel",
                        KERNEL.as_bytes(),
                        self.kernels[correlation].as_bytes(),
                        group * 8 + 1,
                        Some(Flow {
                            flow_type: 0,
                            start: false,
                        }),
                    ),
                };
            b.categories.push(cat);
            b.names.push(name);
            b.metadata.push(metadata);
            b.linked_correlation_ids.push(linked);
            if needs_correlation_id(cat, linked) {
                b.correlation_ids.push(group * 8 + (i % 8) as i64);
            }
            b.flow_ids.push(if flow.is_some() { group + 1 } else { 0 });
            if let Some(flow) = flow {
                b.flows.push(flow);
            }
            if cat == b"kernel" {
                b.comms_metadata.push(b"");
            }
        }
        b
    }
}

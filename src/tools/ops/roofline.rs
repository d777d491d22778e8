//! What each row's roofline is drawn against: the trace's GPU (its `deviceProperties`
//! entry of the device the rows' kernels ran on, or `--gpu`) and the peak that applies to
//! the row (its family and the dtype of its main operand). The arithmetic against them
//! (rates, % of roofline, bound) is `rates.rs`'.

use super::dtype::Dtype;
use super::peaks::{find_gpu, Gpu, Precision};
use super::Table;
use crate::json::value::{parse, Value};
use crate::read::attribution::Device;

/// The GPU of a report, and why there is none.
#[derive(Debug, Clone)]
pub(crate) struct GpuChoice {
    pub(crate) gpu: Option<&'static Gpu>,
    /// Where it came from: `"--gpu"` or `"deviceProperties"`.
    pub(crate) how: &'static str,
    /// The `deviceProperties` entry used (absent with `--gpu` or when the trace has none).
    pub(crate) device: Option<Device>,
    /// Why there is no GPU, or what was assumed in choosing it.
    pub(crate) note: Option<String>,
}

/// The GPU of a trace: `user` (`--gpu`) where given; else the `deviceProperties` entry of
/// the device the first row's kernels ran on (`ids`: the rows' devices, in row order), looked up in the peaks table. The first
/// entry where no kernel names a device, or where none has its id (a process that saw one
/// GPU, remapped by `HIP_VISIBLE_DEVICES`, lists it as id 0 and its kernels as device 2).
pub(crate) fn choose_gpu(
    devices: &[Device],
    mut ids: Vec<i64>,
    user: Option<&'static Gpu>,
) -> GpuChoice {
    if let Some(gpu) = user {
        return GpuChoice {
            gpu: Some(gpu),
            how: "--gpu",
            device: None,
            note: None,
        };
    }
    let first = ids.first().copied();
    ids.sort_unstable();
    ids.dedup();
    let mut notes = Vec::new();
    if ids.len() > 1 {
        notes.push(format!(
            "the operators' kernels ran on devices {ids:?}: the roofline is the first's ({})",
            first.unwrap_or_default()
        ));
    }
    let by_id = first.and_then(|id| devices.iter().find(|d| d.id == Some(id)));
    if let (Some(id), None, true) = (first, by_id, devices.len() > 1) {
        notes.push(format!(
            "no deviceProperties entry has id {id}: the first entry is taken"
        ));
    }
    let device = by_id.or(devices.first());
    let gpu = device.and_then(|d| find_gpu(&d.name, d.total_memory, d.sms));
    if gpu.is_none() {
        notes.push(no_gpu(device));
    }
    GpuChoice {
        gpu,
        how: "deviceProperties",
        device: device.cloned(),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// Why a trace has no GPU for the roofline.
fn no_gpu(device: Option<&Device>) -> String {
    match device {
        None => "the trace has no deviceProperties: give the GPU with --gpu".to_string(),
        Some(d) => format!(
            "GPU {:?} ({} SMs, {} bytes) is not in the peaks table, or not a whole GPU: \
             give it with --gpu",
            d.name,
            d.sms.map_or("?".to_string(), |n| n.to_string()),
            d.total_memory.map_or("?".to_string(), |n| n.to_string()),
        ),
    }
}

/// The dtype of an operator's main operand: its first floating-point input.
pub(crate) fn main_dtype(input_type: Option<&str>) -> Option<Dtype> {
    match parse(input_type?)? {
        Value::List(types) => types.iter().find_map(|t| match t {
            Value::Str(t) => Dtype::of(t).filter(|d| d.is_float()),
            _ => None,
        }),
        _ => None,
    }
}

/// Whether a family runs on the tensor (matrix) cores.
fn on_tensor_cores(table: Table) -> bool {
    matches!(
        table,
        Table::Gemm | Table::Conv | Table::Sdpa | Table::InferenceAttention
    )
}

/// The peak a row is measured against on `gpu`: tensor-core families at their dtype's
/// tensor rate (fp32: AMD's matrix rate where it has one, else the vector rate, except a
/// convolution on TF32 where the GPU has it, as cuDNN's default allows); the others at
/// the vector rate (fp64's for fp64, fp32's for every narrower dtype). `None` for an
/// unmodelled row, an operand of no known dtype, or a GPU without that rate.
pub(crate) fn peak_of(
    gpu: &Gpu,
    table: Table,
    input_type: Option<&str>,
) -> Option<(Precision, f64)> {
    if table == Table::Unmodelled {
        return None;
    }
    let dtype = main_dtype(input_type)?;
    let vector = |p| gpu.peak_tflops(p).map(|v| (p, v));
    if !on_tensor_cores(table) {
        return vector(match dtype {
            Dtype::F64 => Precision::Fp64,
            _ => Precision::Fp32,
        });
    }
    match dtype {
        Dtype::F64 => vector(Precision::Fp64Tensor).or_else(|| vector(Precision::Fp64)),
        Dtype::F32 if table == Table::Conv => {
            vector(Precision::Tf32).or_else(|| vector(Precision::Fp32))
        }
        Dtype::F32 => vector(Precision::Fp32Matrix).or_else(|| vector(Precision::Fp32)),
        Dtype::Bf16 => vector(Precision::Bf16),
        Dtype::F16 => vector(Precision::Fp16),
        Dtype::F8 => vector(Precision::Fp8),
        // No peak table lists fp4; integers and complex are no main operand.
        _ => None,
    }
}

impl Precision {
    /// The name the output gives it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Precision::Fp64 => "fp64",
            Precision::Fp64Tensor => "fp64_tensor",
            Precision::Fp32 => "fp32",
            Precision::Fp32Matrix => "fp32_matrix",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp8 => "fp8",
            Precision::Int8 => "int8",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ops::peaks::gpu_by_user_name;

    fn peak(gpu: &str, table: Table, types: &str) -> Option<(&'static str, f64)> {
        let g = gpu_by_user_name(gpu).unwrap();
        peak_of(g, table, Some(types)).map(|(p, v)| (p.label(), v))
    }

    fn device(id: i64, name: &str, mem: u64, sms: u32) -> Device {
        Device {
            id: Some(id),
            name: name.to_string(),
            total_memory: Some(mem),
            sms: Some(sms),
        }
    }

    #[test]
    fn the_gpu_is_the_device_the_kernels_ran_on() {
        let h100 = device(0, "NVIDIA H100 80GB HBM3", 85_045_215_232, 132);
        let a100 = device(1, "NVIDIA A100-SXM4-40GB", 42_505_273_344, 108);
        let two = [h100.clone(), a100.clone()];
        let key = |c: &GpuChoice| c.gpu.map(|g| g.key);
        let c = choose_gpu(&two, vec![1, 1], None);
        assert_eq!((key(&c), c.note.as_deref()), (Some("a100-sxm4-40gb"), None));
        let c = choose_gpu(&two, vec![0, 1], None);
        assert_eq!(key(&c), Some("h100-sxm"));
        assert!(c.note.unwrap().contains("devices [0, 1]"));
        // The real MI300X traces: one entry, id 0, kernels on device 2.
        let mi300 = [device(0, "AMD Instinct MI300X", 206_141_652_992, 304)];
        let c = choose_gpu(&mi300, vec![2], None);
        assert_eq!((key(&c), c.note), (Some("mi300x"), None));
        let c = choose_gpu(&two, vec![5], None);
        assert_eq!(key(&c), Some("h100-sxm"));
        assert!(c
            .note
            .unwrap()
            .contains("no deviceProperties entry has id 5"));
        let c = choose_gpu(&[], vec![0], None);
        assert_eq!(key(&c), None);
        assert!(c.note.unwrap().contains("no deviceProperties"));
        let mig = [device(0, "NVIDIA A100-SXM4-40GB", 10_000_000_000, 14)];
        let c = choose_gpu(&mig, vec![0], None);
        assert_eq!(key(&c), None);
        assert!(c.note.unwrap().contains("not in the peaks table"));
        let c = choose_gpu(&mig, vec![0], gpu_by_user_name("mi250x"));
        assert_eq!((key(&c), c.how), (Some("mi250x"), "--gpu"));
    }

    #[test]
    fn peaks_by_family_and_main_operand() {
        let bf16 = r#"["c10::BFloat16", "c10::BFloat16"]"#;
        assert_eq!(peak("h100", Table::Gemm, bf16), Some(("bf16", 989.5)));
        // Any spelling the exact rules size has its peak too (one reading of dtypes).
        let lower = r#"["c10::bfloat16", "C10::BFLOAT16"]"#;
        assert_eq!(peak("h100", Table::Gemm, lower), Some(("bf16", 989.5)));
        // An integer before the float is no main operand.
        let indexed = r#"["long int", "c10::Half"]"#;
        assert_eq!(peak("h100", Table::Gemm, indexed), Some(("fp16", 989.5)));
        // The first floating input decides: a Scalar before it is skipped.
        let fp8 = r#"["Scalar", "c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float"]"#;
        assert_eq!(peak("h100", Table::Gemm, fp8), Some(("fp8", 1979.0)));
        assert_eq!(peak("a100", Table::Gemm, fp8), None);
        let f32 = r#"["float", "float"]"#;
        assert_eq!(peak("h100", Table::Gemm, f32), Some(("fp32", 67.0)));
        assert_eq!(peak("h100", Table::Conv, f32), Some(("tf32", 494.5)));
        assert_eq!(
            peak("mi300x", Table::Gemm, f32),
            Some(("fp32_matrix", 163.4))
        );
        // Elementwise, reductions and norms on the vector units whatever the dtype.
        assert_eq!(
            peak("h100", Table::BinaryElementwise, bf16),
            Some(("fp32", 67.0))
        );
        assert_eq!(
            peak("h100", Table::Reduce, r#"["double"]"#),
            Some(("fp64", 34.0))
        );
        assert_eq!(peak("h100", Table::Unmodelled, bf16), None);
        assert_eq!(peak("h100", Table::Gemm, r#"["long int"]"#), None);
    }
}

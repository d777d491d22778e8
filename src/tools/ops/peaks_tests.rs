//! The peaks table's lookups (`peaks`): every GPU of the real traces' `deviceProperties`,
//! the `--gpu` spellings, per-device figures, the table's consistency.

use super::peaks::*;

fn key_of(name: &str, mem: Option<u64>, sms: Option<u32>) -> Option<&'static str> {
    find_gpu(name, mem, sms).map(|g| g.key)
}

/// Every distinct (name, totalGlobalMem, numSms) in the real traces
/// under ../shared/traces, with one trace that holds it.
#[test]
fn real_trace_devices_resolve() {
    let cases: &[(&str, u64, u32, &str)] = &[
        // TraceLens/inference/vllm_decode_full/capture_traces/graph_capture_rank_0.*.pt.trace.json.gz
        // (empty name; gfx 9.4, 304 CUs, 192 GiB)
        ("", 206141652992, 304, "mi300x"),
        // TraceLens/mi210/gpu_only_trace/gpu_only_trace.json.gz
        ("AMD Instinct MI210", 68702699520, 104, "mi210"),
        // TraceLens/mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz
        ("AMD Instinct MI300X VF", 205571227648, 304, "mi300x"),
        // TraceLens/inference/sglang_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz
        ("AMD Instinct MI300X", 206141652992, 304, "mi300x"),
        // amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz (one MI250 GCD)
        ("AMD Radeon Graphics", 68702699520, 104, "mi250"),
        // new/SwitchTransformers/trace.json
        ("NVIDIA A100 80GB PCIe", 84987740160, 108, "a100-pcie-80gb"),
        // new/HazyResearch-zoology/trace.json
        ("NVIDIA A100 80GB PCIe", 84990623744, 108, "a100-pcie-80gb"),
        // new/particle_transformer-harryjmoss/.../hmoss-6a49xb_1981897.*.pt.trace.json
        ("NVIDIA A100-PCIE-40GB", 42346610688, 108, "a100-pcie-40gb"),
        // critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz
        ("NVIDIA A100-PG509-200", 42297524224, 108, "a100-sxm4-40gb"),
        // cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz
        ("NVIDIA A100-PG509-200", 42505273344, 108, "a100-sxm4-40gb"),
        // hta/negative_queue_length_values_check__rank0.json.gz
        ("NVIDIA A100-SXM4-80GB", 84990623744, 108, "a100-sxm4-80gb"),
        // TraceLens/b200/eager_trace.json.gz
        ("NVIDIA B200", 191503138816, 148, "b200"),
        // param/linear_kineto.json.gz
        ("NVIDIA GeForce RTX 2080 Ti", 11554586624, 68, "rtx-2080-ti"),
        // new/nano-vllm-zhang-yuhui/prefill.json
        (
            "NVIDIA GeForce RTX 4080 Laptop GPU",
            12450922496,
            58,
            "rtx-4080-laptop",
        ),
        // new/tokenomics-from-first-principles/trace0.json
        ("NVIDIA GeForce RTX 4090", 25393692672, 128, "rtx-4090"),
        // TraceLens/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz
        ("NVIDIA H100 80GB HBM3", 85018279936, 132, "h100-sxm"),
        // kineto/docs/traces/after_fix_trace.json (8 x "NVIDIA H100", 96 GB)
        ("NVIDIA H100", 102085492736, 132, "h100-sxm"),
        // new/Shift-Equivariant-ViT/trace.json
        ("NVIDIA RTX A4000", 16900227072, 48, "rtx-a4000"),
        // HolisticTraceAnalysis-extra/with_gpu_user_annotation/step_based_trace_2543932.json.gz
        ("Quadro GP100", 17069309952, 56, "quadro-gp100"),
        // kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz
        ("Tesla V100-DGXS-32GB", 34084028416, 80, "v100-sxm2-32gb"),
        ("Tesla V100-DGXS-32GB", 34087305216, 80, "v100-sxm2-32gb"),
        // hta/trace_diff__test__test.json.gz
        ("Tesla V100-SXM2-16GB", 16945512448, 80, "v100-sxm2-16gb"),
        // ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz
        ("Tesla V100-SXM2-32GB", 34079637504, 80, "v100-sxm2-32gb"),
        // param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json
        ("Tesla V100-SXM2-32GB", 34079899648, 80, "v100-sxm2-32gb"),
        // hta/df_index_resolver__df_index_resolver.json.gz
        ("Tesla V100-SXM2-32GB", 34089730048, 80, "v100-sxm2-32gb"),
    ];
    for &(name, mem, sms, want) in cases {
        assert_eq!(
            key_of(name, Some(mem), Some(sms)),
            Some(want),
            "{name} {mem} {sms}"
        );
    }
}

#[test]
fn mtia_device_has_no_row() {
    // mtia_inference_trace__mtia_inference_rank_0.json.gz: an MTIA
    // accelerator, no memory or SM count in the trace.
    assert_eq!(key_of("ARTEMIS", None, None), None);
}

#[test]
fn ambiguous_names_use_memory_and_sms() {
    // ROCm names both OAM parts alike; one GCD has 110 (X) or 104 CUs.
    let both = "AMD Instinct MI250X / MI250";
    assert_eq!(key_of(both, Some(68702699520), Some(110)), Some("mi250x"));
    assert_eq!(key_of(both, Some(68702699520), Some(104)), Some("mi250"));
    // Without the CU count the two differ by 6%: no guess.
    assert_eq!(key_of(both, Some(68702699520), None), None);
    // An unlisted A100 spelling: the family, then memory; 80 GB SXM and
    // PCIe differ in bandwidth (2.039 vs 1.935 TB/s): no guess.
    assert_eq!(
        key_of("NVIDIA A100-SXM-80GB-X", Some(85e9 as u64), Some(108)),
        None
    );
    // 40 GB SXM and PCIe have the same figures: either will do.
    assert_eq!(
        key_of("NVIDIA A100-NEW", Some(42_300_000_000), Some(108)),
        Some("a100-sxm4-40gb")
    );
    // An unlisted H100 with 114 SMs is the PCIe part, 132 SMs the SXM.
    assert_eq!(
        key_of("NVIDIA H100 XYZ", Some(85e9 as u64), Some(114)),
        Some("h100-pcie")
    );
    assert_eq!(
        key_of("NVIDIA H100 XYZ", Some(85e9 as u64), Some(132)),
        Some("h100-sxm")
    );
    // Family fallback needs the memory: 40 vs 80 GB A100s differ.
    assert_eq!(key_of("NVIDIA A100-NEW", None, Some(108)), None);
    // A generic name with memory and SMs of no row.
    assert_eq!(
        key_of("AMD Radeon Graphics", Some(17_000_000_000), Some(60)),
        None
    );
    assert_eq!(key_of("", None, Some(304)), None);
}

#[test]
fn partitions_and_unknown_names_are_none() {
    // A MIG slice: same family, a seventh of the SMs.
    assert_eq!(
        key_of(
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
            Some(5_000_000_000),
            Some(14)
        ),
        None
    );
    // MI300X in CPX mode: one XCD (38 CUs) per device.
    assert_eq!(
        key_of("AMD Instinct MI300X", Some(25_000_000_000), Some(38)),
        None
    );
    // A10G (AWS) is not an A10: 80 SMs, not 72; and not an A100.
    assert_eq!(key_of("NVIDIA A10G", Some(23_800_000_000), Some(80)), None);
    assert_eq!(
        key_of("NVIDIA GeForce RTX 3090", Some(25_400_000_000), Some(82)),
        None
    );
    assert_eq!(
        key_of("Intel(R) Data Center GPU Max 1550", None, None),
        None
    );
    assert_eq!(key_of("NVIDIA H20", Some(102_000_000_000), Some(78)), None);
}

#[test]
fn user_names() {
    let k = |s: &str| gpu_by_user_name(s).map(|g| g.key);
    assert_eq!(k("h100"), Some("h100-sxm"));
    assert_eq!(k("H100-SXM"), Some("h100-sxm"));
    assert_eq!(k("NVIDIA H100 PCIe"), Some("h100-pcie"));
    assert_eq!(k("h100 nvl"), Some("h100-nvl"));
    assert_eq!(k("mi300x"), Some("mi300x"));
    assert_eq!(k("AMD Instinct MI250X"), Some("mi250x"));
    assert_eq!(k("a100"), Some("a100-sxm4-80gb"));
    assert_eq!(k("A100-40GB"), Some("a100-sxm4-40gb"));
    assert_eq!(k("a100 pcie 40gb"), Some("a100-pcie-40gb"));
    assert_eq!(k("v100"), Some("v100-sxm2-32gb"));
    assert_eq!(k("rtx 4090"), Some("rtx-4090"));
    assert_eq!(k("GeForce RTX 2080 Ti"), Some("rtx-2080-ti"));
    assert_eq!(k("t4"), Some("t4"));
    assert_eq!(k("B200"), Some("b200"));
    assert_eq!(k("h800"), Some("h800-sxm"));
    assert_eq!(k(""), None);
    assert_eq!(k("NVIDIA"), None);
    assert_eq!(k("h300"), None);
    assert_eq!(k("tpu-v5e"), None);
}

#[test]
fn per_device_figures() {
    let g = gpu_by_user_name("mi250x").unwrap();
    assert_eq!(g.device_sms(), 110);
    assert_eq!(g.peak_tflops(Precision::Bf16), Some(191.5));
    assert!((g.device_bandwidth_tbs() - 1.6384).abs() < 1e-12);
    let h = gpu_by_user_name("h100").unwrap();
    assert_eq!(h.peak_tflops(Precision::Bf16), Some(989.5));
    assert_eq!(h.peak_tflops(Precision::Fp8), Some(1979.0));
    assert_eq!(
        gpu_by_user_name("v100")
            .unwrap()
            .peak_tflops(Precision::Bf16),
        None
    );
}

#[test]
fn table_is_consistent() {
    for (i, g) in GPUS.iter().enumerate() {
        assert!(
            !g.source.is_empty() && g.bandwidth_tbs > 0.0 && g.fp32 > 0.0,
            "{}",
            g.key
        );
        assert_eq!(g.sms % g.dies, 0, "{}", g.key);
        assert!(
            GPUS[..i].iter().all(|o| o.key != g.key),
            "duplicate key {}",
            g.key
        );
        // Tensor paths are never slower than the vector ones.
        for p in [Precision::Tf32, Precision::Bf16, Precision::Fp16] {
            assert!(g
                .peak_tflops(p)
                .is_none_or(|v| v >= g.peak_tflops(Precision::Fp32).unwrap()));
        }
        // Every listed name resolves back to a row of the same family.
        for n in g.names {
            let found = find_gpu(n, None, Some(g.device_sms())).map(|r| r.family);
            assert!(found.is_none() || found == Some(g.family), "{n}");
        }
    }
}

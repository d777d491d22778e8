//! Peak compute and memory bandwidth of the GPUs found in real traces, for
//! the roofline of `kinetrace ops`, and the lookup of a trace's GPU from its
//! `deviceProperties` (or from `--gpu`).
//!
//! Figures are the vendor's, dense (NVIDIA states tensor figures "with
//! sparsity": those are halved here), in TFLOPS (TOPS for int8) and TB/s
//! (10^12 bytes/s), for the whole package as the vendor sells it. A package
//! the runtime shows as several devices (MI250/MI250X: two GCDs) has
//! `dies: 2`, and the per-device accessors divide by it, since a trace's
//! kernels run on one device.

/// One GPU model. Peaks are per package, as stated by the vendor.
#[derive(Debug)]
pub(crate) struct Gpu {
    /// Stable id, accepted by `--gpu` and written in the output.
    pub key: &'static str,
    /// Vendor product name.
    pub label: &'static str,
    /// `deviceProperties.name` values (and common spellings), matched after
    /// `normalize`.
    pub names: &'static [&'static str],
    /// Family prefix for names not listed (e.g. "h100"), after `normalize`.
    pub family: &'static str,
    /// Memory per package as the vendor states it (GB, which is GiB for HBM).
    pub memory_gb: f64,
    /// SMs (NVIDIA) or CUs (AMD) per package.
    pub sms: u32,
    /// Devices the runtime shows per package.
    pub dies: u32,
    /// FP64 on the vector (non-tensor) units.
    pub fp64: Option<f64>,
    /// FP64 on tensor / matrix cores.
    pub fp64_tensor: Option<f64>,
    /// FP32 on the vector (non-tensor) units.
    pub fp32: f64,
    /// FP32 on matrix cores (AMD CDNA MFMA; NVIDIA has none).
    pub fp32_matrix: Option<f64>,
    /// TF32 (NVIDIA) / XF32-TF32 (AMD MI300) on tensor cores.
    pub tf32: Option<f64>,
    /// BF16 tensor cores, FP32 accumulate.
    pub bf16: Option<f64>,
    /// FP16 tensor cores, FP32 accumulate (GeForce runs these at half the
    /// FP16-accumulate rate); packed FP16 where there are no tensor cores.
    pub fp16: Option<f64>,
    /// FP8 tensor cores, FP32 accumulate.
    pub fp8: Option<f64>,
    /// INT8 tensor cores, TOPS.
    pub int8: Option<f64>,
    /// Memory bandwidth per package, TB/s.
    pub bandwidth_tbs: f64,
    /// Public source of the figures (title and URL), and any derivation.
    pub source: &'static str,
}

/// A precision whose peak the table holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precision {
    Fp64,
    Fp64Tensor,
    Fp32,
    Fp32Matrix,
    Tf32,
    Bf16,
    Fp16,
    Fp8,
    Int8,
}

impl Precision {
    pub(crate) const ALL: [Precision; 9] = [
        Precision::Fp64,
        Precision::Fp64Tensor,
        Precision::Fp32,
        Precision::Fp32Matrix,
        Precision::Tf32,
        Precision::Bf16,
        Precision::Fp16,
        Precision::Fp8,
        Precision::Int8,
    ];
}

impl Gpu {
    /// Dense peak of one device (one GCD of an MI250X), TFLOPS or TOPS.
    pub(crate) fn peak_tflops(&self, p: Precision) -> Option<f64> {
        let v = match p {
            Precision::Fp64 => self.fp64,
            Precision::Fp64Tensor => self.fp64_tensor,
            Precision::Fp32 => Some(self.fp32),
            Precision::Fp32Matrix => self.fp32_matrix,
            Precision::Tf32 => self.tf32,
            Precision::Bf16 => self.bf16,
            Precision::Fp16 => self.fp16,
            Precision::Fp8 => self.fp8,
            Precision::Int8 => self.int8,
        };
        v.map(|x| x / f64::from(self.dies))
    }

    /// Memory bandwidth of one device, TB/s.
    pub(crate) fn device_bandwidth_tbs(&self) -> f64 {
        self.bandwidth_tbs / f64::from(self.dies)
    }

    /// SMs / CUs of one device, as `deviceProperties.numSms` reports them.
    pub(crate) fn device_sms(&self) -> u32 {
        self.sms / self.dies
    }

    /// Memory of one device in GiB (vendor GB taken as GiB).
    pub(crate) fn device_memory_gib(&self) -> f64 {
        self.memory_gb / f64::from(self.dies)
    }
}

/// Defaults for the optional fields, for struct update syntax in `GPUS`.
const NONE: Gpu = Gpu {
    key: "",
    label: "",
    names: &[],
    family: "",
    memory_gb: 0.0,
    sms: 0,
    dies: 1,
    fp64: None,
    fp64_tensor: None,
    fp32: 0.0,
    fp32_matrix: None,
    tf32: None,
    bf16: None,
    fp16: None,
    fp8: None,
    int8: None,
    bandwidth_tbs: 0.0,
    source: "",
};

const V100_SRC: &str = "NVIDIA Tesla V100 GPU datasheet, \
    https://images.nvidia.com/content/technologies/volta/pdf/tesla-volta-v100-datasheet-letter-fnl-web.pdf";
const A100_SRC: &str = "NVIDIA A100 Tensor Core GPU datasheet, \
    https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf \
    (40GB bandwidth: NVIDIA A100 Tensor Core GPU Architecture whitepaper, \
    https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf); \
    sparse figures halved";
const H100_SRC: &str = "NVIDIA H100 Tensor Core GPU datasheet, \
    https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet; sparse figures halved";
const H800_SRC: &str = "NVIDIA H800 Tensor Core GPU datasheet (nvidia.cn, \
    https://www.nvidia.cn/data-center/h800/); sparse figures halved";
const H200_SRC: &str = "NVIDIA H200 Tensor Core GPU datasheet, \
    https://www.nvidia.com/en-us/data-center/h200/; sparse figures halved";
const GH200_SRC: &str = "NVIDIA GH200 Grace Hopper Superchip datasheet, \
    https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip; sparse figures halved";
const ADA_SRC: &str = "NVIDIA Ada GPU Architecture whitepaper v2.01, appendix A, \
    https://images.nvidia.com/aem-dam/Solutions/Data-Center/l4/nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf; \
    dense columns, FP32 accumulate";
const MI200_SRC: &str = "AMD Instinct MI200 series specifications, \
    https://www.amd.com/en/products/accelerators/instinct/mi200.html";
const MI300_SRC: &str = "AMD Instinct MI300X / MI325X data sheets, \
    https://www.amd.com/en/products/accelerators/instinct/mi300.html";

/// Within a family, the first row is the one a bare family name picks
/// (`--gpu h100` is the SXM part).
pub(crate) static GPUS: &[Gpu] = &[
    Gpu {
        key: "v100-sxm2-32gb",
        label: "NVIDIA Tesla V100 SXM2 32GB",
        // DGX Station's V100s are NVLink (SXM2-class) modules at the same clocks.
        names: &["Tesla V100-SXM2-32GB", "Tesla V100-DGXS-32GB", "V100-SXM2"],
        family: "v100",
        memory_gb: 32.0,
        sms: 80,
        fp64: Some(7.8),
        fp32: 15.7,
        fp16: Some(125.0),
        bandwidth_tbs: 0.9,
        source: V100_SRC,
        ..NONE
    },
    Gpu {
        key: "v100-sxm2-16gb",
        label: "NVIDIA Tesla V100 SXM2 16GB",
        names: &["Tesla V100-SXM2-16GB"],
        family: "v100",
        memory_gb: 16.0,
        sms: 80,
        fp64: Some(7.8),
        fp32: 15.7,
        fp16: Some(125.0),
        bandwidth_tbs: 0.9,
        source: V100_SRC,
        ..NONE
    },
    Gpu {
        key: "v100-pcie-32gb",
        label: "NVIDIA Tesla V100 PCIe 32GB",
        names: &["Tesla V100-PCIE-32GB", "V100-PCIe"],
        family: "v100",
        memory_gb: 32.0,
        sms: 80,
        fp64: Some(7.0),
        fp32: 14.0,
        fp16: Some(112.0),
        bandwidth_tbs: 0.9,
        source: V100_SRC,
        ..NONE
    },
    Gpu {
        key: "v100-pcie-16gb",
        label: "NVIDIA Tesla V100 PCIe 16GB",
        names: &["Tesla V100-PCIE-16GB"],
        family: "v100",
        memory_gb: 16.0,
        sms: 80,
        fp64: Some(7.0),
        fp32: 14.0,
        fp16: Some(112.0),
        bandwidth_tbs: 0.9,
        source: V100_SRC,
        ..NONE
    },
    Gpu {
        key: "v100s-pcie-32gb",
        label: "NVIDIA Tesla V100S PCIe 32GB",
        names: &["Tesla V100S-PCIE-32GB", "V100S"],
        family: "v100s",
        memory_gb: 32.0,
        sms: 80,
        fp64: Some(8.2),
        fp32: 16.4,
        fp16: Some(130.0),
        bandwidth_tbs: 1.134,
        source: V100_SRC,
        ..NONE
    },
    Gpu {
        key: "a100-sxm4-80gb",
        label: "NVIDIA A100 SXM4 80GB",
        names: &["NVIDIA A100-SXM4-80GB", "A100-SXM-80GB", "A100-80GB"],
        family: "a100",
        memory_gb: 80.0,
        sms: 108,
        fp64: Some(9.7),
        fp64_tensor: Some(19.5),
        fp32: 19.5,
        tf32: Some(156.0),
        bf16: Some(312.0),
        fp16: Some(312.0),
        int8: Some(624.0),
        bandwidth_tbs: 2.039,
        source: A100_SRC,
        ..NONE
    },
    Gpu {
        key: "a100-sxm4-40gb",
        label: "NVIDIA A100 SXM4 40GB",
        // PG509-200: the SXM4 40GB board in Meta's servers (108 SMs, 40 GB).
        names: &["NVIDIA A100-SXM4-40GB", "NVIDIA A100-PG509-200", "A100-SXM-40GB", "A100-40GB"],
        family: "a100",
        memory_gb: 40.0,
        sms: 108,
        fp64: Some(9.7),
        fp64_tensor: Some(19.5),
        fp32: 19.5,
        tf32: Some(156.0),
        bf16: Some(312.0),
        fp16: Some(312.0),
        int8: Some(624.0),
        bandwidth_tbs: 1.555,
        source: A100_SRC,
        ..NONE
    },
    Gpu {
        key: "a100-pcie-80gb",
        label: "NVIDIA A100 PCIe 80GB",
        names: &["NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"],
        family: "a100",
        memory_gb: 80.0,
        sms: 108,
        fp64: Some(9.7),
        fp64_tensor: Some(19.5),
        fp32: 19.5,
        tf32: Some(156.0),
        bf16: Some(312.0),
        fp16: Some(312.0),
        int8: Some(624.0),
        bandwidth_tbs: 1.935,
        source: A100_SRC,
        ..NONE
    },
    Gpu {
        key: "a100-pcie-40gb",
        label: "NVIDIA A100 PCIe 40GB",
        names: &["NVIDIA A100-PCIE-40GB"],
        family: "a100",
        memory_gb: 40.0,
        sms: 108,
        fp64: Some(9.7),
        fp64_tensor: Some(19.5),
        fp32: 19.5,
        tf32: Some(156.0),
        bf16: Some(312.0),
        fp16: Some(312.0),
        int8: Some(624.0),
        bandwidth_tbs: 1.555,
        source: A100_SRC,
        ..NONE
    },
    Gpu {
        key: "a10",
        label: "NVIDIA A10",
        names: &["NVIDIA A10"],
        family: "a10",
        memory_gb: 24.0,
        sms: 72,
        fp32: 31.2,
        tf32: Some(62.5),
        bf16: Some(125.0),
        fp16: Some(125.0),
        int8: Some(250.0),
        bandwidth_tbs: 0.6,
        source: "NVIDIA A10 Tensor Core GPU datasheet, \
            https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf; \
            sparse figures halved",
        ..NONE
    },
    Gpu {
        key: "h100-sxm",
        label: "NVIDIA H100 SXM5 80GB",
        // Bare "NVIDIA H100": 8-GPU SXM boards (132 SMs) with 96 GB; no
        // datasheet lists that part, so it takes the SXM5 figures.
        names: &["NVIDIA H100 80GB HBM3", "NVIDIA H100", "H100-SXM", "H100-SXM5"],
        family: "h100",
        memory_gb: 80.0,
        sms: 132,
        fp64: Some(34.0),
        fp64_tensor: Some(67.0),
        fp32: 67.0,
        tf32: Some(494.5),
        bf16: Some(989.5),
        fp16: Some(989.5),
        fp8: Some(1979.0),
        int8: Some(1979.0),
        bandwidth_tbs: 3.35,
        source: H100_SRC,
        ..NONE
    },
    Gpu {
        key: "h100-pcie",
        label: "NVIDIA H100 PCIe 80GB",
        names: &["NVIDIA H100 PCIe"],
        family: "h100",
        memory_gb: 80.0,
        sms: 114,
        fp64: Some(26.0),
        fp64_tensor: Some(51.0),
        fp32: 51.0,
        tf32: Some(378.0),
        bf16: Some(756.5),
        fp16: Some(756.5),
        fp8: Some(1513.0),
        int8: Some(1513.0),
        bandwidth_tbs: 2.0,
        source: H100_SRC,
        ..NONE
    },
    Gpu {
        key: "h100-nvl",
        label: "NVIDIA H100 NVL 94GB (one GPU)",
        names: &["NVIDIA H100 NVL"],
        family: "h100",
        memory_gb: 94.0,
        sms: 132,
        fp64: Some(30.0),
        fp64_tensor: Some(60.0),
        fp32: 60.0,
        tf32: Some(417.5),
        bf16: Some(835.5),
        fp16: Some(835.5),
        fp8: Some(1670.5),
        int8: Some(1670.5),
        bandwidth_tbs: 3.9,
        source: H100_SRC,
        ..NONE
    },
    Gpu {
        key: "h800-sxm",
        label: "NVIDIA H800 SXM5 80GB",
        names: &["NVIDIA H800", "H800-SXM"],
        family: "h800",
        memory_gb: 80.0,
        sms: 132,
        // Export part: FP64 cut to 1 TFLOPS, the rest as H100 SXM5.
        fp64: Some(1.0),
        fp64_tensor: Some(1.0),
        fp32: 67.0,
        tf32: Some(494.5),
        bf16: Some(989.5),
        fp16: Some(989.5),
        fp8: Some(1979.0),
        int8: Some(1979.0),
        bandwidth_tbs: 3.35,
        source: H800_SRC,
        ..NONE
    },
    Gpu {
        key: "h800-pcie",
        label: "NVIDIA H800 PCIe 80GB",
        names: &["NVIDIA H800 PCIe"],
        family: "h800",
        memory_gb: 80.0,
        sms: 114,
        fp64: Some(0.8),
        fp64_tensor: Some(0.8),
        fp32: 51.0,
        tf32: Some(378.0),
        bf16: Some(756.5),
        fp16: Some(756.5),
        fp8: Some(1513.0),
        int8: Some(1513.0),
        bandwidth_tbs: 2.0,
        source: H800_SRC,
        ..NONE
    },
    Gpu {
        key: "h200-sxm",
        label: "NVIDIA H200 SXM 141GB",
        names: &["NVIDIA H200", "H200-SXM"],
        family: "h200",
        memory_gb: 141.0,
        sms: 132,
        fp64: Some(34.0),
        fp64_tensor: Some(67.0),
        fp32: 67.0,
        tf32: Some(494.5),
        bf16: Some(989.5),
        fp16: Some(989.5),
        fp8: Some(1979.0),
        int8: Some(1979.0),
        bandwidth_tbs: 4.8,
        source: H200_SRC,
        ..NONE
    },
    Gpu {
        key: "h200-nvl",
        label: "NVIDIA H200 NVL 141GB",
        names: &["NVIDIA H200 NVL"],
        family: "h200",
        memory_gb: 141.0,
        sms: 132,
        fp64: Some(30.0),
        fp64_tensor: Some(60.0),
        fp32: 60.0,
        tf32: Some(417.5),
        bf16: Some(835.5),
        fp16: Some(835.5),
        fp8: Some(1670.5),
        int8: Some(1670.5),
        bandwidth_tbs: 4.8,
        source: H200_SRC,
        ..NONE
    },
    Gpu {
        key: "gh200-96gb",
        label: "NVIDIA GH200 Grace Hopper (96GB HBM3)",
        names: &["NVIDIA GH200 480GB", "GH200"],
        family: "gh200",
        memory_gb: 96.0,
        sms: 132,
        fp64: Some(34.0),
        fp64_tensor: Some(67.0),
        fp32: 67.0,
        tf32: Some(494.5),
        bf16: Some(989.5),
        fp16: Some(989.5),
        fp8: Some(1979.0),
        int8: Some(1979.0),
        bandwidth_tbs: 4.0,
        source: GH200_SRC,
        ..NONE
    },
    Gpu {
        key: "gh200-144gb",
        label: "NVIDIA GH200 Grace Hopper (144GB HBM3e)",
        names: &["NVIDIA GH200 144G HBM3e"],
        family: "gh200",
        memory_gb: 144.0,
        sms: 132,
        fp64: Some(34.0),
        fp64_tensor: Some(67.0),
        fp32: 67.0,
        tf32: Some(494.5),
        bf16: Some(989.5),
        fp16: Some(989.5),
        fp8: Some(1979.0),
        int8: Some(1979.0),
        bandwidth_tbs: 4.9,
        source: GH200_SRC,
        ..NONE
    },
    Gpu {
        key: "b200",
        label: "NVIDIA B200 (HGX B200, one GPU)",
        names: &["NVIDIA B200"],
        family: "b200",
        memory_gb: 180.0,
        sms: 148,
        fp64: Some(37.0),
        fp64_tensor: Some(37.0),
        fp32: 75.0,
        tf32: Some(1125.0),
        bf16: Some(2250.0),
        fp16: Some(2250.0),
        fp8: Some(4500.0),
        int8: Some(4500.0),
        bandwidth_tbs: 7.7,
        source: "NVIDIA HGX B200 specifications (8-GPU figures / 8), \
            https://www.nvidia.com/en-us/data-center/hgx/; sparse figures halved",
        ..NONE
    },
    Gpu {
        key: "l4",
        label: "NVIDIA L4",
        names: &["NVIDIA L4"],
        family: "l4",
        memory_gb: 24.0,
        sms: 58,
        fp32: 30.3,
        tf32: Some(60.0),
        bf16: Some(121.0),
        fp16: Some(121.0),
        fp8: Some(242.5),
        int8: Some(242.5),
        bandwidth_tbs: 0.3,
        source: "NVIDIA L4 Tensor Core GPU datasheet, \
            https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet; sparse figures halved",
        ..NONE
    },
    Gpu {
        key: "l40s",
        label: "NVIDIA L40S",
        names: &["NVIDIA L40S"],
        family: "l40s",
        memory_gb: 48.0,
        sms: 142,
        fp32: 91.6,
        tf32: Some(183.0),
        bf16: Some(362.05),
        fp16: Some(362.05),
        fp8: Some(733.0),
        int8: Some(733.0),
        bandwidth_tbs: 0.864,
        source: "NVIDIA L40S GPU datasheet, \
            https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413; sparse figures halved",
        ..NONE
    },
    Gpu {
        key: "t4",
        label: "NVIDIA T4",
        names: &["Tesla T4", "NVIDIA T4"],
        family: "t4",
        memory_gb: 16.0,
        sms: 40,
        fp32: 8.1,
        fp16: Some(65.0),
        int8: Some(130.0),
        bandwidth_tbs: 0.32,
        source: "NVIDIA T4 Tensor Core GPU datasheet, \
            https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
        ..NONE
    },
    Gpu {
        key: "rtx-2080-ti",
        label: "NVIDIA GeForce RTX 2080 Ti (reference clocks)",
        names: &["NVIDIA GeForce RTX 2080 Ti"],
        family: "rtx2080ti",
        memory_gb: 11.0,
        sms: 68,
        fp32: 13.4,
        // GeForce Turing: FP16 tensor with FP32 accumulate at half rate.
        fp16: Some(53.8),
        int8: Some(215.2),
        bandwidth_tbs: 0.616,
        source: "NVIDIA Turing GPU Architecture whitepaper, appendix A (reference 2080 Ti), \
            https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf",
        ..NONE
    },
    Gpu {
        key: "rtx-a4000",
        label: "NVIDIA RTX A4000",
        names: &["NVIDIA RTX A4000"],
        family: "rtxa4000",
        memory_gb: 16.0,
        sms: 48,
        fp32: 19.2,
        // Datasheet gives only "Tensor 153.4 TFLOPS" (FP16, sparse); TF32 is
        // half the FP16 rate on GA10x.
        tf32: Some(38.35),
        bf16: Some(76.7),
        fp16: Some(76.7),
        int8: Some(153.4),
        bandwidth_tbs: 0.448,
        source: "NVIDIA RTX A4000 datasheet, \
            https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs21/rtx-a4000/nvidia-rtx-a4000-datasheet.pdf; \
            sparse halved, TF32 and INT8 from the GA10x rates of the Ampere GA102 whitepaper",
        ..NONE
    },
    Gpu {
        key: "rtx-a6000",
        label: "NVIDIA RTX A6000",
        names: &["NVIDIA RTX A6000"],
        family: "rtxa6000",
        memory_gb: 48.0,
        sms: 84,
        fp32: 38.7,
        tf32: Some(77.4),
        bf16: Some(154.8),
        fp16: Some(154.8),
        int8: Some(309.7),
        bandwidth_tbs: 0.768,
        source: "NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix (RTX A6000), \
            https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf",
        ..NONE
    },
    Gpu {
        key: "rtx-4090",
        label: "NVIDIA GeForce RTX 4090",
        names: &["NVIDIA GeForce RTX 4090"],
        family: "rtx4090",
        memory_gb: 24.0,
        sms: 128,
        fp32: 82.6,
        tf32: Some(82.6),
        bf16: Some(165.2),
        fp16: Some(165.2),
        fp8: Some(330.3),
        int8: Some(660.6),
        bandwidth_tbs: 1.008,
        source: ADA_SRC,
        ..NONE
    },
    Gpu {
        key: "rtx-4080",
        label: "NVIDIA GeForce RTX 4080",
        names: &["NVIDIA GeForce RTX 4080"],
        family: "rtx4080",
        memory_gb: 16.0,
        sms: 76,
        fp32: 48.7,
        tf32: Some(48.7),
        bf16: Some(97.5),
        fp16: Some(97.5),
        fp8: Some(194.9),
        int8: Some(389.9),
        bandwidth_tbs: 0.7168,
        source: ADA_SRC,
        ..NONE
    },
    Gpu {
        key: "rtx-4080-laptop",
        label: "NVIDIA GeForce RTX 4080 Laptop GPU (max boost 2280 MHz)",
        names: &["NVIDIA GeForce RTX 4080 Laptop GPU"],
        family: "rtx4080laptop",
        memory_gb: 12.0,
        sms: 58,
        // Derived: 58 SMs x 2.28 GHz x the Ada GeForce per-SM rates (256 FP32,
        // 512 FP16/BF16 and 1024 FP8 FLOP/clk with FP32 accumulate, 2048 INT8).
        fp32: 33.85,
        tf32: Some(33.85),
        bf16: Some(67.7),
        fp16: Some(67.7),
        fp8: Some(135.4),
        int8: Some(270.8),
        bandwidth_tbs: 0.432,
        source: "Derived: NVIDIA GeForce RTX 4080 Laptop GPU specifications (7424 CUDA cores, \
            boost up to 2280 MHz, 12 GB GDDR6 192-bit), \
            https://www.nvidia.com/en-us/geforce/laptops/40-series/, with the per-SM rates of the \
            NVIDIA Ada GPU Architecture whitepaper",
        ..NONE
    },
    Gpu {
        key: "quadro-gp100",
        label: "NVIDIA Quadro GP100",
        names: &["Quadro GP100"],
        family: "gp100",
        memory_gb: 16.0,
        sms: 56,
        fp64: Some(5.2),
        fp32: 10.3,
        // Pascal: no tensor cores; packed FP16 at twice the FP32 rate.
        fp16: Some(20.7),
        bandwidth_tbs: 0.717,
        source: "NVIDIA Quadro GP100 datasheet, \
            https://images.nvidia.com/content/pdf/quadro/data-sheets/192152-NV-DS-Quadro-GP100-US-NV-HR.pdf",
        ..NONE
    },
    Gpu {
        key: "mi250x",
        label: "AMD Instinct MI250X (OAM, 2 GCDs)",
        names: &["AMD Instinct MI250X", "AMD Instinct MI250X / MI250"],
        family: "mi250x",
        memory_gb: 128.0,
        sms: 220,
        dies: 2,
        fp64: Some(47.9),
        fp64_tensor: Some(95.7),
        fp32: 47.9,
        fp32_matrix: Some(95.7),
        bf16: Some(383.0),
        fp16: Some(383.0),
        int8: Some(383.0),
        bandwidth_tbs: 3.2768,
        source: MI200_SRC,
        ..NONE
    },
    Gpu {
        // Before MI210: one MI250 GCD and an MI210 have the same CUs, memory
        // and (within 0.3%) peaks, so a generic name resolves here.
        key: "mi250",
        label: "AMD Instinct MI250 (OAM, 2 GCDs)",
        names: &["AMD Instinct MI250", "AMD Instinct MI250X / MI250"],
        family: "mi250",
        memory_gb: 128.0,
        sms: 208,
        dies: 2,
        fp64: Some(45.3),
        fp64_tensor: Some(90.5),
        fp32: 45.3,
        fp32_matrix: Some(90.5),
        bf16: Some(362.1),
        fp16: Some(362.1),
        int8: Some(362.1),
        bandwidth_tbs: 3.2768,
        source: MI200_SRC,
        ..NONE
    },
    Gpu {
        key: "mi210",
        label: "AMD Instinct MI210",
        names: &["AMD Instinct MI210"],
        family: "mi210",
        memory_gb: 64.0,
        sms: 104,
        fp64: Some(22.6),
        fp64_tensor: Some(45.3),
        fp32: 22.6,
        fp32_matrix: Some(45.3),
        bf16: Some(181.0),
        fp16: Some(181.0),
        int8: Some(181.0),
        bandwidth_tbs: 1.6384,
        source: MI200_SRC,
        ..NONE
    },
    Gpu {
        key: "mi300x",
        label: "AMD Instinct MI300X",
        // VF: the SR-IOV virtual function (cloud VMs), the whole GPU.
        names: &["AMD Instinct MI300X", "AMD Instinct MI300X VF"],
        family: "mi300x",
        memory_gb: 192.0,
        sms: 304,
        fp64: Some(81.7),
        fp64_tensor: Some(163.4),
        fp32: 163.4,
        fp32_matrix: Some(163.4),
        tf32: Some(653.7),
        bf16: Some(1307.4),
        fp16: Some(1307.4),
        fp8: Some(2614.9),
        int8: Some(2614.9),
        bandwidth_tbs: 5.3,
        source: MI300_SRC,
        ..NONE
    },
    Gpu {
        key: "mi325x",
        label: "AMD Instinct MI325X",
        names: &["AMD Instinct MI325X", "AMD Instinct MI325X VF"],
        family: "mi325x",
        memory_gb: 256.0,
        sms: 304,
        fp64: Some(81.7),
        fp64_tensor: Some(163.4),
        fp32: 163.4,
        fp32_matrix: Some(163.4),
        tf32: Some(653.7),
        bf16: Some(1307.4),
        fp16: Some(1307.4),
        fp8: Some(2614.9),
        int8: Some(2614.9),
        bandwidth_tbs: 6.0,
        source: MI300_SRC,
        ..NONE
    },
];

/// Vendor words dropped from the front of a name, so "NVIDIA H100",
/// "h100" and "H100" compare equal.
const PREFIXES: [&str; 6] = ["nvidia", "tesla", "geforce", "amd", "instinct", "quadro"];

/// Names that say nothing of the model: ROCm's fallback when it has no
/// marketing name, and an empty name.
const GENERIC: [&str; 2] = ["", "radeongraphics"];

/// Lowercase ASCII letters and digits only, vendor prefixes removed.
pub(crate) fn normalize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    while let Some(p) = PREFIXES.iter().find(|p| s.starts_with(**p)) {
        s.drain(..p.len());
    }
    s
}

/// The GPU of a trace's `deviceProperties` entry: by name; by memory and
/// SM count where the name fits several rows (or fits none but a family,
/// or says nothing). `None` for an accelerator not in the table (MTIA), a
/// partition (MIG, CPX: fewer SMs than the whole GPU) or an ambiguity the
/// figures cannot settle.
pub(crate) fn find_gpu(
    name: &str,
    total_memory_bytes: Option<u64>,
    sm_count: Option<u32>,
) -> Option<&'static Gpu> {
    let key = normalize(name);
    let named: Vec<&'static Gpu> = GPUS
        .iter()
        .filter(|g| g.names.iter().any(|n| normalize(n) == key))
        .collect();
    if !named.is_empty() {
        // A listed name is trusted for memory (vendors sell capacity variants
        // under one name) but not for SMs: fewer SMs is a partition.
        let fit: Vec<&'static Gpu> = named
            .into_iter()
            .filter(|g| sm_count.is_none_or(|n| n == g.device_sms()))
            .collect();
        return pick(&fit, total_memory_bytes, false);
    }
    let pool: Vec<&'static Gpu> = if GENERIC.contains(&key.as_str()) {
        if total_memory_bytes.is_none() || sm_count.is_none() {
            return None;
        }
        GPUS.iter().collect()
    } else {
        family_rows(&key)
    };
    // The name alone proves little here: memory and SMs must both fit.
    let fit: Vec<&'static Gpu> = pool
        .into_iter()
        .filter(|g| sm_count.is_none_or(|n| n == g.device_sms()))
        .collect();
    pick(&fit, total_memory_bytes, true)
}

/// Rows whose family is the longest prefix of `key` ("a100x" is an A100,
/// not an A10).
fn family_rows(key: &str) -> Vec<&'static Gpu> {
    let longest = GPUS
        .iter()
        .filter(|g| key.starts_with(&normalize(g.family)))
        .map(|g| normalize(g.family).len())
        .max();
    match longest {
        Some(len) => GPUS
            .iter()
            .filter(|g| {
                let f = normalize(g.family);
                f.len() == len && key.starts_with(&f)
            })
            .collect(),
        None => Vec::new(),
    }
}

/// Ratio of reported memory to the row's stated memory, or `None` when it
/// is out of range. Drivers report a little less than the stated GiB
/// (seen: 0.967 for a 12 GB laptop part up to 0.9999 for MI300X).
fn memory_fit(g: &Gpu, bytes: u64) -> Option<f64> {
    let ratio = bytes as f64 / (g.device_memory_gib() * (1u64 << 30) as f64);
    (0.90..=1.02).contains(&ratio).then_some(ratio)
}

/// One row out of the candidates: those whose memory fits (required when
/// `memory_required`), then the first if all that remain have the same
/// figures.
fn pick(cands: &[&'static Gpu], bytes: Option<u64>, memory_required: bool) -> Option<&'static Gpu> {
    let fitting: Vec<&'static Gpu> = match bytes {
        Some(b) => cands
            .iter()
            .copied()
            .filter(|g| memory_fit(g, b).is_some())
            .collect(),
        None if memory_required => return None,
        None => cands.to_vec(),
    };
    let rest = if fitting.is_empty() && !memory_required && cands.len() == 1 {
        cands.to_vec()
    } else {
        fitting
    };
    let first = *rest.first()?;
    rest.iter().all(|g| same_figures(first, g)).then_some(first)
}

/// Whether two rows give the same per-device roofs (within 1%), so that
/// choosing either is harmless.
fn same_figures(a: &Gpu, b: &Gpu) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 0.01 * x.abs().max(y.abs());
    let peaks = Precision::ALL
        .iter()
        .all(|&p| match (a.peak_tflops(p), b.peak_tflops(p)) {
            (Some(x), Some(y)) => close(x, y),
            (None, None) => true,
            _ => false,
        });
    peaks && close(a.device_bandwidth_tbs(), b.device_bandwidth_tbs())
}

/// The GPU named by `--gpu`: a table key ("h100-sxm"), a device name or
/// spelling ("NVIDIA H100 PCIe", "H100-SXM"), or a family ("h100", "mi300x":
/// its first row). Case, spaces, dashes and vendor prefixes are ignored.
pub(crate) fn gpu_by_user_name(name: &str) -> Option<&'static Gpu> {
    let key = normalize(name);
    if key.is_empty() {
        return None;
    }
    GPUS.iter()
        .find(|g| normalize(g.key) == key)
        .or_else(|| {
            GPUS.iter()
                .find(|g| g.names.iter().any(|n| normalize(n) == key))
        })
        .or_else(|| GPUS.iter().find(|g| normalize(g.family) == key))
}

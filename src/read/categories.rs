//! The event categories of GPU work, as the trace formats write them: one list for every
//! reader, so that `summary`'s figures and the attribution of `ops` and `diff` count the
//! same activities and launches.

/// Categories of GPU activities (CUDA, ROCm, MTIA and the 2021 format).
pub(crate) const GPU_CATS: [&str; 7] = [
    "kernel",
    "Kernel",
    "gpu_memcpy",
    "Memcpy",
    "gpu_memset",
    "Memset",
    "mtia_ccp_events",
];

/// A GPU activity category that names memory work (`gpu_memcpy`, `Memset`...): `summary`
/// counts such an activity as memory whatever its name.
pub(crate) fn is_memory_category(cat: &str) -> bool {
    cat.contains("mem") || cat.contains("Mem")
}

/// Categories of the CPU events that launch GPU activities.
pub(crate) const RUNTIME_CATS: [&str; 4] =
    ["cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime"];

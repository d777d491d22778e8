//! The roofline arithmetic of a row or a group (docs/ops.md, "Roofline"): the achieved
//! rates of some FLOPs and bytes done in some time, and where they stand against a compute
//! peak and a memory bandwidth. One implementation for the instance rows (filled in as
//! they go to Python) and the groups (`kinetrace._tools.ops`, through `ops_rates`).

/// Which roof binds: the one the work takes longer to reach (`"compute"` or
/// `"memory"` in the output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Roof {
    Compute,
    Memory,
}

impl Roof {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Roof::Compute => "compute",
            Roof::Memory => "memory",
        }
    }
}

/// The figures of `OpRow` / `OpGroup` that follow from FLOPs, bytes and time; `None` where
/// they do not apply.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    pub(crate) tflops_s: Option<f64>,
    pub(crate) tbs: Option<f64>,
    pub(crate) flops_per_byte: Option<f64>,
    pub(crate) roof_tflops: Option<f64>,
    pub(crate) roof_pct: Option<f64>,
    pub(crate) bound: Option<Roof>,
    pub(crate) roof_time_us: Option<f64>,
}

/// The rates of `flops` and `bytes` done in `time_us` against a compute `peak` (TFLOPS) and
/// a `bandwidth` (TB/s): no FLOPs, no peak, or no (or a zero) peak or bandwidth leave the
/// roofline's figures `None`; a zero time leaves the rates and `roof_pct` `None`.
pub(crate) fn rates(
    flops: Option<f64>,
    bytes: Option<f64>,
    time_us: f64,
    peak: Option<f64>,
    bandwidth: Option<f64>,
) -> Rates {
    let seconds = time_us * 1e-6;
    let per_second = |v: Option<f64>| v.filter(|_| seconds > 0.0).map(|v| v / seconds / 1e12);
    let intensity = match (flops, bytes) {
        (Some(f), Some(b)) if b != 0.0 => Some(f / b),
        _ => None,
    };
    let mut out = Rates {
        tflops_s: per_second(flops),
        tbs: per_second(bytes),
        flops_per_byte: intensity,
        ..Rates::default()
    };
    let (Some(flops), Some(peak), Some(bandwidth)) = (
        flops,
        peak.filter(|&p| p != 0.0),
        bandwidth.filter(|&w| w != 0.0),
    ) else {
        return out;
    };
    // Time at each roof, µs: the slower one binds. Equal to achieved / min(peak, I x W)
    // where there are FLOPs, and defined for a pure copy (no FLOPs) too.
    let compute_us = flops / (peak * 1e6);
    let memory_us = bytes.unwrap_or(0.0) / (bandwidth * 1e6);
    let roof_us = compute_us.max(memory_us);
    out.roof_time_us = Some(roof_us);
    out.bound = Some(if compute_us >= memory_us {
        Roof::Compute
    } else {
        Roof::Memory
    });
    out.roof_tflops = Some(intensity.map_or(peak, |i| peak.min(i * bandwidth)));
    if time_us > 0.0 {
        out.roof_pct = Some(100.0 * roof_us / time_us);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_bound_gemm_worked_by_hand() {
        // 4,210,688 FLOPs and 115,200 bytes in 2 µs on an H100 SXM (989.5 TFLOPS bf16,
        // 3.35 TB/s): I = 36.55, I x W = 122.4 < 989.5, so memory bound at 0.0344 µs.
        let r = rates(
            Some(4210688.0),
            Some(115200.0),
            2.0,
            Some(989.5),
            Some(3.35),
        );
        assert_eq!(r.tflops_s, Some(4210688.0 / 2e-6 / 1e12));
        assert_eq!(r.tbs, Some(115200.0 / 2e-6 / 1e12));
        assert_eq!(r.flops_per_byte, Some(4210688.0 / 115200.0));
        assert_eq!(r.bound, Some(Roof::Memory));
        assert_eq!(r.roof_time_us, Some(115200.0 / 3.35e6));
        assert_eq!(r.roof_tflops, Some(4210688.0 / 115200.0 * 3.35));
        assert_eq!(r.roof_pct, Some(100.0 * (115200.0 / 3.35e6) / 2.0));
    }

    #[test]
    fn compute_bound_copy_and_missing_figures() {
        // 1e9 FLOPs on 1e3 bytes: compute bound at the peak.
        let r = rates(Some(1e9), Some(1e3), 10.0, Some(100.0), Some(1.0));
        assert_eq!(r.bound, Some(Roof::Compute));
        assert_eq!(r.roof_tflops, Some(100.0));
        assert_eq!(r.roof_time_us, Some(1e9 / 1e8));
        // A copy: no FLOPs to speak of, bytes only; no intensity without bytes.
        let copy = rates(Some(0.0), Some(1e6), 2.0, Some(1.0), Some(1.0));
        assert_eq!(
            (copy.bound, copy.roof_time_us),
            (Some(Roof::Memory), Some(1.0))
        );
        assert_eq!(copy.roof_pct, Some(50.0));
        let no_bytes = rates(Some(1e6), None, 1.0, Some(1.0), Some(1.0));
        assert_eq!((no_bytes.tbs, no_bytes.flops_per_byte), (None, None));
        assert_eq!(no_bytes.roof_tflops, Some(1.0));
        // Unmodelled (no FLOPs), no GPU, a zero peak: rates only, no roofline.
        for r in [
            rates(None, None, 5.0, Some(1.0), Some(1.0)),
            rates(Some(1e6), Some(1e3), 5.0, None, None),
            rates(Some(1e6), Some(1e3), 5.0, Some(0.0), Some(1.0)),
        ] {
            assert_eq!((r.roof_time_us, r.bound, r.roof_pct), (None, None, None));
        }
        // A zero time: no rates, no % of the roofline, the roof itself still there.
        let instant = rates(Some(1e6), Some(1e3), 0.0, Some(1.0), Some(1.0));
        assert_eq!(
            (instant.tflops_s, instant.tbs, instant.roof_pct),
            (None, None, None)
        );
        assert!(instant.roof_time_us.is_some());
    }
}

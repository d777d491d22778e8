//! How much of the GPU time under operators the exact rules model: the rows partition the
//! activities (each in one row), so their busy times split the time four ways, and the
//! modelled share is the modelled part of the operators that recorded their shapes, the
//! collectives (which `comm` measures) aside.

use super::{InstanceRow, Table};

/// The exact rows' GPU busy time (exact ns), by what their operators are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Coverage {
    /// Rows with a model (figures from their shapes).
    pub(crate) modelled_ns: i64,
    /// Unmodelled rows of operators that recorded their shapes (`Input Dims`).
    pub(crate) unmodelled_ns: i64,
    /// Unmodelled rows of operators without recorded shapes (a trace made without
    /// `record_shapes`, a compiled graph's launcher): no model could read them.
    pub(crate) without_shapes_ns: i64,
    /// Rows of collectives (an operator named as one, or one that launched an NCCL or RCCL
    /// kernel): communication, not compute.
    pub(crate) collectives_ns: i64,
}

/// Operator names of collectives: `record_param_comms` and the process groups' operators.
const COLLECTIVE_PREFIXES: [&str; 5] = [
    "record_param_comms",
    "nccl:",
    "c10d::",
    "c10d_functional::",
    "_c10d_functional::",
];

/// Whether an operator's name is a collective's.
pub(crate) fn is_collective_operator(name: &str) -> bool {
    COLLECTIVE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether a GPU activity's name is a collective's: it holds `nccl` or `rccl`, any case.
pub(crate) fn names_a_collective(name: &str) -> bool {
    let holds = |part: &[u8]| {
        (name.as_bytes())
            .windows(part.len())
            .any(|w| w.eq_ignore_ascii_case(part))
    };
    holds(b"nccl") || holds(b"rccl")
}

impl Coverage {
    /// The split of the exact rules' `rows`.
    pub(crate) fn of(rows: &[InstanceRow]) -> Coverage {
        let mut c = Coverage::default();
        for r in rows {
            let slot = if r.collective {
                &mut c.collectives_ns
            } else if r.table != Table::Unmodelled {
                &mut c.modelled_ns
            } else if r.input_dims.is_some() {
                &mut c.unmodelled_ns
            } else {
                &mut c.without_shapes_ns
            };
            *slot += r.kernel_ns;
        }
        c
    }

    pub(crate) fn add(&mut self, other: &Coverage) {
        self.modelled_ns += other.modelled_ns;
        self.unmodelled_ns += other.unmodelled_ns;
        self.without_shapes_ns += other.without_shapes_ns;
        self.collectives_ns += other.collectives_ns;
    }

    /// The modelled part of the time of operators with shapes (collectives aside); `None`
    /// where they have no GPU time.
    pub(crate) fn share(&self) -> Option<f64> {
        let with_shapes = self.modelled_ns + self.unmodelled_ns;
        (with_shapes > 0).then(|| self.modelled_ns as f64 / with_shapes as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::Coverage;
    use crate::tools::ops::{report_of_text, Rules};

    /// One kernel each: a modelled `aten::mm` (10 µs), an `aten::cat` with shapes and no
    /// model (4 µs), a compiled graph's launcher without shapes (2 µs), and an all-reduce
    /// under `record_param_comms` (7 µs), its kernel named by NCCL.
    const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "args": {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 20, "dur": 10, "args": {"Input Dims": [[[4, 8], [4, 8]], []], "Input type": ["TensorList", "Scalar"]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 21, "dur": 1, "args": {"correlation": 2}},
 {"ph": "X", "cat": "cpu_op", "name": "CompiledFunction", "pid": 1, "tid": 1, "ts": 40, "dur": 10},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 41, "dur": 1, "args": {"correlation": 3}},
 {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 60, "dur": 10, "args": {"Input Dims": [[1024]]}},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 61, "dur": 1, "args": {"correlation": 4}},
 {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 10, "args": {"correlation": 1}},
 {"ph": "X", "cat": "kernel", "name": "CatArrayBatchedCopy", "pid": 0, "tid": 7, "ts": 120, "dur": 4, "args": {"correlation": 2}},
 {"ph": "X", "cat": "kernel", "name": "triton_poi_fused_0", "pid": 0, "tid": 7, "ts": 130, "dur": 2, "args": {"correlation": 3}},
 {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 8, "ts": 140, "dur": 7, "args": {"correlation": 4}}
]}"#;

    #[test]
    fn the_rows_time_splits_four_ways_and_the_share_is_of_operators_with_shapes() {
        let found = |rules| report_of_text("ops-coverage", TRACE, rules).coverage;
        let c = found(Rules::Exact).unwrap();
        assert_eq!(
            c,
            Coverage {
                modelled_ns: 10_000,
                unmodelled_ns: 4_000,
                without_shapes_ns: 2_000,
                collectives_ns: 7_000,
            }
        );
        assert_eq!(c.share(), Some(10.0 / 14.0));
        assert_eq!(found(Rules::TraceLens), None);
        assert_eq!(Coverage::default().share(), None);
    }
}

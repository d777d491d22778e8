//! The `exact` rules: the same FLOPs as the TraceLens rules where those are right, and
//! what TraceLens gets wrong fixed:
//!
//! - bytes from each tensor's own dtype (a bf16 GEMM with an fp32 bias, a copy between
//!   dtypes, fp32 batch-norm statistics), every dtype sized (`bool` 1, `short` 2, complex 8
//!   and 16); a Python scalar operand (`Scalar`, `ScalarList`, or a non-tensor of no
//!   dtype) moves no bytes, a 0-d tensor one element;
//! - a bias charged at its recorded shape, and the GEMM's output at the inputs' dtype;
//! - a batch norm in training only when its flag says `True`;
//! - a reduction's output as the dimensions it keeps (`dim` read from the recorded text,
//!   the second input, the third for `norm` / `linalg_norm`);
//! - attention at its own dtype, and a causal mask of any shape counted as its triangle
//!   (torch's mask is aligned top-left: query i sees keys 0..=i);
//! - a convolution's bias counted when one is recorded;
//! - an operator counted once, at the outermost modelled operator (`layer_norm`, not also
//!   the `native_layer_norm` inside it), backward operators by their own models (no
//!   forward-shaped backward rows).

use super::args::{numel, Inputs, Model, Unmodelled};
use super::dtype::Dtype;
use super::{conv, Figures};

/// Bytes per element of every dtype torch records; `None` for a non-tensor.
pub(crate) fn bpe(name: &str) -> Option<f64> {
    Dtype::of(name).map(Dtype::bytes)
}

/// Bytes of input `i` as stored: elements times its dtype's size; 0 for a Python scalar.
pub(super) fn tensor_bytes(inputs: &Inputs, i: usize) -> Model<f64> {
    let Some(b) = bpe(inputs.dtype(i)) else {
        return Ok(0.0);
    };
    Ok(numel(&inputs.shape(i)?) * b)
}

pub(super) fn elem_bpe(inputs: &Inputs, i: usize) -> Model<f64> {
    bpe(inputs.dtype(i)).ok_or(Unmodelled("an operand's dtype is unknown"))
}

/// A (batched) GEMM: A at `first`, B after it, a bias at `first - 1` when `bias`.
fn gemm(inputs: &Inputs, first: usize, bias: bool) -> Model<Figures> {
    let (a, b) = (inputs.shape(first)?, inputs.shape(first + 1)?);
    let (batch, m, k, n) = match (&a[..], &b[..]) {
        ([m, k], [_, n]) => (1, *m, *k, *n),
        ([bt, m, k], [_, _, n]) => (*bt, *m, *k, *n),
        _ => return Err(Unmodelled("not matrices")),
    };
    let (batch, m, k, n) = (batch as f64, m as f64, k as f64, n as f64);
    let bias_flops = if bias { batch * m * n } else { 0.0 };
    let mut bytes = tensor_bytes(inputs, first)? + tensor_bytes(inputs, first + 1)?;
    bytes += batch * m * n * elem_bpe(inputs, first)?;
    if bias {
        bytes += tensor_bytes(inputs, first - 1)?;
    }
    Ok(Figures {
        flops: batch * 2.0 * m * n * k + bias_flops,
        bytes: Some(bytes),
    })
}

pub(super) fn unary(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let out = if inputs.has_shape(1) { 1 } else { 0 };
    let bytes = n * elem_bpe(inputs, 0)? + n * elem_bpe(inputs, out)?;
    Ok(Figures {
        flops: n,
        bytes: Some(bytes),
    })
}

pub(super) fn binary(inputs: &Inputs) -> Model<Figures> {
    let tl = super::elementwise::binary(inputs)?;
    let (a, b) = (inputs.shape(0)?, inputs.shape(1)?);
    // The output's dtype: recorded (an `out=` tensor), else the widest tensor operand's.
    let out_bpe = if inputs.has_shape(2) {
        elem_bpe(inputs, 2)?
    } else {
        [(0, &a), (1, &b)]
            .iter()
            .filter(|(i, s)| !s.is_empty() || *i == 0)
            .map(|(i, _)| bpe(inputs.dtype(*i)).unwrap_or(0.0))
            .fold(0.0, f64::max)
    };
    let bytes = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + tl.flops * out_bpe;
    Ok(Figures {
        flops: tl.flops,
        bytes: Some(bytes),
    })
}

/// A reduction over the dimensions its `dim` argument lists (at concrete position
/// `dim_at`, recorded as a `Scalar` or `ScalarList`); all of them when there is none or it
/// is empty (`[]`, as torch reads it).
pub(super) fn reduce(inputs: &Inputs, scan: bool, dim_at: usize) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let n = numel(&shape);
    let is_dim = matches!(inputs.dtype(dim_at), "Scalar" | "ScalarList");
    let n_out = match inputs.concrete_ints(dim_at) {
        _ if scan => n,
        Ok(dims) if is_dim && !dims.is_empty() => {
            let rank = shape.len().max(1) as i64;
            let reduced: Vec<i64> = dims.iter().map(|d| d.rem_euclid(rank)).collect();
            let kept = (0..shape.len()).filter(|&d| !reduced.contains(&(d as i64)));
            kept.map(|d| shape[d] as f64).product()
        }
        _ => 1.0,
    };
    let b = elem_bpe(inputs, 0)?;
    Ok(Figures {
        flops: n,
        bytes: Some((n + n_out) * b),
    })
}

/// Normalizations: TraceLens's FLOPs; bytes the input read, the output written, and every
/// other recorded tensor (weight, bias, statistics) at its own size.
fn norm(inputs: &Inputs, tl: Figures) -> Model<Figures> {
    let x = tensor_bytes(inputs, 0)?;
    let count = inputs.dims.as_ref().map_or(0, Vec::len);
    let mut bytes = 2.0 * x;
    for i in 1..count {
        if inputs.has_shape(i) {
            bytes += tensor_bytes(inputs, i)?;
        }
    }
    Ok(Figures {
        flops: tl.flops,
        bytes: Some(bytes),
    })
}

fn convolution(inputs: &Inputs) -> Model<Figures> {
    let c = conv::geometry(inputs, 0, 3)?;
    let has_bias = inputs.has_shape(2);
    let out = numel(&c.out);
    let flops = c.flops() + if has_bias { out } else { 0.0 };
    let bytes = tensor_bytes(inputs, 0)?
        + tensor_bytes(inputs, 1)?
        + if has_bias {
            tensor_bytes(inputs, 2)?
        } else {
            0.0
        }
        + out * elem_bpe(inputs, 0)?;
    Ok(Figures {
        flops,
        bytes: Some(bytes),
    })
}

/// Query-key pairs a top-left causal mask keeps: query i sees keys 0..=i.
fn causal_pairs(nq: f64, nk: f64) -> f64 {
    let full = nq.min(nk);
    // Rows 0..full see i + 1 keys; the rows after see all nk.
    full * (full + 1.0) / 2.0 + (nq - full) * nk
}

fn sdpa(inputs: &Inputs, causal_at: usize) -> Model<Figures> {
    let (q, k, v) = (inputs.shape(0)?, inputs.shape(1)?, inputs.shape(2)?);
    let ([b, hq, nq, dq], [_, _, nk, _], [_, _, _, dv]) = (&q[..], &k[..], &v[..]) else {
        return Err(Unmodelled("Q, K, V are not 4-dimensional"));
    };
    let f = |x: &i64| *x as f64;
    let causal = inputs
        .concrete(causal_at)
        .is_ok_and(|t| t.eq_ignore_ascii_case("true"));
    let pairs = if causal {
        causal_pairs(f(nq), f(nk))
    } else {
        f(nq) * f(nk)
    };
    let flops = f(b) * f(hq) * pairs * (2.0 * f(dq) + 2.0 * f(dv));
    let out = f(b) * f(hq) * f(nq) * f(dv) * elem_bpe(inputs, 0)?;
    let bytes = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + tensor_bytes(inputs, 2)?;
    Ok(Figures {
        flops,
        bytes: Some(bytes + out),
    })
}

/// The exact figures of an operator of TraceLens's families, `None` when its name has
/// none (`memory` models the others).
pub(crate) fn figures(name: &str, inputs: &Inputs) -> Option<Model<Figures>> {
    let tl = super::family(name)?;
    Some(match name {
        "aten::mm" | "aten::bmm" => gemm(inputs, 0, false),
        "aten::addmm" | "aten::baddbmm" => gemm(inputs, 1, true),
        "aten::convolution" => convolution(inputs),
        // TraceLens takes any non-empty flag text, "False" too, as training.
        "aten::batch_norm"
        | "aten::native_batch_norm"
        | "aten::cudnn_batch_norm"
        | "aten::miopen_batch_norm" => {
            let training = inputs
                .concrete(5)
                .is_ok_and(|t| t.eq_ignore_ascii_case("true"));
            super::norm::batch_norm_training_as(inputs, training).and_then(|f| norm(inputs, f))
        }
        "aten::cumsum" | "aten::cumprod" => reduce(inputs, true, 1),
        // `norm(self, p, dim, ...)`, `linalg_norm(self, ord, dim, ...)`.
        "aten::norm" | "aten::linalg_norm" => reduce(inputs, false, 2),
        "aten::_scaled_dot_product_flash_attention" => sdpa(inputs, 4),
        "aten::_scaled_dot_product_efficient_attention"
        | "aten::_scaled_dot_product_cudnn_attention" => sdpa(inputs, 6),
        _ => match tl.table {
            super::Table::UnaryElementwise if name.starts_with("aten::") => unary(inputs),
            super::Table::BinaryElementwise => binary(inputs),
            super::Table::Reduce => reduce(inputs, false, 1),
            super::Table::Normalization if name.starts_with("aten::") => {
                (tl.forward)(inputs).and_then(|f| norm(inputs, f))
            }
            // The others' figures already read each operand's own dtype.
            _ => (tl.forward)(inputs),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ops::{report_of_text, Rules};

    /// A layer norm with the native one inside it, a bf16 addmm with an fp32 bias (and an
    /// unmodelled fill inside it launching a kernel), a sum over one dimension, a causal
    /// attention with 2 queries and 6 keys, an unmodelled cat launching a kernel.
    const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::layer_norm", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"Input Dims": [[4, 8], [], [8], [8], [], []], "Input type": ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"], "Concrete Inputs": ["", "[8]", "", "", "1e-05", "True"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm", "pid": 1, "tid": 1, "ts": 10, "dur": 50, "args": {"Input Dims": [[4, 8], [], [8], [8], []], "Input type": ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"], "Concrete Inputs": ["", "[8]", "", "", "1e-05"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 200, "dur": 10, "args": {"Input Dims": [[16], [4, 8], [8, 16], [], []], "Input type": ["float", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": 201, "dur": 5},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 202, "dur": 1, "args": {"correlation": 1}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 1, "tid": 1, "ts": 202},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 1000, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "fill", "pid": 0, "tid": 7, "ts": 1000, "dur": 2, "args": {"correlation": 1}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 300, "dur": 10, "args": {"Input Dims": [[4, 8], [], [], []], "Input type": ["c10::BFloat16", "ScalarList", "Scalar", ""], "Concrete Inputs": ["", "[1]", "False", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::linalg_norm", "pid": 1, "tid": 1, "ts": 350, "dur": 10, "args": {"Input Dims": [[4, 8], [], [], [], []], "Input type": ["c10::BFloat16", "Scalar", "ScalarList", "Scalar", ""], "Concrete Inputs": ["", "2", "[0]", "True", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::_scaled_dot_product_flash_attention", "pid": 1, "tid": 1, "ts": 400, "dur": 10, "args": {"Input Dims": [[1, 2, 2, 8], [1, 2, 6, 8], [1, 2, 6, 8], [], [], [], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar", "Scalar", ""], "Concrete Inputs": ["", "", "", "0.", "True", "False", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::batch_norm", "pid": 1, "tid": 1, "ts": 450, "dur": 10, "args": {"Input Dims": [[2, 4, 3], [4], [4], [4], [4], [], [], [], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "float", "float", "Scalar", "Scalar", "Scalar", "Scalar"], "Concrete Inputs": ["", "", "", "", "", "False", "0.1", "1e-05", "True"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 500, "dur": 10},
 {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 501, "dur": 1, "args": {"correlation": 2}},
 {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 1, "tid": 1, "ts": 501},
 {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 2, "pid": 0, "tid": 7, "ts": 1100, "bp": "e"},
 {"ph": "X", "cat": "kernel", "name": "cat", "pid": 0, "tid": 7, "ts": 1100, "dur": 3.5, "args": {"correlation": 2}}
]}"#;

    #[test]
    fn exact_rules_count_each_operator_once_with_its_own_dtypes() {
        let figures = |rules| -> Vec<(String, Option<f64>, Option<f64>, i64)> {
            let found = report_of_text("ops-exact", TRACE, rules).rows;
            let out = found.into_iter().map(|r| {
                let flops = r.figures.map(|f| f.flops);
                (r.name, flops, r.figures.and_then(|f| f.bytes), r.kernel_ns)
            });
            out.collect()
        };
        let name = |n: &str| n.to_string();
        let some = Some;
        assert_eq!(
            figures(Rules::Exact),
            vec![
                // 6C + 5n; x read and y written (2 x 64 B), weight and bias 16 B each.
                (name("aten::layer_norm"), some(208.0), some(160.0), 0),
                // 2MNK + MN; A 64 B, B 256 B, out 128 B (bf16), bias 16 x 4 B; the fill's
                // kernel inside it is its.
                (name("aten::addmm"), some(1088.0), some(512.0), 2000),
                // 32 in, 4 out (dim 1 reduced), bf16.
                (name("aten::sum"), some(32.0), some(72.0), 0),
                // 32 in, 8 out: dim [0] (its third input; the second is the order 2).
                (name("aten::linalg_norm"), some(32.0), some(80.0), 0),
                // 3 kept pairs x 2 heads x (2 d + 2 d); Q 64 B, K 192 B, V 192 B, O 64 B.
                (
                    name("aten::_scaled_dot_product_flash_attention"),
                    some(192.0),
                    some(512.0),
                    0
                ),
                // Eval: 3C + 2n; x and y 2 x 48 B, weight and bias 8 B each, fp32 statistics
                // 16 B each.
                (name("aten::batch_norm"), some(60.0), some(144.0), 0),
                // No model: reported with its kernel's time.
                (name("aten::cat"), None, None, 3500),
            ]
        );
        // TraceLens: both norms, the bias at A's dtype, one output element, no attention.
        assert_eq!(
            figures(Rules::TraceLens),
            vec![
                (name("aten::layer_norm"), some(208.0), some(224.0), 0),
                (name("aten::native_layer_norm"), some(208.0), some(224.0), 0),
                (name("aten::addmm"), some(1088.0), some(480.0), 2000),
                (name("aten::sum"), some(32.0), some(66.0), 0),
                (name("aten::linalg_norm"), some(32.0), some(66.0), 0),
                // Training ("False" is not empty): 6C + 5n, 2n·bpe + 6C·bpe.
                (name("aten::batch_norm"), some(144.0), some(144.0), 0),
            ]
        );
    }

    #[test]
    fn a_causal_mask_of_any_shape_keeps_its_triangle() {
        assert_eq!(causal_pairs(4.0, 4.0), 10.0);
        // Query 0 sees key 0, query 1 keys 0..=1; with 6 keys, 2 queries: 1 + 2.
        assert_eq!(causal_pairs(2.0, 6.0), 3.0);
        // 6 queries, 2 keys: 1 + 2 + 4 * 2.
        assert_eq!(causal_pairs(6.0, 2.0), 11.0);
    }
}

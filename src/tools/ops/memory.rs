//! Operators the exact rules model beyond TraceLens's families: the memory-bound ones that
//! take GPU time in real traces (softmax, activations, fills, masks, indexing, reductions,
//! the layer norm's backward). Each rule is stated where it is written; bytes are each
//! tensor's own dtype's ([`super::dtype::Dtype`]), FLOPs the arithmetic per element the
//! operator does, not what a kernel might fuse. An operator whose recorded inputs a rule
//! cannot read (a dtype unknown, a shape missing) has no figures, as everywhere.

use super::args::{numel, Inputs, Model, Unmodelled};
use super::elementwise::broadcast;
use super::exact::{binary, bpe, elem_bpe, reduce, tensor_bytes, unary};
use super::{Figures, Table};

/// Unary elementwise operators beyond TraceLens's: one FLOP per element, the input read
/// and the output written at its dtype (exact `unary`).
const UNARY: [&str; 26] = [
    "aten::gelu",
    "aten::gelu_",
    "aten::relu",
    "aten::relu_",
    "aten::tanh",
    "aten::tanh_",
    "aten::exp",
    "aten::exp_",
    "aten::log",
    "aten::log_",
    "aten::log2",
    "aten::sqrt",
    "aten::sqrt_",
    "aten::abs",
    "aten::clamp",
    "aten::clamp_",
    "aten::hardswish",
    "aten::hardtanh",
    "aten::leaky_relu",
    "aten::elu",
    "aten::sin",
    "aten::cos",
    "aten::reciprocal",
    "aten::erf",
    "aten::sigmoid_",
    "aten::silu_",
];

/// Binary elementwise operators beyond TraceLens's: one FLOP per element of the broadcast
/// shape, both inputs read, the output written at the wider dtype (exact `binary`).
const BINARY: [&str; 9] = [
    "aten::sub",
    "aten::sub_",
    "aten::rsub",
    "aten::maximum",
    "aten::minimum",
    "aten::gelu_backward",
    "aten::tanh_backward",
    "aten::silu_backward",
    "aten::hardswish_backward",
];

/// Reductions beyond TraceLens's, with the concrete position of their `dim` argument.
const REDUCE: [(&str, usize); 7] = [
    ("aten::linalg_vector_norm", 2),
    ("aten::prod", 1),
    ("aten::argmax", 1),
    ("aten::argmin", 1),
    ("aten::all", 1),
    ("aten::any", 1),
    ("aten::nansum", 1),
];

/// The table of an operator these rules model; `None` for the others.
pub(crate) fn table(name: &str) -> Option<Table> {
    Some(match name {
        n if UNARY.contains(&n) => Table::UnaryElementwise,
        "aten::fill_" | "aten::zero_" | "aten::masked_fill" | "aten::masked_fill_" => {
            Table::UnaryElementwise
        }
        "aten::native_dropout" => Table::UnaryElementwise,
        n if BINARY.contains(&n) => Table::BinaryElementwise,
        "aten::where" => Table::BinaryElementwise,
        n if REDUCE.iter().any(|(r, _)| *r == n) => Table::Reduce,
        "aten::_softmax"
        | "aten::_log_softmax"
        | "aten::_softmax_backward_data"
        | "aten::_log_softmax_backward_data" => Table::Softmax,
        "aten::native_layer_norm_backward" => Table::Normalization,
        "aten::max_pool2d_with_indices" | "aten::mse_loss" => Table::Reduce,
        "aten::max_pool2d_with_indices_backward" | "aten::mse_loss_backward" => {
            Table::BinaryElementwise
        }
        "aten::index_select" | "aten::gather" | "aten::embedding" => Table::Indexing,
        _ => return None,
    })
}

/// The figures of an operator [`table`] names.
pub(crate) fn figures(name: &str, inputs: &Inputs) -> Option<Model<Figures>> {
    table(name)?;
    Some(match name {
        n if UNARY.contains(&n) => unary(inputs),
        n if BINARY.contains(&n) => binary(inputs),
        "aten::fill_" | "aten::zero_" => fill(inputs),
        "aten::masked_fill" | "aten::masked_fill_" => masked_fill(inputs),
        "aten::native_dropout" => dropout(inputs),
        "aten::where" => select(inputs),
        "aten::_softmax" | "aten::_log_softmax" => softmax(inputs),
        "aten::_softmax_backward_data" | "aten::_log_softmax_backward_data" => {
            softmax_backward(inputs)
        }
        "aten::native_layer_norm_backward" => layer_norm_backward(inputs),
        "aten::max_pool2d_with_indices" => max_pool(inputs),
        "aten::max_pool2d_with_indices_backward" => max_pool_backward(inputs),
        "aten::mse_loss" => mse_loss(inputs),
        "aten::mse_loss_backward" => mse_loss_backward(inputs),
        "aten::index_select" => index_select(inputs),
        "aten::gather" => gather(inputs),
        "aten::embedding" => embedding(inputs),
        n => {
            let (_, dim_at) = REDUCE.iter().find(|(r, _)| *r == n)?;
            reduce(inputs, false, *dim_at)
        }
    })
}

/// `fill_(self, value)`, `zero_(self)`: no arithmetic; the tensor written once.
fn fill(inputs: &Inputs) -> Model<Figures> {
    Ok(Figures {
        flops: 0.0,
        bytes: Some(tensor_bytes(inputs, 0)?),
    })
}

/// `masked_fill(self, mask, value)`: one select per element; self and the mask read, the
/// output written at self's dtype.
fn masked_fill(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let bytes = 2.0 * tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)?;
    Ok(Figures {
        flops: n,
        bytes: Some(bytes),
    })
}

/// `native_dropout(input, p, train)`: one FLOP per element (the scale); the input read,
/// the output and a one-byte mask written.
fn dropout(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    Ok(Figures {
        flops: n,
        bytes: Some(2.0 * n * elem_bpe(inputs, 0)? + n),
    })
}

/// `where(condition, self, other)`: one select per element of the three shapes'
/// broadcast; each tensor read, the output written at the wider of self's and other's
/// dtypes (a Python scalar operand is no tensor).
fn select(inputs: &Inputs) -> Model<Figures> {
    let pair = broadcast(&inputs.shape(0)?, &inputs.shape(1)?)?;
    let n = numel(&broadcast(&pair, &inputs.shape(2)?)?);
    let out_bpe = [1, 2]
        .iter()
        .filter_map(|&i| bpe(inputs.dtype(i)))
        .fold(0.0, f64::max);
    let read = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + tensor_bytes(inputs, 2)?;
    Ok(Figures {
        flops: n,
        bytes: Some(read + n * out_bpe),
    })
}

/// `_softmax(self, dim, half_to_float)`, `_log_softmax`: 5 FLOPs per element (the max,
/// the subtraction, the exponential, the sum, the division or logarithm); the input read
/// and the output written, in fp32 where `half_to_float` is true.
fn softmax(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let in_bpe = elem_bpe(inputs, 0)?;
    let to_float = inputs
        .concrete(2)
        .is_ok_and(|t| t.eq_ignore_ascii_case("true"));
    let out_bpe = if to_float { 4.0 } else { in_bpe };
    Ok(Figures {
        flops: 5.0 * n,
        bytes: Some(n * (in_bpe + out_bpe)),
    })
}

/// `_softmax_backward_data(grad_output, output, dim, input_dtype)`: 3 FLOPs per element
/// (the product, its sum, the scaled difference); both read, the gradient written at the
/// gradient's dtype.
fn softmax_backward(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let bytes = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + n * elem_bpe(inputs, 0)?;
    Ok(Figures {
        flops: 3.0 * n,
        bytes: Some(bytes),
    })
}

/// `native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight,
/// bias, output_mask)`: 13 FLOPs per element (the input's gradient 10: the normalized
/// input again, two row sums and the combination; the weight's and bias's sums 3); the
/// gradient, input, statistics and weight read, the input's gradient written, and the
/// weight's and bias's gradients at the weight's size each.
fn layer_norm_backward(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let mut bytes = tensor_bytes(inputs, 0)? + 2.0 * tensor_bytes(inputs, 1)?;
    for i in [3, 4] {
        bytes += tensor_bytes(inputs, i)?;
    }
    if inputs.has_shape(5) {
        bytes += 3.0 * tensor_bytes(inputs, 5)?;
    }
    Ok(Figures {
        flops: 13.0 * n,
        bytes: Some(bytes),
    })
}

/// The output elements of a 2-d pooling of `shape` (`[..., H, W]`) with the window, stride,
/// padding and dilation lists at concrete positions `at..at + 4` and `ceil_mode` after
/// them, as torch sizes it: (H + 2p - d(k - 1) - 1) / s + 1, rounded down (up with
/// `ceil_mode`, less a last window that would start in the padding); a stride of `[]` is
/// the window, a missing padding 0, a missing dilation 1.
fn pooled(inputs: &Inputs, shape: &[i64], at: usize) -> Model<(f64, f64)> {
    let ints = |i: usize, default: i64| -> Model<[i64; 2]> {
        let v = inputs.concrete_ints(i).unwrap_or_default();
        Ok(match v[..] {
            [] => [default; 2],
            [x] => [x; 2],
            [x, y] => [x, y],
            _ => return Err(Unmodelled("a 2-d pooling argument has more than 2 values")),
        })
    };
    let k = ints(at, 0)?;
    if k.contains(&0) {
        return Err(Unmodelled("no pooling window"));
    }
    let s = match ints(at + 1, 0)? {
        [0, _] | [_, 0] => k,
        s => s,
    };
    let (p, d) = (ints(at + 2, 0)?, ints(at + 3, 1)?);
    let ceil = inputs
        .concrete(at + 4)
        .is_ok_and(|t| t.eq_ignore_ascii_case("true"));
    let [.., h, w] = shape[..] else {
        return Err(Unmodelled("the input is not 2-d or more"));
    };
    let mut out = 1.0;
    for (i, size) in [h, w].into_iter().enumerate() {
        // In i128: a recorded value can be any i64, and no product of two overflows.
        let (size, k, s, p, d) = (
            size as i128,
            k[i] as i128,
            s[i] as i128,
            p[i] as i128,
            d[i] as i128,
        );
        if k < 1 || s < 1 || d < 1 || p < 0 {
            return Err(Unmodelled("a pooling argument is out of range"));
        }
        let span = size + 2 * p - d * (k - 1) - 1;
        if span < 0 {
            return Err(Unmodelled("the window is larger than the input"));
        }
        let mut o = if ceil {
            (span + s - 1) / s + 1
        } else {
            span / s + 1
        };
        if ceil && (o - 1) * s >= size + p {
            o -= 1;
        }
        out *= o as f64;
    }
    let planes = numel(&shape[..shape.len() - 2]);
    Ok((planes * out, (k[0] * k[1]) as f64))
}

/// `max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)`: one
/// comparison per window element of each output; the input read, the output and its
/// indices (8 bytes each) written.
fn max_pool(inputs: &Inputs) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let (out, window) = pooled(inputs, &shape, 1)?;
    let bytes = tensor_bytes(inputs, 0)? + out * (elem_bpe(inputs, 0)? + 8.0);
    Ok(Figures {
        flops: out * window,
        bytes: Some(bytes),
    })
}

/// `max_pool2d_with_indices_backward(grad_output, self, ..., indices)`: one add per output
/// gradient; the gradient and the indices read, the input's gradient written.
fn max_pool_backward(inputs: &Inputs) -> Model<Figures> {
    let grad = numel(&inputs.shape(0)?);
    let n_in = numel(&inputs.shape(1)?);
    let bytes = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 7)? + n_in * elem_bpe(inputs, 1)?;
    Ok(Figures {
        flops: grad,
        bytes: Some(bytes),
    })
}

/// `mse_loss(self, target, reduction)`: 3 FLOPs per element (difference, square, sum); both
/// read, the output written (every element with reduction 0, `none`; else one).
fn mse_loss(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let none = inputs.concrete(2).is_ok_and(|t| t.trim() == "0");
    let out = if none { n } else { 1.0 };
    let bytes = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + out * elem_bpe(inputs, 0)?;
    Ok(Figures {
        flops: 3.0 * n,
        bytes: Some(bytes),
    })
}

/// `mse_loss_backward(grad_output, self, target, reduction)`: 3 FLOPs per element
/// (difference, scale, product); the three read, the input's gradient written.
fn mse_loss_backward(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(1)?);
    let read = tensor_bytes(inputs, 0)? + tensor_bytes(inputs, 1)? + tensor_bytes(inputs, 2)?;
    Ok(Figures {
        flops: 3.0 * n,
        bytes: Some(read + n * elem_bpe(inputs, 1)?),
    })
}

/// A row gather: `rows` indices (their tensor at `index`) each pick `width` elements of
/// the source (input 0): no arithmetic; the indices and the rows read, the rows written.
fn rows_gathered(inputs: &Inputs, index: usize, width: f64) -> Model<Figures> {
    let picked = numel(&inputs.shape(index)?) * width;
    let bytes = tensor_bytes(inputs, index)? + 2.0 * picked * elem_bpe(inputs, 0)?;
    Ok(Figures {
        flops: 0.0,
        bytes: Some(bytes),
    })
}

/// `index_select(self, dim, index)`: each index picks a slice of self across `dim`.
fn index_select(inputs: &Inputs) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let dim = inputs
        .concrete_ints(1)?
        .first()
        .copied()
        .ok_or(Unmodelled("no dim"))?;
    let d = dim.rem_euclid(shape.len().max(1) as i64) as usize;
    let along = *shape.get(d).ok_or(Unmodelled("dim is out of range"))?;
    let slice = if along == 0 {
        0.0
    } else {
        numel(&shape) / along as f64
    };
    rows_gathered(inputs, 2, slice)
}

/// `gather(self, dim, index)`: one element per index.
fn gather(inputs: &Inputs) -> Model<Figures> {
    rows_gathered(inputs, 2, 1.0)
}

/// `embedding(weight, indices)`: each index picks a row of the weight.
fn embedding(inputs: &Inputs) -> Model<Figures> {
    let weight = inputs.shape(0)?;
    let width = weight.last().copied().ok_or(Unmodelled("a 0-d weight"))?;
    rows_gathered(inputs, 1, width as f64)
}

#[cfg(test)]
mod tests {
    use crate::tools::ops::{report_of_text, Rules};

    /// Figures worked by hand (see each rule above); a gelu of no known dtype and a pooling
    /// of absurd arguments have none (and, without GPU work, no row).
    const TRACE: &str = r#"{"traceEvents": [
 {"ph": "X", "cat": "cpu_op", "name": "aten::_softmax", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {"Input Dims": [[2, 3, 4], [], []], "Input type": ["c10::BFloat16", "Scalar", "Scalar"], "Concrete Inputs": ["", "-1", "False"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"Input Dims": [[8, 4], []], "Input type": ["float", "Scalar"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"Input Dims": [[100, 16], [4, 8], [], [], []], "Input type": ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::index_select", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"Input Dims": [[10, 6], [], [3]], "Input type": ["float", "Scalar", "long int"], "Concrete Inputs": ["", "0", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::where", "pid": 1, "tid": 1, "ts": 8, "dur": 1, "args": {"Input Dims": [[4, 1], [1, 5], []], "Input type": ["bool", "float", "Scalar"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::native_layer_norm_backward", "pid": 1, "tid": 1, "ts": 10, "dur": 1, "args": {"Input Dims": [[4, 8], [4, 8], [], [4, 1], [4, 1], [8], [8], []], "Input type": ["float", "float", "", "float", "float", "float", "float", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1, "tid": 1, "ts": 12, "dur": 1, "args": {"Input Dims": [[6], []], "Input type": ["c10::Half", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::linalg_vector_norm", "pid": 1, "tid": 1, "ts": 14, "dur": 1, "args": {"Input Dims": [[5, 7], [], [], [], []], "Input type": ["float", "Scalar", "", "Scalar", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 1, "tid": 1, "ts": 16, "dur": 1, "args": {"Input Dims": [[6], []], "Input type": ["TensorList", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::max_pool2d_with_indices", "pid": 1, "tid": 1, "ts": 18, "dur": 1, "args": {"Input Dims": [[2, 3, 112, 112], [], [], [], [], []], "Input type": ["c10::BFloat16", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"], "Concrete Inputs": ["", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::max_pool2d_with_indices_backward", "pid": 1, "tid": 1, "ts": 20, "dur": 1, "args": {"Input Dims": [[2, 3, 56, 56], [2, 3, 112, 112], [], [], [], [], [], [2, 3, 56, 56]], "Input type": ["c10::BFloat16", "c10::BFloat16", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar", "long int"], "Concrete Inputs": ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "[1, 1]", "False", ""]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::max_pool2d_with_indices", "pid": 1, "tid": 1, "ts": 21, "dur": 1, "args": {"Input Dims": [[2, 3, 112, 112], [], [], [], [], []], "Input type": ["c10::BFloat16", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"], "Concrete Inputs": ["", "[9223372036854775807, 3]", "[-9223372036854775808, 2]", "[1, 1]", "[9223372036854775807, 1]", "True"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mse_loss", "pid": 1, "tid": 1, "ts": 22, "dur": 1, "args": {"Input Dims": [[4, 10], [4, 10], []], "Input type": ["float", "float", "Scalar"], "Concrete Inputs": ["", "", "1"]}},
 {"ph": "X", "cat": "cpu_op", "name": "aten::mse_loss_backward", "pid": 1, "tid": 1, "ts": 24, "dur": 1, "args": {"Input Dims": [[], [4, 10], [4, 10], []], "Input type": ["float", "float", "float", "Scalar"], "Concrete Inputs": ["", "", "", "1"]}}
]}"#;

    #[test]
    fn memory_bound_operators_have_their_stated_figures_under_the_exact_rules_only() {
        let rows = |rules| report_of_text("ops-memory", TRACE, rules).rows;
        let got: Vec<(String, &str, Option<f64>, Option<f64>)> = rows(Rules::Exact)
            .into_iter()
            .map(|r| {
                let f = r.figures;
                (
                    r.name,
                    r.table.label(),
                    f.map(|f| f.flops),
                    f.and_then(|f| f.bytes),
                )
            })
            .collect();
        let row = |name: &str, table, flops: f64, bytes: f64| {
            (name.to_string(), table, Some(flops), Some(bytes))
        };
        assert_eq!(
            got,
            vec![
                row("aten::_softmax", "Softmax", 120.0, 96.0),
                row("aten::fill_", "UnaryElementwise", 0.0, 128.0),
                row("aten::embedding", "Indexing", 0.0, 2304.0),
                row("aten::index_select", "Indexing", 0.0, 168.0),
                row("aten::where", "BinaryElementwise", 20.0, 104.0),
                row(
                    "aten::native_layer_norm_backward",
                    "Normalization",
                    416.0,
                    512.0
                ),
                row("aten::gelu", "UnaryElementwise", 6.0, 24.0),
                row("aten::linalg_vector_norm", "Reduce", 35.0, 144.0),
                // 112 -> (112 + 2 - 2 - 1) / 2 + 1 = 56 a side: 2·3·56·56 = 18,816 outputs.
                row(
                    "aten::max_pool2d_with_indices",
                    "Reduce",
                    18_816.0 * 9.0,
                    75_264.0 * 2.0 + 18_816.0 * 10.0
                ),
                row(
                    "aten::max_pool2d_with_indices_backward",
                    "BinaryElementwise",
                    18_816.0,
                    18_816.0 * 2.0 + 18_816.0 * 8.0 + 75_264.0 * 2.0
                ),
                row("aten::mse_loss", "Reduce", 120.0, 324.0),
                row("aten::mse_loss_backward", "BinaryElementwise", 120.0, 484.0),
            ]
        );
        // TraceLens has no model for them: no row under its rules.
        assert!(rows(Rules::TraceLens).is_empty());
    }
}

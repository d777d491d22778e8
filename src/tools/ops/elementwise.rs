//! Elementwise operators under TraceLens's rules.
//!
//! - Unary (`copy_`, `sigmoid`, `silu`, `rsqrt`, `pow`, `clamp_min`, ...): FLOPs = n (the
//!   first input's elements); bytes = n·bpe(in) + n·bpe(out), the output's dtype the second
//!   input's when it has a shape (`copy_(self, src)`: destination then source), else the
//!   first's.
//! - Binary (`add`, `mul`, `div`, `threshold_backward`, ...): FLOPs = elements of the
//!   broadcast shape; bytes = both inputs (a non-tensor operand is one element of its
//!   recorded type: "Scalar" 4 bytes, "double" 8) + the output: the third input's dtype
//!   when it has a shape, else the wider input's when both have one, else the first's.
//! - Padding and nearest upsampling: the output shape from the second concrete input.

use super::args::{numel, Inputs, Model, Unmodelled};
use super::dtype::tracelens_bpe;
use super::Figures;

pub(crate) fn unary(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let out_type = if inputs.has_shape(1) {
        inputs.dtype(1)
    } else {
        inputs.dtype(0)
    };
    let bytes = match (tracelens_bpe(inputs.dtype(0)), tracelens_bpe(out_type)) {
        (Some(i), Some(o)) => Some(n * i + n * o),
        _ => None,
    };
    Ok(Figures { flops: n, bytes })
}

/// NumPy's broadcast of two shapes.
pub(super) fn broadcast(a: &[i64], b: &[i64]) -> Model<Vec<i64>> {
    let rank = a.len().max(b.len());
    let at = |s: &[i64], i: usize| {
        let pad = rank - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Unmodelled("shapes do not broadcast")),
        })
        .collect()
}

pub(crate) fn binary(inputs: &Inputs) -> Model<Figures> {
    let (a, b) = (inputs.shape(0)?, inputs.shape(1)?);
    let n_out = numel(&broadcast(&a, &b)?);
    let (bpe_a, bpe_b) = (
        tracelens_bpe(inputs.dtype(0)),
        tracelens_bpe(inputs.dtype(1)),
    );
    let bpe_out = if inputs.has_shape(2) {
        tracelens_bpe(inputs.dtype(2))
    } else if !a.is_empty() && !b.is_empty() {
        bpe_a.zip(bpe_b).map(|(x, y)| x.max(y))
    } else {
        bpe_a
    };
    let bytes = match (bpe_a, bpe_b, bpe_out) {
        (Some(x), Some(y), Some(o)) => Some(numel(&a) * x + numel(&b) * y + n_out * o),
        _ => None,
    };
    Ok(Figures {
        flops: n_out,
        bytes,
    })
}

/// `replication_pad{1,2,3}d` and `upsample_nearest{1,2,3}d`: the output's last dimensions
/// from concrete input 1, its leading ones the input's.
pub(crate) fn resize(inputs: &Inputs) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let spatial = inputs.concrete_ints(1)?;
    let lead = shape
        .len()
        .checked_sub(spatial.len())
        .ok_or(Unmodelled("output size longer than the input"))?;
    let out: Vec<i64> = shape[..lead].iter().chain(&spatial).copied().collect();
    let (n_in, n_out) = (numel(&shape), numel(&out));
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| (n_in + n_out) * b);
    Ok(Figures {
        flops: n_out,
        bytes,
    })
}

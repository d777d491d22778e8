//! Matrix products (`mm`, `addmm`, `bmm`, `baddbmm`, `_scaled_mm`) under TraceLens's rules:
//! FLOPs = 2·M·N·K (+ M·N with a bias), bytes = (M·K + K·N + M·N (+ N with a bias)) · bpe
//! with one bpe, A's, for every operand; batched products times B. `linear` and `matmul`
//! have no model: the product they run carries the figures.

use super::args::{Inputs, Model, Unmodelled};
use super::dtype::tracelens_bpe;
use super::Figures;

/// One (batched) product's sizes.
struct Gemm {
    b: f64,
    m: f64,
    n: f64,
    k: f64,
    bias: bool,
    /// Bytes per element of the inputs and of the output.
    bpe_in: Option<f64>,
    bpe_out: Option<f64>,
}

impl Gemm {
    fn figures(&self) -> Figures {
        let (m, n, k) = (self.m, self.n, self.k);
        let bias = if self.bias { 1.0 } else { 0.0 };
        let flops = self.b * (2.0 * m * n * k + bias * m * n);
        let bytes = match (self.bpe_in, self.bpe_out) {
            (Some(i), Some(o)) => Some(self.b * ((m * k + k * n) * i + m * n * o + bias * n * i)),
            _ => None,
        };
        Figures { flops, bytes }
    }
}

fn matrix(inputs: &Inputs, i: usize) -> Model<(f64, f64)> {
    match inputs.shape(i)?[..] {
        [r, c] => Ok((r as f64, c as f64)),
        _ => Err(Unmodelled("not a matrix")),
    }
}

fn batch(inputs: &Inputs, i: usize) -> Model<(f64, f64, f64)> {
    match inputs.shape(i)?[..] {
        [b, r, c] => Ok((b as f64, r as f64, c as f64)),
        _ => Err(Unmodelled("not a batch of matrices")),
    }
}

/// `aten::mm(A, B)`, `aten::addmm(C, A, B)` (always a bias, charged as 1×N).
pub(crate) fn mm(inputs: &Inputs, first: usize, bias: bool) -> Model<Figures> {
    let ((m, k), (_, n)) = (matrix(inputs, first)?, matrix(inputs, first + 1)?);
    let bpe = tracelens_bpe(inputs.dtype(first));
    Ok(Gemm {
        b: 1.0,
        m,
        n,
        k,
        bias,
        bpe_in: bpe,
        bpe_out: bpe,
    }
    .figures())
}

/// `aten::bmm(A, B)`, `aten::baddbmm(C, A, B)`.
pub(crate) fn bmm(inputs: &Inputs, first: usize, bias: bool) -> Model<Figures> {
    let ((b, m, k), (_, _, n)) = (batch(inputs, first)?, batch(inputs, first + 1)?);
    let bpe = tracelens_bpe(inputs.dtype(first));
    Ok(Gemm {
        b,
        m,
        n,
        k,
        bias,
        bpe_in: bpe,
        bpe_out: bpe,
    }
    .figures())
}

/// `aten::_scaled_mm(A, B, ...)`: a bias only when exactly three inputs are recorded; a
/// 1-byte input writes a 2-byte output.
pub(crate) fn scaled_mm(inputs: &Inputs) -> Model<Figures> {
    let ((m, k), (_, n)) = (matrix(inputs, 0)?, matrix(inputs, 1)?);
    let bias = inputs.dims.as_ref().is_some_and(|d| d.len() == 3);
    let (a, b) = (
        tracelens_bpe(inputs.dtype(0)),
        tracelens_bpe(inputs.dtype(1)),
    );
    if a.is_none() || b.is_none() {
        return Err(Unmodelled("an operand's dtype is unknown"));
    }
    let out = if a == Some(1.0) { Some(2.0) } else { a };
    Ok(Gemm {
        b: 1.0,
        m,
        n,
        k,
        bias,
        bpe_in: a,
        bpe_out: out,
    }
    .figures())
}

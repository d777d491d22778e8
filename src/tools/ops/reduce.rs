//! Reductions (`sum`, `mean`, `max`, `min`, `norm`, `linalg_norm`, `std`, `var`,
//! `logsumexp`, `amin`, `amax`, `cumsum`, `cumprod`) under TraceLens's rules: FLOPs = the
//! input's elements; bytes = input + output, the output one element (TraceLens's parser of
//! `dim` never reads the recorded text), except the scans `cumsum` / `cumprod`, whose
//! output is as large as the input. The backward figures are the forward ones.

use super::args::{numel, Inputs, Model};
use super::dtype::tracelens_bpe;
use super::Figures;

pub(crate) fn reduce(inputs: &Inputs, scan: bool) -> Model<Figures> {
    if inputs.dims.is_none() {
        return Ok(Figures {
            flops: 0.0,
            bytes: None,
        });
    }
    let n = numel(&inputs.shape(0)?);
    let n_out = if scan { n } else { 1.0 };
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| (n + n_out) * b);
    Ok(Figures { flops: n, bytes })
}

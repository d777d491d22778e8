//! Vendor libraries' operators that TraceLens models through its extensions (AITER, vLLM,
//! SGLang), with the figures its rows show:
//!
//! - GEMMs with the weight as (N, K): `aiter::gemm_a16w16(A, W, bias?, ...)`,
//!   `vllm::rocm_unquantized_gemm(A, W, bias?)`: the GEMM rule, a bias when input 2 has a
//!   shape.
//! - RMS norm over n elements, C the last dimension, affine: FLOPs = (n/C)·(2C + 2) + 2n,
//!   bytes = 2n·bpe + C·bpe; the fused residual adds (`add_rmsnorm`,
//!   `rmsnorm2d_fwd_with_add_ck`) n FLOPs and 2n·bpe bytes more.
//! - `aiter::_groupnorm_run`: the normalization rule (C = dimension 1, affine, training).
//! - `sglang::store_cache(k, v, k_cache, v_cache, ...)`: no FLOPs, 4n·bpe bytes (k and v
//!   read and written).
//! - `sgl_kernel::rotary_embedding(positions, q, k, ...)`: over the n elements of q and k,
//!   3n FLOPs and 2n·bpe bytes.
//! - `sgl_kernel::silu_and_mul(out, x)`: over the output's n elements, 5n FLOPs and 3n·bpe
//!   bytes.

use super::args::{numel, Inputs, Model, Unmodelled};
use super::dtype::tracelens_bpe;
use super::Figures;

/// A GEMM whose second operand is the weight stored as (N, K).
pub(crate) fn gemm_nk(inputs: &Inputs) -> Model<Figures> {
    let (a, w) = (inputs.shape(0)?, inputs.shape(1)?);
    let ([m, k], [n, _]) = (&a[..], &w[..]) else {
        return Err(Unmodelled("not matrices"));
    };
    let (m, n, k) = (*m as f64, *n as f64, *k as f64);
    let bias = if inputs.has_shape(2) { 1.0 } else { 0.0 };
    let flops = 2.0 * m * n * k + bias * m * n;
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| (m * k + k * n + m * n + bias * n) * b);
    Ok(Figures { flops, bytes })
}

/// RMS norm, `fused_add` for the variants that add a residual first.
pub(crate) fn rms_norm(inputs: &Inputs, fused_add: bool) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let c = *shape.last().ok_or(Unmodelled("no last dimension"))? as f64;
    let n = numel(&shape);
    let add = if fused_add { 1.0 } else { 0.0 };
    let flops = n / c * (2.0 * c + 2.0) + 2.0 * n + add * n;
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| 2.0 * n * b + c * b + add * 2.0 * n * b);
    Ok(Figures { flops, bytes })
}

pub(crate) fn store_cache(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| 4.0 * n * b);
    Ok(Figures { flops: 0.0, bytes })
}

pub(crate) fn rotary_embedding(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(1)?) + numel(&inputs.shape(2)?);
    let bytes = tracelens_bpe(inputs.dtype(1)).map(|b| 2.0 * n * b);
    Ok(Figures {
        flops: 3.0 * n,
        bytes,
    })
}

pub(crate) fn silu_and_mul(inputs: &Inputs) -> Model<Figures> {
    let n = numel(&inputs.shape(0)?);
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| 3.0 * n * b);
    Ok(Figures {
        flops: 5.0 * n,
        bytes,
    })
}

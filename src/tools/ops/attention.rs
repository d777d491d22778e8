//! Scaled dot-product attention under TraceLens's rules, Q, K, V as (B, H, N, d):
//! FLOPs = B·H_Q·(2·N_Q·N_KV·d_qk + 2·N_Q·N_KV·d_v), the softmax ignored, halved when
//! causal, and a causal mask with N_Q != N_KV is refused (the row is left out); bytes =
//! (Q + K + V + O elements)·2 whatever the dtype.

use super::args::{Inputs, Model, Unmodelled};
use super::Figures;

/// Where an operator records its dropout and causal flags (concrete positions).
pub(crate) struct Layout {
    pub(crate) causal_at: usize,
}

/// `aten::_scaled_dot_product_{flash,efficient,cudnn}_attention(q, k, v, ...)`.
pub(crate) fn sdpa(inputs: &Inputs, layout: &Layout) -> Model<Figures> {
    let (q, k, v) = (inputs.shape(0)?, inputs.shape(1)?, inputs.shape(2)?);
    let ([b, hq, nq, dq], [bk, hk, nk, dk], [bv, hv, nv, dv]) = (&q[..], &k[..], &v[..]) else {
        return Err(Unmodelled("Q, K, V are not 4-dimensional"));
    };
    if b != bk || b != bv || hk != hv || nk != nv || dq != dk {
        return Err(Unmodelled("Q, K, V shapes do not agree"));
    }
    let causal = inputs
        .concrete(layout.causal_at)
        .is_ok_and(|t| t.eq_ignore_ascii_case("true"));
    let f = |x: &i64| *x as f64;
    let (b, hq, nq, nk, dqk, dv, hk) = (f(b), f(hq), f(nq), f(nk), f(dq), f(dv), f(hk));
    let mut flops = b * hq * (2.0 * nq * nk * dqk + 2.0 * nq * nk * dv);
    if causal {
        if nq != nk {
            return Err(Unmodelled("causal attention with N_Q != N_KV"));
        }
        flops /= 2.0;
    }
    let elements = b * nq * hq * dqk + b * nk * hk * dqk + b * nk * hk * dv + b * nq * hq * dv;
    Ok(Figures {
        flops,
        bytes: Some(elements * 2.0),
    })
}

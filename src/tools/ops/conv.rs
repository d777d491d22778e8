//! Convolutions under TraceLens's rules (after torch's flop counter): the output shape from
//! stride, padding, dilation (transposed too); FLOPs = 2·prod(out)·prod(w[1:]) (a transposed
//! convolution counts over the input's elements instead); bytes = (x + w + out)·bpe, the
//! input's bpe, input and weight of one dtype. A bias is never counted: TraceLens looks
//! for one only when exactly three inputs are recorded, and torch records nine.
//! Backward: input gradient + weight gradient, bytes (dO, w, dX) + (dO, x, dW).

use super::args::{numel, Inputs, Model, Unmodelled};
use super::dtype::tracelens_bpe;
use super::Figures;

/// One convolution's geometry.
pub(crate) struct Conv {
    pub(crate) x: Vec<i64>,
    pub(crate) w: Vec<i64>,
    pub(crate) out: Vec<i64>,
    transposed: bool,
    bpe: Option<f64>,
}

/// A concrete list input, one value broadcast to every spatial dimension.
fn per_dim(inputs: &Inputs, i: usize, dims: usize) -> Model<Vec<i64>> {
    let v = inputs.concrete_ints(i)?;
    match v.len() {
        1 => Ok(vec![v[0]; dims]),
        n if n == dims => Ok(v),
        _ => Err(Unmodelled("a convolution parameter has the wrong length")),
    }
}

/// Reads x, w and the parameters at concrete positions `params..params + 6` (stride,
/// padding, dilation, transposed, output padding, groups).
pub(crate) fn geometry(inputs: &Inputs, x_at: usize, params: usize) -> Model<Conv> {
    let (x, w) = (inputs.shape(x_at)?, inputs.shape(x_at + 1)?);
    if x.len() < 3 || w.len() != x.len() {
        return Err(Unmodelled("not a convolution's shapes"));
    }
    if inputs.dtype(x_at) != inputs.dtype(x_at + 1) {
        return Err(Unmodelled("input and weight dtypes differ"));
    }
    let dims = x.len() - 2;
    let stride = per_dim(inputs, params, dims)?;
    let padding = per_dim(inputs, params + 1, dims)?;
    let dilation = per_dim(inputs, params + 2, dims)?;
    let transposed = inputs.concrete(params + 3)?.eq_ignore_ascii_case("true");
    let out_pad = per_dim(inputs, params + 4, dims)?;
    let mut out = vec![x[0], w[if transposed { 1 } else { 0 }]];
    if transposed {
        let groups = inputs
            .concrete_ints(params + 5)?
            .first()
            .copied()
            .unwrap_or(1);
        out[1] = w[1] * groups;
    }
    for d in 0..dims {
        let (i, k) = (x[d + 2], w[d + 2]);
        let size = if transposed {
            (i - 1) * stride[d] - 2 * padding[d] + dilation[d] * (k - 1) + out_pad[d] + 1
        } else {
            (i + 2 * padding[d] - dilation[d] * (k - 1) - 1).div_euclid(stride[d]) + 1
        };
        out.push(size);
    }
    let bpe = tracelens_bpe(inputs.dtype(x_at));
    Ok(Conv {
        x,
        w,
        out,
        transposed,
        bpe,
    })
}

impl Conv {
    pub(crate) fn flops(&self) -> f64 {
        let over = if self.transposed { &self.x } else { &self.out };
        2.0 * numel(over) * numel(&self.w[1..])
    }

    fn bytes(&self) -> Option<f64> {
        self.bpe
            .map(|b| (numel(&self.x) + numel(&self.w) + numel(&self.out)) * b)
    }
}

/// `aten::convolution(x, w, bias, stride, padding, dilation, transposed, out_pad, groups)`.
pub(crate) fn forward(inputs: &Inputs) -> Model<Figures> {
    let c = geometry(inputs, 0, 3)?;
    Ok(Figures {
        flops: c.flops(),
        bytes: c.bytes(),
    })
}

/// The backward figures of a forward `aten::convolution`: both gradients.
pub(crate) fn forward_backward(inputs: &Inputs) -> Model<Figures> {
    let c = geometry(inputs, 0, 3)?;
    Ok(Figures {
        flops: 2.0 * c.flops(),
        bytes: c.bytes().map(|b| 2.0 * b),
    })
}

/// `aten::convolution_backward(grad_out, x, w, bias_sizes, stride, padding, dilation,
/// transposed, out_pad, groups, output_mask)`.
pub(crate) fn backward(inputs: &Inputs) -> Model<Figures> {
    let c = geometry(inputs, 1, 4)?;
    Ok(Figures {
        flops: 2.0 * c.flops(),
        bytes: c.bytes().map(|b| 2.0 * b),
    })
}

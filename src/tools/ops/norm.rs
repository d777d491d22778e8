//! Normalizations under TraceLens's rules, over n elements and C channels (batch norm: the
//! input's dimension 1; layer norm: the elements of the normalized shape):
//! FLOPs = 6C + 5n when training (3C + 2n otherwise); bytes = 2n·bpe + k·C·bpe with
//! k = 2, +1 affine, +1 bias (when affine), +2 training. TraceLens takes every batch norm
//! as affine (an absent tensor is recorded as `[]`, never missing) and training (any
//! non-empty concrete text, "False" included), and every layer norm as affine and training.
//! Batch norm's backward: FLOPs = 9n, bytes = 3n·bpe + 4C·bpe.

use super::args::{numel, Inputs, Model, Unmodelled};
use super::dtype::tracelens_bpe;
use super::Figures;

fn forward(n: f64, c: f64, bpe: Option<f64>, affine: bool, training: bool) -> Figures {
    let flops = if training {
        6.0 * c + 5.0 * n
    } else {
        3.0 * c + 2.0 * n
    };
    let k = 2.0 + if affine { 2.0 } else { 0.0 } + if training { 2.0 } else { 0.0 };
    Figures {
        flops,
        bytes: bpe.map(|b| 2.0 * n * b + k * c * b),
    }
}

/// `aten::{,native_,cudnn_,miopen_}batch_norm(input, weight, bias, mean, var, training, ...)`.
pub(crate) fn batch_norm(inputs: &Inputs) -> Model<Figures> {
    let training = inputs.concrete(5).is_ok_and(|t| !t.is_empty());
    batch_norm_training_as(inputs, training)
}

/// Batch norm's figures with `training` as given (the `exact` rules read the flag).
pub(crate) fn batch_norm_training_as(inputs: &Inputs, training: bool) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let c = *shape.get(1).ok_or(Unmodelled("no channel dimension"))? as f64;
    let bpe = tracelens_bpe(inputs.dtype(0));
    Ok(forward(numel(&shape), c, bpe, true, training))
}

/// `aten::{,native_}layer_norm(input, normalized_shape, weight, bias, ...)`.
pub(crate) fn layer_norm(inputs: &Inputs) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let c = numel(&inputs.concrete_ints(1)?);
    let bpe = tracelens_bpe(inputs.dtype(0));
    Ok(forward(numel(&shape), c, bpe, true, true))
}

/// `aten::native_batch_norm_backward(grad_out, input, ...)`.
pub(crate) fn batch_norm_backward(inputs: &Inputs) -> Model<Figures> {
    let shape = inputs.shape(0)?;
    let c = *shape.get(1).ok_or(Unmodelled("no channel dimension"))? as f64;
    let n = numel(&shape);
    let bytes = tracelens_bpe(inputs.dtype(0)).map(|b| 3.0 * n * b + 4.0 * c * b);
    Ok(Figures {
        flops: 9.0 * n,
        bytes,
    })
}

/// A group norm kernel (`aiter::_groupnorm_run`): the batch-norm figures, affine, training.
pub(crate) fn batch_norm_training(inputs: &Inputs) -> Model<Figures> {
    batch_norm_training_as(inputs, true)
}

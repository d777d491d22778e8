//! An operator's recorded inputs (`Input Dims`, `Input type`, `Concrete Inputs`), parsed
//! from the JSON text attribution keeps: the shapes, dtypes and literal values the models
//! read, by position.

use crate::json::value::{parse, Value};
use crate::read::attribution::OpArgs;

/// Why a model could not compute an operator's figures (the row is left out, as TraceLens
/// leaves out an event whose model raises).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unmodelled(pub(crate) &'static str);

pub(crate) type Model<T> = Result<T, Unmodelled>;

/// An operator's inputs, parsed: absent fields are empty lists.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
    pub(crate) dims: Option<Vec<Value>>,
    pub(crate) types: Vec<Value>,
    pub(crate) concrete: Vec<Value>,
}

fn list_of(text: Option<&str>) -> Option<Vec<Value>> {
    match parse(text?)? {
        Value::List(items) => Some(items),
        _ => None,
    }
}

impl Inputs {
    pub(crate) fn of(args: &OpArgs) -> Inputs {
        Inputs {
            dims: list_of(args.input_dims.as_deref()),
            types: list_of(args.input_type.as_deref()).unwrap_or_default(),
            concrete: list_of(args.concrete_inputs.as_deref()).unwrap_or_default(),
        }
    }

    /// The shape of input `i`: a list of integers (`[]` for a non-tensor argument).
    pub(crate) fn shape(&self, i: usize) -> Model<Vec<i64>> {
        let dims = self.dims.as_ref().ok_or(Unmodelled("no Input Dims"))?;
        match dims.get(i) {
            Some(Value::List(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(*n),
                    _ => Err(Unmodelled("a dimension is not an integer")),
                })
                .collect(),
            _ => Err(Unmodelled("no such input")),
        }
    }

    /// Whether input `i` has a non-empty shape (a tensor of rank >= 1).
    pub(crate) fn has_shape(&self, i: usize) -> bool {
        self.shape(i).is_ok_and(|s| !s.is_empty())
    }

    /// The dtype text of input `i` (`""` when absent).
    pub(crate) fn dtype(&self, i: usize) -> &str {
        match self.types.get(i) {
            Some(Value::Str(s)) => s,
            _ => "",
        }
    }

    /// The concrete value text of input `i`.
    pub(crate) fn concrete(&self, i: usize) -> Model<&str> {
        match self.concrete.get(i) {
            Some(Value::Str(s)) => Ok(s),
            _ => Err(Unmodelled("no such concrete input")),
        }
    }

    /// Concrete input `i` as a list of integers (`[2, 2]`) or one integer (`1`).
    pub(crate) fn concrete_ints(&self, i: usize) -> Model<Vec<i64>> {
        let bad = Unmodelled("a concrete input is not integers");
        match parse(self.concrete(i)?).ok_or(bad.clone())? {
            Value::Int(n) => Ok(vec![n]),
            Value::List(items) => items
                .iter()
                .map(|v| match v {
                    Value::Int(n) => Ok(*n),
                    _ => Err(bad.clone()),
                })
                .collect(),
            _ => Err(bad),
        }
    }
}

/// The number of elements of a shape (1 for `[]`), as a float (figures are floats).
pub(crate) fn numel(shape: &[i64]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_inputs_parse_by_position() {
        let args = OpArgs {
            input_dims: Some("[[10, 3], [], [[1, 2], [3]]]".into()),
            input_type: Some("[\"c10::BFloat16\", \"Scalar\"]".into()),
            concrete_inputs: Some("[\"\", \"[2, 2]\", \"1\", \"False\"]".into()),
            input_strides: None,
        };
        let inputs = Inputs::of(&args);
        assert_eq!(inputs.shape(0), Ok(vec![10, 3]));
        assert_eq!(inputs.shape(1), Ok(vec![]));
        assert!(inputs.shape(2).is_err());
        assert!(inputs.shape(3).is_err());
        assert!(inputs.has_shape(0) && !inputs.has_shape(1));
        assert_eq!(
            (inputs.dtype(0), inputs.dtype(1), inputs.dtype(5)),
            ("c10::BFloat16", "Scalar", "")
        );
        assert_eq!(inputs.concrete_ints(1), Ok(vec![2, 2]));
        assert_eq!(inputs.concrete_ints(2), Ok(vec![1]));
        assert!(inputs.concrete_ints(3).is_err());
        assert_eq!(numel(&[]), 1.0);
        assert_eq!(
            parse("[1.5, true, null]"),
            Some(Value::List(vec![
                Value::Float(1.5),
                Value::Other,
                Value::Other
            ]))
        );
    }
}

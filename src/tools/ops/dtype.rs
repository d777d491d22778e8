//! The dtypes of recorded inputs (`Input type`), read in one place: a name, without case,
//! gives a [`Dtype`], whose size the exact rules charge and whose kind picks the roofline's
//! peak, so that no spelling gets a size and no peak. TraceLens's byte table
//! ([`tracelens_bpe`]) is apart: it sizes the names it lists, not dtypes (`fp8` and `Scalar`
//! are in it, `bool` and `c10::Float8_e5m2fnuz` are not), and its rules reproduce it.

/// A dtype torch records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dtype {
    F64,
    F32,
    Bf16,
    F16,
    /// Any 8-bit float (`c10::Float8_e4m3fn`, `_e5m2`, their `fnuz` forms, `_e8m0fnu`).
    F8,
    /// Two 4-bit floats in a byte (`c10::Float4_e2m1fn_x2`).
    F4x2,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    Complex64,
    Complex128,
}

impl Dtype {
    /// The dtype a recorded name stands for, its case aside; `None` for a non-tensor
    /// (`Scalar`, `ScalarList`, `""`) or a name torch does not record.
    pub(crate) fn of(name: &str) -> Option<Dtype> {
        let lower = name.to_ascii_lowercase();
        Some(match lower.as_str() {
            "double" => Dtype::F64,
            "float" => Dtype::F32,
            "c10::bfloat16" => Dtype::Bf16,
            "c10::half" => Dtype::F16,
            "long int" | "long" => Dtype::I64,
            "int" => Dtype::I32,
            "short" => Dtype::I16,
            "signed char" | "char" => Dtype::I8,
            "unsigned char" => Dtype::U8,
            "bool" => Dtype::Bool,
            "c10::complex<float>" => Dtype::Complex64,
            "c10::complex<double>" => Dtype::Complex128,
            n if n.starts_with("c10::float8") => Dtype::F8,
            n if n.starts_with("c10::float4") => Dtype::F4x2,
            _ => return None,
        })
    }

    /// Bytes per element as stored.
    pub(crate) fn bytes(self) -> f64 {
        match self {
            Dtype::Complex128 => 16.0,
            Dtype::F64 | Dtype::I64 | Dtype::Complex64 => 8.0,
            Dtype::F32 | Dtype::I32 => 4.0,
            Dtype::Bf16 | Dtype::F16 | Dtype::I16 => 2.0,
            Dtype::F8 | Dtype::F4x2 | Dtype::I8 | Dtype::U8 | Dtype::Bool => 1.0,
        }
    }

    /// A real floating-point dtype (what an operator computes in, for its peak).
    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::F64 | Dtype::F32 | Dtype::Bf16 | Dtype::F16 | Dtype::F8 | Dtype::F4x2
        )
    }
}

/// TraceLens's table (`name2bpe`, case-insensitive): `None` for names it does not know
/// (`bool`, `short`, complex, `ScalarList`, `""`), which leaves an operator's bytes unknown.
pub(crate) fn tracelens_bpe(name: &str) -> Option<f64> {
    let lower = name.to_ascii_lowercase();
    Some(match lower.as_str() {
        "double" | "long int" => 8.0,
        "float" | "scalar" | "int" => 4.0,
        "c10::half" | "c10::bfloat16" => 2.0,
        "c10::float8_e4m3fnuz"
        | "c10::float8_e4m3fn"
        | "c10::float8_e5m2"
        | "c10::float8_e8m0fnu"
        | "unsigned char"
        | "signed char"
        | "fp8"
        | "c10::float4_e2m1fn_x2"
        | "fp4" => 1.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracelens_names_are_read_without_case_and_unknown_ones_have_no_size() {
        assert_eq!(tracelens_bpe("c10::BFloat16"), Some(2.0));
        assert_eq!(tracelens_bpe("Scalar"), Some(4.0));
        assert_eq!(tracelens_bpe("long int"), Some(8.0));
        assert_eq!(tracelens_bpe("c10::Float8_e4m3fn"), Some(1.0));
        assert_eq!(tracelens_bpe("bool"), None);
        assert_eq!(tracelens_bpe(""), None);
    }

    #[test]
    fn every_spelling_of_a_dtype_is_one_dtype_with_one_size() {
        for name in ["c10::BFloat16", "c10::bfloat16", "C10::BFLOAT16"] {
            assert_eq!(Dtype::of(name), Some(Dtype::Bf16));
        }
        assert_eq!(Dtype::of("c10::Float8_e5m2fnuz"), Some(Dtype::F8));
        assert_eq!(
            Dtype::of("c10::complex<double>").map(Dtype::bytes),
            Some(16.0)
        );
        assert_eq!(Dtype::of("bool").map(Dtype::bytes), Some(1.0));
        assert!(Dtype::of("long int").is_some_and(|d| !d.is_float()));
        for non_tensor in ["Scalar", "ScalarList", ""] {
            assert_eq!(Dtype::of(non_tensor), None);
        }
    }
}

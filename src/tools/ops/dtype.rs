//! Bytes per element of a recorded dtype name (`Input type`).

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
    fn names_are_read_without_case_and_unknown_ones_have_no_size() {
        assert_eq!(tracelens_bpe("c10::BFloat16"), Some(2.0));
        assert_eq!(tracelens_bpe("Scalar"), Some(4.0));
        assert_eq!(tracelens_bpe("long int"), Some(8.0));
        assert_eq!(tracelens_bpe("c10::Float8_e4m3fn"), Some(1.0));
        assert_eq!(tracelens_bpe("bool"), None);
        assert_eq!(tracelens_bpe(""), None);
    }
}

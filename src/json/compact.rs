//! JSON text in one form: the whitespace between its tokens dropped, so that one value
//! printed on one line or over many (`[\n  [2, 3]\n]`) has one text (`[[2,3]]`). Strings are
//! kept as written (their escapes too), and so are numbers: this is a form of the text, not
//! a parse.

/// `text` without the whitespace outside its strings.
pub(crate) fn compact(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            (in_string, escaped) = (escaped || b != b'"', !escaped && b == b'\\');
        } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            continue;
        } else if b == b'"' {
            in_string = true;
        }
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn drops_whitespace_between_tokens_only() {
        let text = b"[\n  [2, 3],\n  \"c10::Half\", \"a \\\" b\", \"x\\\\\" , 1.50\n]";
        assert_eq!(
            compact(text),
            br#"[[2,3],"c10::Half","a \" b","x\\",1.50]"#.to_vec()
        );
        assert_eq!(compact(b" [ ] "), b"[]".to_vec());
    }
}

//! A short JSON value's text parsed into a small tree: the argument texts of operators
//! (`Input Dims`, `Input type`, `Concrete Inputs`). Strings are unescaped as the object
//! reader unescapes them ([`crate::json::object::unescaped`]); lists nest 8 deep at most
//! (deeper is no value).

/// A JSON value: lists, numbers and strings; `true`, `false` and `null` are `Other`, and
/// an object is no value (the recorded inputs hold none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Other,
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        self.ws();
        match *self.s.get(self.pos)? {
            b'[' if depth < 8 => self.list(depth),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => {
                let rest = &self.s[self.pos..];
                let word = rest.iter().take_while(|b| b.is_ascii_alphabetic()).count();
                (word > 0).then(|| {
                    self.pos += word;
                    Value::Other
                })
            }
        }
    }

    fn list(&mut self, depth: usize) -> Option<Value> {
        self.pos += 1;
        let mut items = Vec::new();
        self.ws();
        if self.s.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Some(Value::List(items));
        }
        loop {
            items.push(self.value(depth + 1)?);
            self.ws();
            match *self.s.get(self.pos)? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Some(Value::List(items));
                }
                _ => return None,
            }
        }
    }

    fn string(&mut self) -> Option<Value> {
        let start = self.pos + 1;
        let mut i = start;
        while *self.s.get(i)? != b'"' {
            i += if self.s[i] == b'\\' { 2 } else { 1 };
        }
        self.pos = i + 1;
        let body = crate::json::object::unescaped(&self.s[start..i])?;
        Some(Value::Str(String::from_utf8_lossy(&body).into_owned()))
    }

    fn number(&mut self) -> Option<Value> {
        let start = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
        {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).ok()?;
        Some(match text.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::Float(text.parse().ok()?),
        })
    }
}

/// Parses a JSON value's text.
pub(crate) fn parse(text: &str) -> Option<Value> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
    };
    let v = p.value(0)?;
    p.ws();
    (p.pos == p.s.len()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::{parse, Value};

    #[test]
    fn lists_numbers_strings_and_nothing_else() {
        assert_eq!(
            parse(" [ -3, 2.5e0, \"a\\\"b\" ] "),
            Some(Value::List(vec![
                Value::Int(-3),
                Value::Float(2.5),
                Value::Str("a\"b".into()),
            ]))
        );
        assert_eq!(parse("{\"a\": 1}"), None);
        assert_eq!(parse("[1] 2"), None);
        assert_eq!(parse("[[[[[[[[[1]]]]]]]]]"), None);
        assert!(parse("[[[[[[[[1]]]]]]]]").is_some());
    }
}

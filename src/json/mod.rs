//! JSON text, used by both wings: the strict streaming lexer (`lexer`) and its fast path over
//! text in memory (`scan`), the tolerant reader of damaged text (`tolerant`), numbers and
//! strings written as JSON (`render`), numbers as exact decimals (`decimal`), the members
//! of an object's text (`object`), a value's text in one form (`compact`) and a short value
//! parsed into a tree (`value`).

pub(crate) mod compact;
pub(crate) mod decimal;
pub(crate) mod lexer;
pub(crate) mod object;
pub(crate) mod render;
pub(crate) mod scan;
pub(crate) mod tolerant;
pub(crate) mod value;
